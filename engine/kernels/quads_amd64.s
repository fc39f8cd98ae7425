#include "textflag.h"

// Quad sums of K-quant super-blocks (kQuadFormat.quads in ggml_quant.go): out[8g+l] is the integer sum of the four
// products of elements 32g+4l..32g+4l+3, the weights as kInts holds them (Q6_K's codes without their -32, Q3_K's and
// IQ4_XS's signed) times the Q8_K activations.

DATA quadnib<>+0(SB)/4, $0x0f0f0f0f
GLOBL quadnib<>(SB), RODATA|NOPTR, $4
DATA quadonesw<>+0(SB)/4, $0x00010001
GLOBL quadonesw<>(SB), RODATA|NOPTR, $4
DATA quadbit0<>+0(SB)/4, $0x01010101
GLOBL quadbit0<>(SB), RODATA|NOPTR, $4
DATA quad16<>+0(SB)/4, $0x10101010
GLOBL quad16<>(SB), RODATA|NOPTR, $4
DATA quad03<>+0(SB)/4, $0x03030303
GLOBL quad03<>(SB), RODATA|NOPTR, $4
DATA quad0c<>+0(SB)/4, $0x0c0c0c0c
GLOBL quad0c<>(SB), RODATA|NOPTR, $4
DATA quad30<>+0(SB)/4, $0x30303030
GLOBL quad30<>(SB), RODATA|NOPTR, $4
DATA quadc0<>+0(SB)/4, $0xc0c0c0c0
GLOBL quadc0<>(SB), RODATA|NOPTR, $4

// QUADARGS loads the arguments (the super-block in DI, the activations in SI, out in DX) and the constants
// QUADOUT and the nibble masks need.
#define QUADARGS \
	MOVQ b_base+0(FP), DI; MOVQ qs_base+24(FP), SI; MOVQ out+48(FP), DX; \
	VPBROADCASTD quadnib<>(SB), Y15; VPBROADCASTD quadonesw<>(SB), Y14

// QUADOUT(src, off): the 32 unsigned codes in src against the activations at off(SI), quad sums to off(DX).
// Y14: 0x0001 words.
#define QUADOUT(src, off) \
	VPMADDUBSW off(SI), src, src; VPMADDWD Y14, src, src; VMOVDQU src, off(DX)

// Q4KQ(boff, a0, a1): the 32 bytes at boff(DI), low nibbles the group at a0, high nibbles the one at a1.
#define Q4KQ(boff, a0, a1) \
	VMOVDQU boff(DI), Y0; VPAND Y15, Y0, Y1; VPSRLW $4, Y0, Y2; VPAND Y15, Y2, Y2; \
	QUADOUT(Y1, a0); QUADOUT(Y2, a1)

// func quadsQ4_K(b []byte, qs []int8, out *[64]int32)
// b: a Q4_K super-block (144 bytes: d, dmin, 12 bytes of scales, 128 bytes of nibbles); qs: its 256 activations.
TEXT ·quadsQ4_K(SB), NOSPLIT, $0-56
	QUADARGS
	Q4KQ(16, 0, 32)
	Q4KQ(48, 64, 96)
	Q4KQ(80, 128, 160)
	Q4KQ(112, 192, 224)
	VZEROUPPER
	RET

// HIBIT(dst): dst |= 0x10 in the bytes whose high-bit byte (Y12) has the bit of Y13 set; then Y13 moves to the
// next bit. Y11: 0x10 bytes.
#define HIBIT(dst) \
	VPAND Y13, Y12, Y3; VPCMPEQB Y13, Y3, Y3; VPAND Y11, Y3, Y3; VPOR Y3, dst, dst; VPADDB Y13, Y13, Y13

// Q5KQ(boff, a0, a1): Q4KQ with the fifth bit of each weight from the next two bits of qh.
#define Q5KQ(boff, a0, a1) \
	VMOVDQU boff(DI), Y0; VPAND Y15, Y0, Y1; VPSRLW $4, Y0, Y2; VPAND Y15, Y2, Y2; \
	HIBIT(Y1); HIBIT(Y2); QUADOUT(Y1, a0); QUADOUT(Y2, a1)

// func quadsQ5_K(b []byte, qs []int8, out *[64]int32)
// b: a Q5_K super-block (176 bytes: d, dmin, 12 bytes of scales, 32 bytes of high bits, 128 bytes of nibbles;
// the high bit of element 64g+32h+l is bit 2g+h of qh[l]).
TEXT ·quadsQ5_K(SB), NOSPLIT, $0-56
	QUADARGS
	VPBROADCASTD quadbit0<>(SB), Y13
	VPBROADCASTD quad16<>(SB), Y11
	VMOVDQU 16(DI), Y12
	Q5KQ(48, 0, 32)
	Q5KQ(80, 64, 96)
	Q5KQ(112, 128, 160)
	Q5KQ(144, 192, 224)
	VZEROUPPER
	RET

// Q6KHALF(qla, qlb, qh, a0, a1, a2, a3): the 128 weights of one half of a Q6_K super-block, whose low nibbles
// are the 32 bytes at qla(DI) and the 32 at qlb(DI) and high bit pairs the 32 bytes at qh(DI), against the
// activations of the groups at a0(SI) to a3(SI). Y7-Y10: the 0x03, 0x0c, 0x30, 0xc0 masks.
#define Q6KHALF(qla, qlb, qh, a0, a1, a2, a3) \
	VMOVDQU qla(DI), Y4; VMOVDQU qlb(DI), Y5; VMOVDQU qh(DI), Y6; \
	VPAND Y15, Y4, Y1; VPAND Y7, Y6, Y2; VPSLLW $4, Y2, Y2; VPOR Y2, Y1, Y1; QUADOUT(Y1, a0); \
	VPAND Y15, Y5, Y1; VPAND Y8, Y6, Y2; VPSLLW $2, Y2, Y2; VPOR Y2, Y1, Y1; QUADOUT(Y1, a1); \
	VPSRLW $4, Y4, Y1; VPAND Y15, Y1, Y1; VPAND Y9, Y6, Y2; VPOR Y2, Y1, Y1; QUADOUT(Y1, a2); \
	VPSRLW $4, Y5, Y1; VPAND Y15, Y1, Y1; VPAND Y10, Y6, Y2; VPSRLW $2, Y2, Y2; VPOR Y2, Y1, Y1; QUADOUT(Y1, a3)

// func quadsQ6_K(b []byte, qs []int8, out *[64]int32)
// b: a Q6_K super-block (210 bytes: 128 bytes of low nibbles, 64 of high bit pairs, 16 scales, d).
TEXT ·quadsQ6_K(SB), NOSPLIT, $0-56
	QUADARGS
	VPBROADCASTD quad03<>(SB), Y7
	VPBROADCASTD quad0c<>(SB), Y8
	VPBROADCASTD quad30<>(SB), Y9
	VPBROADCASTD quadc0<>(SB), Y10
	Q6KHALF(0, 32, 128, 0, 32, 64, 96)
	Q6KHALF(64, 96, 160, 128, 160, 192, 224)
	VZEROUPPER
	RET

// Q2KQ(boff, shift, a): the 32 two-bit weights at bit shift of the bytes at boff(DI), the group at a. Y13: 0x03.
#define Q2KQ(boff, shift, a) \
	VMOVDQU boff(DI), Y0; VPSRLW $shift, Y0, Y1; VPAND Y13, Y1, Y1; QUADOUT(Y1, a)

// func quadsQ2_K(b []byte, qs []int8, out *[64]int32)
// b: a Q2_K super-block (84 bytes: 16 bytes of 4-bit scales and minimums, 64 bytes of 2-bit weights, d, dmin;
// group g's weights at bit 2(g%4) of the 32 bytes from 16+32(g/4)).
TEXT ·quadsQ2_K(SB), NOSPLIT, $0-56
	QUADARGS
	VPBROADCASTD quad03<>(SB), Y13
	Q2KQ(16, 0, 0)
	Q2KQ(16, 2, 32)
	Q2KQ(16, 4, 64)
	Q2KQ(16, 6, 96)
	Q2KQ(48, 0, 128)
	Q2KQ(48, 2, 160)
	Q2KQ(48, 4, 192)
	Q2KQ(48, 6, 224)
	VZEROUPPER
	RET

// IQ4XSQ(boff, a): the 32 signed grid values of the 16 bytes of nibbles at boff(DI) (low nibbles the first 16)
// against the activations at a(SI), their quad sums to a(DX), as signed products (|w| times a·sign(w)). Y12:
// iq4Bytes.
#define IQ4XSQ(boff, a) \
	VMOVDQU boff(DI), X0; VPSRLW $4, X0, X1; VINSERTI128 $1, X1, Y0, Y0; VPAND Y15, Y0, Y0; VPSHUFB Y0, Y12, Y0; \
	VMOVDQU a(SI), Y2; VPSIGNB Y0, Y0, Y1; VPSIGNB Y0, Y2, Y2; VPMADDUBSW Y2, Y1, Y1; VPMADDWD Y14, Y1, Y1; \
	VMOVDQU Y1, a(DX)

// func quadsIQ4_XS(b []byte, qs []int8, out *[64]int32)
// b: an IQ4_XS super-block (136 bytes: d, scales_h, 4 bytes of scales_l, 8 sub-blocks of 16 bytes of nibbles).
TEXT ·quadsIQ4_XS(SB), NOSPLIT, $0-56
	QUADARGS
	VBROADCASTI128 ·iq4Bytes(SB), Y12
	IQ4XSQ(8, 0)
	IQ4XSQ(24, 32)
	IQ4XSQ(40, 64)
	IQ4XSQ(56, 96)
	IQ4XSQ(72, 128)
	IQ4XSQ(88, 160)
	IQ4XSQ(104, 192)
	IQ4XSQ(120, 224)
	VZEROUPPER
	RET

DATA quad04<>+0(SB)/4, $0x04040404
GLOBL quad04<>(SB), RODATA|NOPTR, $4

// Q3KQ(boff, shift, a): group g of a Q3_K super-block: its low two bits at bit shift of the 32 bytes at boff(DI),
// 4 added where its bit of hmask (Y12; Y13 holds the bit, moved on to the next) is set, against the activations at
// a(SI); the quad sums less 4 times the activations' quad sums (the weights are those codes less 4), to a(DX). Y7:
// 0x03, Y9: 0x01, Y10: 0x04 bytes.
#define Q3KQ(boff, shift, a) \
	VMOVDQU boff(DI), Y0; VPSRLW $shift, Y0, Y1; VPAND Y7, Y1, Y1; \
	VPAND Y13, Y12, Y3; VPCMPEQB Y13, Y3, Y3; VPAND Y10, Y3, Y3; VPOR Y3, Y1, Y1; VPADDB Y13, Y13, Y13; \
	VMOVDQU a(SI), Y2; VPMADDUBSW Y2, Y1, Y1; VPMADDWD Y14, Y1, Y1; \
	VPMADDUBSW Y2, Y9, Y2; VPMADDWD Y14, Y2, Y2; VPSLLD $2, Y2, Y2; VPSUBD Y2, Y1, Y1; VMOVDQU Y1, a(DX)

// func quadsQ3_K(b []byte, qs []int8, out *[64]int32)
// b: a Q3_K super-block (110 bytes: 32 bytes of hmask, 64 of low bit pairs, 12 of scales, d; group g's low bits
// at bit 2(g%4) of the 32 bytes from 32+32(g/4), its high bit bit g of hmask; weights (low | high<<2) - 4).
TEXT ·quadsQ3_K(SB), NOSPLIT, $0-56
	QUADARGS
	VPBROADCASTD quad03<>(SB), Y7
	VPBROADCASTD quadbit0<>(SB), Y9
	VPBROADCASTD quad04<>(SB), Y10
	VMOVDQA Y9, Y13
	VMOVDQU 0(DI), Y12
	Q3KQ(32, 0, 0)
	Q3KQ(32, 2, 32)
	Q3KQ(32, 4, 64)
	Q3KQ(32, 6, 96)
	Q3KQ(64, 0, 128)
	Q3KQ(64, 2, 160)
	Q3KQ(64, 4, 192)
	Q3KQ(64, 6, 224)
	VZEROUPPER
	RET
