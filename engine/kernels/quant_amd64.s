#include "textflag.h"

// Byte and word constants.
DATA nibmask<>+0(SB)/4, $0x0f0f0f0f
GLOBL nibmask<>(SB), RODATA|NOPTR, $4
DATA threemask<>+0(SB)/4, $0x03030303
GLOBL threemask<>(SB), RODATA|NOPTR, $4
DATA eights<>+0(SB)/4, $0x08080808
GLOBL eights<>(SB), RODATA|NOPTR, $4
DATA thirtytwos<>+0(SB)/4, $0x20202020
GLOBL thirtytwos<>(SB), RODATA|NOPTR, $4
DATA fours<>+0(SB)/4, $0x04040404
GLOBL fours<>(SB), RODATA|NOPTR, $4
DATA ones8<>+0(SB)/4, $0x01010101
GLOBL ones8<>(SB), RODATA|NOPTR, $4
DATA onesw<>+0(SB)/4, $0x00010001
GLOBL onesw<>(SB), RODATA|NOPTR, $4
DATA f0s<>+0(SB)/4, $0xf0f0f0f0
GLOBL f0s<>(SB), RODATA|NOPTR, $4
DATA sixteens<>+0(SB)/4, $0x10101010
GLOBL sixteens<>(SB), RODATA|NOPTR, $4
// ·bitSpread spreads the four bytes of a 32-bit word over eight bytes each (grid_amd64.s reads it too); bitsel
// has, in byte i of each eight, every
// bit set but bit i (ggml's bytes_from_bits_32).
DATA ·bitSpread+0(SB)/8, $0x0000000000000000
DATA ·bitSpread+8(SB)/8, $0x0101010101010101
DATA ·bitSpread+16(SB)/8, $0x0202020202020202
DATA ·bitSpread+24(SB)/8, $0x0303030303030303
GLOBL ·bitSpread(SB), RODATA|NOPTR, $32
DATA bitsel<>+0(SB)/8, $0x7fbfdfeff7fbfdfe
GLOBL bitsel<>(SB), RODATA|NOPTR, $8

// HSUM8 sums Y0's lanes into X0 as hsum8 does: (a0+a4 + a2+a6) + (a1+a5 + a3+a7). X1 is scratch.
#define HSUM8 \
	VEXTRACTF128 $1, Y0, X1; VADDPS X1, X0, X0; VMOVHLPS X0, X0, X1; VADDPS X1, X0, X0; \
	VMOVSHDUP X0, X1; VADDSS X1, X0, X0

// HSUMR(acc, X) sums the eight lanes of Y`acc` into X`acc` as HSUM8 does, with X4 as scratch.
#define HSUMR(ya, xa) \
	VEXTRACTF128 $1, ya, X4; VADDPS X4, xa, xa; VMOVHLPS xa, xa, X4; VADDPS X4, xa, xa; \
	VMOVSHDUP xa, X4; VADDSS X4, xa, xa

// SIGNEDDOT: Y3 = eight int32 lanes of the products of the signed weights in Y1 with the activations in Y2
// (Y2 is clobbered): |w| times a·sign(w), as unsigned × signed byte pairs, then pairs of pairs.
#define SIGNEDDOT \
	VPSIGNB Y1, Y1, Y3; VPSIGNB Y1, Y2, Y2; VPMADDUBSW Y2, Y3, Y3; VPMADDWD Y15, Y3, Y3

// BLOCKF: acc (Y0) += (d_w · d_a) · float(Y3), with d_w the float16 at off(DI) and d_a the float32 at (R8).
#define BLOCKF(off) \
	VCVTDQ2PS Y3, Y3; VPBROADCASTW off(DI), X4; VCVTPH2PS X4, Y4; VBROADCASTSS (R8), Y5; VMULPS Y5, Y4, Y4; \
	VMULPS Y3, Y4, Y3; VADDPS Y3, Y0, Y0

// BLOCKFMA: BLOCKF with the scaled lanes added by one fused multiply-add, as llama.cpp's x86 kernels do
// (LinearQuantGGML).
#define BLOCKFMA(off) \
	VCVTDQ2PS Y3, Y3; VPBROADCASTW off(DI), X4; VCVTPH2PS X4, Y4; VBROADCASTSS (R8), Y5; VMULPS Y5, Y4, Y4; \
	VFMADD231PS Y3, Y4, Y0

// Q50WEIGHTS: Y1 = a Q5_0 block's 32 weights, (nibble | high<<4) - 16 made as ggml does: the nibble or'ed with
// 0xf0 where the high bit is clear. Needs BITSARGS and Y9 = f0s.
#define Q50WEIGHTS \
	NIBBLES32(6); BITS32(2); VPANDN Y9, Y6, Y6; VPOR Y6, Y1, Y1

// Q51WEIGHTS: Y1 = a Q5_1 block's 32 weights, nibble | high<<4. Needs BITSARGS and Y9 = sixteens.
#define Q51WEIGHTS \
	NIBBLES32(8); BITS32(4); VPAND Y9, Y6, Y6; VPOR Y6, Y1, Y1

// Q40WEIGHTS: Y1 = a Q4_0 block's 32 weights (nibble - 8), the block at DI; Y13: 0x08 bytes.
#define Q40WEIGHTS \
	NIBBLES32(2); VPSUBB Y13, Y1, Y1

// NIBBLES32(off): Y1 = the 32 nibbles of the 16 bytes at off(DI) in element order (low nibbles 0..15, high
// 16..31).
#define NIBBLES32(off) \
	VMOVDQU off(DI), X1; VPSRLW $4, X1, X2; VINSERTI128 $1, X2, Y1, Y1; VPAND Y14, Y1, Y1

// BITS32(off): Y6 = the 32 bits of the 32-bit word at off(DI) as bytes, 0xff where the bit is set (byte i: bit
// i). Needs Y12 = ·bitSpread, Y11 = bitsel (broadcast), Y10 = all ones.
#define BITS32(off) \
	VPBROADCASTD off(DI), Y6; VPSHUFB Y12, Y6, Y6; VPOR Y11, Y6, Y6; VPCMPEQB Y10, Y6, Y6

// BITSARGS loads BITS32's constants.
#define BITSARGS \
	VMOVDQU ·bitSpread(SB), Y12; VPBROADCASTQ bitsel<>(SB), Y11; VPCMPEQB Y10, Y10, Y10

// ARGS loads the common arguments: the weight row b in DI, x's values in SI and scales in R8, the block count
// (len(d)) in CX; zeroes the accumulator and loads the constants (Y15: int16 ones, Y14: nibble mask).
#define ARGS \
	MOVQ b_base+0(FP), DI; MOVQ qs_base+24(FP), SI; MOVQ d_base+48(FP), R8; MOVQ d_len+56(FP), CX; \
	VXORPS Y0, Y0, Y0; VPBROADCASTD onesw<>(SB), Y15; VPBROADCASTD nibmask<>(SB), Y14

// KMINS: X7 (the scalar accumulator of minimum terms) += (dmin · d_a) · Σ_j m_j·(bsums[2j] + bsums[2j+1]),
// with the minimums as 8 int16 at 16(SP), dmin the float16 at off(DI), the sums of 16 at (R9). Clobbers Y6, Y8,
// Y9, AX.
#define KMINS(off) \
	VMOVDQU 16(SP), X8; VPUNPCKHWD X8, X8, X9; VPUNPCKLWD X8, X8, X8; VINSERTI128 $1, X9, Y8, Y8; \
	KMINSUM(off)

// KMINSUM(off): KMINS with the 16 minimums (one per 16 activations) as int16 in Y8.
#define KMINSUM(off) \
	VMOVDQU (R9), Y6; VPMADDWD Y8, Y6, Y6; \
	VEXTRACTI128 $1, Y6, X8; VPADDD X8, X6, X6; VPSHUFD $0x4e, X6, X8; VPADDD X8, X6, X6; \
	VPSHUFD $0xb1, X6, X8; VPADDD X8, X6, X6; VCVTDQ2PS X6, X6; \
	VPBROADCASTW off(DI), X8; VCVTPH2PS X8, X8; VMULSS (R8), X8, X8; VMULSS X6, X8, X8; VADDSS X8, X7, X7

// KFLOAT: acc (Y0) += (d · d_a) · float(Y11), d the float16 at off(DI).
#define KFLOAT(off) \
	VCVTDQ2PS Y11, Y3; VPBROADCASTW off(DI), X4; VCVTPH2PS X4, Y4; VBROADCASTSS (R8), Y5; VMULPS Y5, Y4, Y4; \
	VMULPS Y3, Y4, Y3; VADDPS Y3, Y0, Y0

// Q4KSCALES unpacks a Q4_K super-block's 6-bit scales and minimums (ggml's get_scale_min_k4, four bytes at a
// time as ggml's x86 code does) into 8 int16 scales at 0(SP) and 8 int16 minimums at 16(SP). The bytes are put
// together in registers, so that every later load reads within one earlier store (a load spanning two smaller
// stores would wait for them to reach the cache). Clobbers AX, BX, DX, X1.
#define Q4KSCALES \
	MOVL 4(DI), AX; ANDL $0x3f3f3f3f, AX; \
	MOVL 4(DI), BX; SHRL $6, BX; ANDL $0x03030303, BX; SHLL $4, BX; \
	MOVL 12(DI), DX; ANDL $0x0f0f0f0f, DX; ORL DX, BX; \
	SHLQ $32, BX; ORQ BX, AX; MOVQ AX, X1; VPMOVZXBW X1, X1; VMOVDQU X1, 0(SP); \
	MOVL 8(DI), AX; ANDL $0x3f3f3f3f, AX; \
	MOVL 8(DI), BX; SHRL $6, BX; ANDL $0x03030303, BX; SHLL $4, BX; \
	MOVL 12(DI), DX; SHRL $4, DX; ANDL $0x0f0f0f0f, DX; ORL DX, BX; \
	SHLQ $32, BX; ORQ BX, AX; MOVQ AX, X1; VPMOVZXBW X1, X1; VMOVDQU X1, 16(SP)

// NIBS(off): Y2 = the low nibbles of the 32 bytes at off(DI), Y1 the high ones (Y14: nibble mask).
#define NIBS(off) \
	VMOVDQU off(DI), Y1; VPAND Y14, Y1, Y2; VPSRLW $4, Y1, Y1; VPAND Y14, Y1, Y1

// HIGHBIT(shift, q): Y`q` |= bit `shift` of each byte of Y12 (the high bits), as 0x10. Y13: 0x01 bytes.
#define HIGHBIT(shift, q) \
	VPSRLW $shift, Y12, Y10; VPAND Y13, Y10, Y10; VPSLLW $4, Y10, Y10; VPOR Y10, q, q

// KPAIR(q, aoff, soff): the K-quant lanes Y11 += scale·(unsigned weights Y`q` × activations at aoff(SI)), the
// int16 scale at soff(SP). Clobbers Y`q`, Y4.
#define KPAIR(q, aoff, soff) \
	VPMADDUBSW aoff(SI), q, q; VPBROADCASTW soff(SP), Y4; VPMADDWD Y4, q, q; VPADDD q, Y11, Y11

// Q4KCHUNK(off, a0, a1, s0, s1): the 64 weights of the 32 bytes of nibbles at off(DI), low then high nibbles,
// against the activations at a0(SI) and a1(SI) with the scales at s0(SP) and s1(SP).
#define Q4KCHUNK(off, a0, a1, s0, s1) \
	NIBS(off); KPAIR(Y2, a0, s0); KPAIR(Y1, a1, s1)

// Q5KCHUNK(off, h0, h1, a0, a1, s0, s1): Q4KCHUNK with the high bits h0 and h1 of Y12 or'ed in.
#define Q5KCHUNK(off, h0, h1, a0, a1, s0, s1) \
	NIBS(off); HIGHBIT(h0, Y2); HIGHBIT(h1, Y1); KPAIR(Y2, a0, s0); KPAIR(Y1, a1, s1)

// KNEXT(size, loop): a Q4_K/Q5_K super-block's float parts, then on to the next (size bytes) or out of the loop
// with the result.
#define KNEXT(size, loop) \
	KFLOAT(0); KMINS(2); ADDQ $size, DI; ADDQ $256, SI; ADDQ $4, R8; ADDQ $32, R9; DECQ CX; JNZ loop; \
	HSUM8; VSUBSS X7, X0, X0; VZEROUPPER; MOVSS X0, ret+96(FP); RET

// ONESIGNED(size, loop): the rest of a one-row kernel's block of signed weights (in Y1) against Q8_0
// activations, then on to the next block (size bytes) or out with the result.
#define ONESIGNED(size, loop) \
	VMOVDQU (SI), Y2; SIGNEDDOT; BLOCKF(0); ADDQ $size, DI; ADDQ $32, SI; ADDQ $4, R8; DECQ CX; JNZ loop; \
	HSUM8; VZEROUPPER; MOVSS X0, ret+72(FP); RET

// ONEMIN(size, loop): the rest of a one-row kernel's block of unsigned weights (in Y1) with a minimum (the
// float16 at 2(DI)) against Q8_1 activations, the m·s into X7; then on to the next block or out with the result.
#define ONEMIN(size, loop) \
	VPMADDUBSW (SI), Y1, Y3; VPMADDWD Y15, Y3, Y3; BLOCKF(0); \
	VPBROADCASTW 2(DI), X6; VCVTPH2PS X6, X6; VMULSS (R9), X6, X6; VADDSS X6, X7, X7; \
	ADDQ $size, DI; ADDQ $32, SI; ADDQ $4, R8; ADDQ $4, R9; DECQ CX; JNZ loop; \
	HSUM8; VADDSS X7, X0, X0; VZEROUPPER; MOVSS X0, ret+96(FP); RET

// ONESIGNEDFMA and ONEMINFMA are ONESIGNED and ONEMIN with BLOCKFMA. The minimum terms m·s are exact products
// (two float16 values), so fusing their additions would change nothing.
#define ONESIGNEDFMA(size, loop) \
	VMOVDQU (SI), Y2; SIGNEDDOT; BLOCKFMA(0); ADDQ $size, DI; ADDQ $32, SI; ADDQ $4, R8; DECQ CX; JNZ loop; \
	HSUM8; VZEROUPPER; MOVSS X0, ret+72(FP); RET

#define ONEMINFMA(size, loop) \
	VPMADDUBSW (SI), Y1, Y3; VPMADDWD Y15, Y3, Y3; BLOCKFMA(0); \
	VPBROADCASTW 2(DI), X6; VCVTPH2PS X6, X6; VMULSS (R9), X6, X6; VADDSS X6, X7, X7; \
	ADDQ $size, DI; ADDQ $32, SI; ADDQ $4, R8; ADDQ $4, R9; DECQ CX; JNZ loop; \
	HSUM8; VADDSS X7, X0, X0; VZEROUPPER; MOVSS X0, ret+96(FP); RET

// Q4_K against four input rows: one weight row, its scales and nibbles unpacked once per super-block for the four
// (a prompt's rows), each row's sums those of dotQ4_KAVX2 (and the portable kernel), bit for bit: the same
// integer lanes, the same float operations in the same order.

// IN4PAIR(p, yi, a0, a1): Y`i` += the lanes of the low nibbles (Y2) against the activations at a0(p) scaled by
// Y8, and of the high nibbles (Y1) against a1(p) scaled by Y9. Clobbers Y10.
#define IN4PAIR(p, yi, a0, a1) \
	VPMADDUBSW a0(p), Y2, Y10; VPMADDWD Y8, Y10, Y10; VPADDD Y10, yi, yi; \
	VPMADDUBSW a1(p), Y1, Y10; VPMADDWD Y9, Y10, Y10; VPADDD Y10, yi, yi

// IN4FLOAT(yi, ya, da): Y`a` += (d·d_a)·float(Y`i`), d in Y8 (all lanes), d_a the float32 at da. Clobbers Y9.
#define IN4FLOAT(yi, ya, da) \
	VBROADCASTSS da, Y9; VMULPS Y9, Y8, Y9; VCVTDQ2PS yi, yi; VMULPS yi, Y9, yi; VADDPS yi, ya, ya

// IN4MINS(bs, da, so): the float32 at so(SP) += (dmin·d_a)·Σ m·bsums, the 16 minimums (int16) at 32(SP), the
// sums of 16 at bs, dmin the float16 at 2(DI), d_a at da. Clobbers Y6, X9, X10.
#define IN4MINS(bs, da, so) \
	VMOVDQU bs, Y6; VPMADDWD 32(SP), Y6, Y6; \
	VEXTRACTI128 $1, Y6, X9; VPADDD X9, X6, X6; VPSHUFD $0x4e, X6, X9; VPADDD X9, X6, X6; \
	VPSHUFD $0xb1, X6, X9; VPADDD X9, X6, X6; VCVTDQ2PS X6, X6; \
	VPBROADCASTW 2(DI), X10; VCVTPH2PS X10, X10; VMULSS da, X10, X10; VMULSS X6, X10, X10; VADDSS so(SP), X10, X10; VMOVSS X10, so(SP)

// IN4ARGS loads an In4 kernel's arguments: the weight row in DI, the four input rows' values at SI, R10, R11, R12,
// their scales at (R8) + 0, 1, 2, 3 times R13 (R15 = 3·R13), their sums of 16 at (R9) + 0, 8·R13, R14, 8·R15; the
// super-block count in CX; zeroes the accumulators Y0, Y3, Y11, Y12 and the minimum terms at 64(SP)..76(SP).
#define IN4ARGS \
	MOVQ b_base+0(FP), DI; MOVQ qs_base+24(FP), SI; MOVQ d_base+48(FP), R8; MOVQ d_len+56(FP), R13; \
	MOVQ bsums_base+72(FP), R9; MOVQ R13, CX; SHRQ $2, CX; MOVQ R13, AX; SHLQ $6, AX; LEAQ (SI)(AX*1), R10; \
	LEAQ (R10)(AX*1), R11; LEAQ (R11)(AX*1), R12; LEAQ (R13)(R13*2), R15; MOVQ R13, R14; SHLQ $4, R14; \
	VXORPS Y0, Y0, Y0; VXORPS Y3, Y3, Y3; VXORPS Y11, Y11, Y11; VXORPS Y12, Y12, Y12; VMOVUPS X0, 64(SP); \
	VPBROADCASTD nibmask<>(SB), Y14

// IN4CHUNK(pair, a0, a1, s0, s1): the low (Y2) and high (Y1) weights of a chunk against the four rows'
// activations at a0 and a1, scaled by the int16 at s0(SP) and s1(SP), into the lanes Y4..Y7 (pair: IN4PAIR).
#define IN4CHUNK(pair, a0, a1, s0, s1) \
	VPBROADCASTW s0(SP), Y8; VPBROADCASTW s1(SP), Y9; \
	pair(SI, Y4, a0, a1); pair(R10, Y5, a0, a1); pair(R11, Y6, a0, a1); pair(R12, Y7, a0, a1)

// IN4NEXT(size, loop): a super-block's float parts for the four rows, then on to the next (size bytes).
#define IN4NEXT(size, loop) \
	VPBROADCASTW 0(DI), X8; VCVTPH2PS X8, Y8; \
	IN4FLOAT(Y4, Y0, (R8)); IN4FLOAT(Y5, Y3, (R8)(R13*1)); IN4FLOAT(Y6, Y11, (R8)(R13*2)); IN4FLOAT(Y7, Y12, (R8)(R15*1)); \
	VMOVDQU 16(SP), X8; VPUNPCKHWD X8, X8, X9; VPUNPCKLWD X8, X8, X8; VINSERTI128 $1, X9, Y8, Y8; VMOVDQU Y8, 32(SP); \
	IN4MINS((R9), (R8), 64); IN4MINS((R9)(R13*8), (R8)(R13*1), 68); IN4MINS((R9)(R14*1), (R8)(R13*2), 72); IN4MINS((R9)(R15*8), (R8)(R15*1), 76); \
	ADDQ $size, DI; ADDQ $256, SI; ADDQ $256, R10; ADDQ $256, R11; ADDQ $256, R12; ADDQ $4, R8; ADDQ $32, R9; \
	DECQ CX; JNZ loop

// IN4OUT writes the four rows' results, hsum8(acc) - minimum terms, to y[0], y[ystride], y[2·ystride], y[3·ystride].
#define IN4OUT \
	MOVQ y+96(FP), DX; MOVQ ystride+104(FP), AX; SHLQ $2, AX; \
	HSUMR(Y0, X0); VSUBSS 64(SP), X0, X0; MOVSS X0, (DX); ADDQ AX, DX; \
	HSUMR(Y3, X3); VSUBSS 68(SP), X3, X3; MOVSS X3, (DX); ADDQ AX, DX; \
	HSUMR(Y11, X11); VSUBSS 72(SP), X11, X11; MOVSS X11, (DX); ADDQ AX, DX; \
	HSUMR(Y12, X12); VSUBSS 76(SP), X12, X12; MOVSS X12, (DX); VZEROUPPER; RET

// HIGHBIT15(shift, q): HIGHBIT with the high bits in Y15.
#define HIGHBIT15(shift, q) \
	VPSRLW $shift, Y15, Y10; VPAND Y13, Y10, Y10; VPSLLW $4, Y10, Y10; VPOR Y10, q, q

// Q6IN4GROUP(ql, hi, qh, qs, a, s0, s1): Q6_K's group of 32 weights, q = (the nibbles at ql(DI), the high ones when
// hi is 4, else the low: VPSRLW by hi) | (bits qs..qs+1 of the bytes at qh(DI)) << 4, against the four rows'
// activations at a: lanes += scale·(q·a - 32·a), the first four lanes scaled by the int16 at s0(SP), the last
// four by s1(SP). Y15: 0x20 bytes, Y13: 0x03, Y14: 0x0f. Clobbers Y1, Y2, Y8, Y9, Y10.
#define Q6IN4GROUP(row, ql, hi, qh, qs, a, s0, s1) \
	VMOVDQU ql(DI), Y1; VPSRLW $hi, Y1, Y1; VPAND Y14, Y1, Y1; \
	VMOVDQU qh(DI), Y2; VPSRLW $qs, Y2, Y2; VPAND Y13, Y2, Y2; VPSLLW $4, Y2, Y2; VPOR Y2, Y1, Y1; \
	VPBROADCASTW s0(SP), X8; VPBROADCASTW s1(SP), X9; VINSERTI128 $1, X9, Y8, Y8; \
	row(SI, Y4, a); row(R10, Y5, a); row(R11, Y6, a); row(R12, Y7, a)

// Q6IN4ROW(p, yi, a): Y`i` += Y8·maddubs(Y1, a(p)), as dotQ6_KAVX2 does per group.
#define Q6IN4ROW(p, yi, a) \
	VPMADDUBSW a(p), Y1, Y2; VPMADDWD Y8, Y2, Y2; VPADDD Y2, yi, yi

// Q6KOFFSET(bs, yi): Y`i` -= 32·(s_2l·bs[2l] + s_2l+1·bs[2l+1]) in lane l, the super-block's 16 scales as int16 at
// 0(SP) and its 16 sums of 16 activations at bs: the weights' -32, once per super-block. Clobbers Y2.
#define Q6KOFFSET(bs, yi) \
	VMOVDQU bs, Y2; VPMADDWD 0(SP), Y2, Y2; VPSLLD $5, Y2, Y2; VPSUBD Y2, yi, yi

// IN4OUTNOMIN writes the four rows' hsum8(acc) (no minimum terms) to y[0], y[ystride], y[2·ystride], y[3·ystride].
#define IN4OUTNOMIN \
	MOVQ y+96(FP), DX; MOVQ ystride+104(FP), AX; SHLQ $2, AX; \
	HSUMR(Y0, X0); MOVSS X0, (DX); ADDQ AX, DX; HSUMR(Y3, X3); MOVSS X3, (DX); ADDQ AX, DX; \
	HSUMR(Y11, X11); MOVSS X11, (DX); ADDQ AX, DX; HSUMR(Y12, X12); MOVSS X12, (DX); VZEROUPPER; RET

// Dot products of a block-quantized weight row with an input row quantized to 8 bits (see quant.go): AVX2 and
// F16C. Integers are multiplied by VPMADDUBSW (unsigned weights × signed activations; signed weights go through
// VPSIGNB, as llama.cpp does) and VPMADDWD, exact; the float32 part is the portable kernels' (a VMULPS then a
// VADDPS per block into eight lanes, the lanes summed as hsum8), so both give the same bits.

// func dotQ8_0AVX2(b []byte, qs []int8, d []float32) float32
// b: len(d) Q8_0 blocks (34 bytes: float16 d, 32 int8); qs, d: the Q8_0 activations (32 values per scale).
TEXT ·dotQ8_0AVX2(SB), NOSPLIT, $0-76
	ARGS

q80loop:
	VMOVDQU 2(DI), Y1
	ONESIGNED(34, q80loop)

// func dotQ8_0FMA(b []byte, qs []int8, d []float32) float32: dotQ8_0AVX2 with llama.cpp's fused block updates.
TEXT ·dotQ8_0FMA(SB), NOSPLIT, $0-76
	ARGS

q80fmaloop:
	VMOVDQU 2(DI), Y1
	ONESIGNEDFMA(34, q80fmaloop)

// func dotQ4_1FMA(b []byte, qs []int8, d, s []float32) float32: dotQ4_1AVX2 with llama.cpp's fused block
// updates.
TEXT ·dotQ4_1FMA(SB), NOSPLIT, $0-100
	ARGS
	MOVQ s_base+72(FP), R9
	VXORPS X7, X7, X7

q41fmaloop:
	NIBBLES32(4)
	ONEMINFMA(20, q41fmaloop)

// func dotQ5_0FMA(b []byte, qs []int8, d []float32) float32: dotQ5_0AVX2 with llama.cpp's fused block updates.
TEXT ·dotQ5_0FMA(SB), NOSPLIT, $0-76
	ARGS
	BITSARGS
	VPBROADCASTD f0s<>(SB), Y9

q50fmaloop:
	Q50WEIGHTS
	ONESIGNEDFMA(22, q50fmaloop)

// func dotQ4_0FMA(b []byte, qs []int8, d []float32) float32: dotQ4_0AVX2 with llama.cpp's fused block updates.
TEXT ·dotQ4_0FMA(SB), NOSPLIT, $0-76
	ARGS
	VPBROADCASTD eights<>(SB), Y13

q40fmaloop:
	Q40WEIGHTS
	ONESIGNEDFMA(18, q40fmaloop)

// REPACKED32(loop): the rest of a repacked kernel's 18-byte block of signed weights (in Y1): its integer sum
// against the Q8_0 activations times d_w · d_a, added to X7 with one scalar fused multiply-add; then on to the
// next block or out with X7.
#define REPACKED32(loop) \
	VMOVDQU (SI), Y2; SIGNEDDOT; \
	VEXTRACTI128 $1, Y3, X4; VPADDD X4, X3, X3; VPSHUFD $0x4e, X3, X4; VPADDD X4, X3, X3; \
	VPSHUFD $0xb1, X3, X4; VPADDD X4, X3, X3; VCVTDQ2PS X3, X3; \
	VPBROADCASTW 0(DI), X4; VCVTPH2PS X4, X4; VMULSS (R8), X4, X4; VFMADD231SS X4, X3, X7; \
	ADDQ $18, DI; ADDQ $32, SI; ADDQ $4, R8; DECQ CX; JNZ loop; \
	VZEROUPPER; MOVSS X7, ret+72(FP); RET

// func dotQ4_0RepackedFMA(b []byte, qs []int8, d []float32) float32: the product of llama.cpp's repacked Q4_0
// kernels (gemv/gemm_q4_0_8x8_q8_0): per block the integer sum of its 32 products (weights nibble-8) times
// d_w · d_a, added with one scalar fused multiply-add (dotQ4_0Repacked).
TEXT ·dotQ4_0RepackedFMA(SB), NOSPLIT, $0-76
	ARGS
	VPBROADCASTD eights<>(SB), Y13
	VXORPS X7, X7, X7

q40rloop:
	Q40WEIGHTS
	REPACKED32(q40rloop)

// func dotQ5_1FMA(b []byte, qs []int8, d, s []float32) float32: dotQ5_1AVX2 with llama.cpp's fused block
// updates.
TEXT ·dotQ5_1FMA(SB), NOSPLIT, $0-100
	ARGS
	BITSARGS
	VPBROADCASTD sixteens<>(SB), Y9
	MOVQ s_base+72(FP), R9
	VXORPS X7, X7, X7

q51fmaloop:
	Q51WEIGHTS
	ONEMINFMA(24, q51fmaloop)

// func dotQ4_0AVX2(b []byte, qs []int8, d []float32) float32
// b: len(d) Q4_0 blocks (18 bytes: float16 d, 16 bytes of nibbles; weights nibble-8).
TEXT ·dotQ4_0AVX2(SB), NOSPLIT, $0-76
	ARGS
	VPBROADCASTD eights<>(SB), Y13

q40loop:
	Q40WEIGHTS
	ONESIGNED(18, q40loop)

// func dotQ5_0AVX2(b []byte, qs []int8, d []float32) float32
// b: len(d) Q5_0 blocks (22 bytes: float16 d, 32 high bits, 16 bytes of nibbles; weights (nibble | high<<4) - 16,
// made as ggml does: the nibble or'ed with 0xf0 where the high bit is clear).
TEXT ·dotQ5_0AVX2(SB), NOSPLIT, $0-76
	ARGS
	BITSARGS
	VPBROADCASTD f0s<>(SB), Y9

q50loop:
	Q50WEIGHTS
	ONESIGNED(22, q50loop)

// func dotQ5_1AVX2(b []byte, qs []int8, d, s []float32) float32
// b: len(d) Q5_1 blocks (24 bytes: float16 d, float16 m, 32 high bits, 16 bytes of nibbles; weights nibble |
// high<<4); qs, d, s: the Q8_1 activations. The blocks' m·s go into X7, added after the lanes are summed.
TEXT ·dotQ5_1AVX2(SB), NOSPLIT, $0-100
	ARGS
	BITSARGS
	VPBROADCASTD sixteens<>(SB), Y9
	MOVQ s_base+72(FP), R9
	VXORPS X7, X7, X7

q51loop:
	Q51WEIGHTS
	ONEMIN(24, q51loop)

// func dotQ4_1AVX2(b []byte, qs []int8, d, s []float32) float32
// b: len(d) Q4_1 blocks (20 bytes: float16 d, float16 m, 16 bytes of nibbles); qs, d, s: the Q8_1 activations.
// The blocks' m·s go into X7, added after the lanes are summed.
TEXT ·dotQ4_1AVX2(SB), NOSPLIT, $0-100
	ARGS
	MOVQ s_base+72(FP), R9
	VXORPS X7, X7, X7

q41loop:
	NIBBLES32(4)
	ONEMIN(20, q41loop)

// func dotQ4_KAVX2(b []byte, qs []int8, d []float32, bsums []int16) float32
// b: len(d) Q4_K super-blocks (144 bytes); qs, d, bsums: the Q8_K activations.
TEXT ·dotQ4_KAVX2(SB), NOSPLIT, $48-100
	ARGS
	MOVQ bsums_base+72(FP), R9
	VXORPS X7, X7, X7

q4kloop:
	Q4KSCALES
	VPXOR Y11, Y11, Y11
	Q4KCHUNK(16, 0, 32, 0, 2)
	Q4KCHUNK(48, 64, 96, 4, 6)
	Q4KCHUNK(80, 128, 160, 8, 10)
	Q4KCHUNK(112, 192, 224, 12, 14)
	KNEXT(144, q4kloop)

// func dotQ5_KAVX2(b []byte, qs []int8, d []float32, bsums []int16) float32
// b: len(d) Q5_K super-blocks (176 bytes: float16 d and dmin, 12 bytes of 6-bit scales and minimums as Q4_K's,
// 32 bytes of high bits, 128 bytes of nibbles); qs, d, bsums: the Q8_K activations. Weights nibble | high<<4, the
// high bit of element 64g+l (g < 4, l < 64) bit 2g + l/32 of qh[l%32], as ggml's x86 code takes them.
TEXT ·dotQ5_KAVX2(SB), NOSPLIT, $48-100
	ARGS
	MOVQ bsums_base+72(FP), R9
	VXORPS X7, X7, X7
	VPBROADCASTD ones8<>(SB), Y13

q5kloop:
	Q4KSCALES
	VPXOR Y11, Y11, Y11
	VMOVDQU 16(DI), Y12
	Q5KCHUNK(48, 0, 1, 0, 32, 0, 2)
	Q5KCHUNK(80, 2, 3, 64, 96, 4, 6)
	Q5KCHUNK(112, 4, 5, 128, 160, 8, 10)
	Q5KCHUNK(144, 6, 7, 192, 224, 12, 14)
	KNEXT(176, q5kloop)

// Q2KGROUP(src, shift, aoff, s0, s1): the 32 two-bit weights at bit `shift` of each byte of Y`src` against the
// activations at aoff(SI): Y11 += lanes, the first four scaled by the int16 at s0(SP), the last four by s1(SP).
// Y13: 0x03 bytes.
#define Q2KGROUP(src, shift, aoff, s0, s1) \
	VPSRLW $shift, src, Y1; VPAND Y13, Y1, Y1; VPMADDUBSW aoff(SI), Y1, Y1; \
	VPBROADCASTW s0(SP), X3; VPBROADCASTW s1(SP), X4; VINSERTI128 $1, X4, Y3, Y3; \
	VPMADDWD Y3, Y1, Y1; VPADDD Y1, Y11, Y11

// func dotQ2_KAVX2(b []byte, qs []int8, d []float32, bsums []int16) float32
// b: len(d) Q2_K super-blocks (84 bytes: 16 bytes of 4-bit scales and minimums, 64 bytes of 2-bit weights (32
// weights per byte column: bits 2j of bytes 32h..32h+31 are weights 128h+32j..), float16 d and dmin); qs, d,
// bsums: the Q8_K activations.
TEXT ·dotQ2_KAVX2(SB), NOSPLIT, $64-100
	ARGS
	MOVQ bsums_base+72(FP), R9
	VXORPS X7, X7, X7
	VPBROADCASTD threemask<>(SB), Y13

q2kloop:
	VMOVDQU 0(DI), X1
	VPAND X14, X1, X2
	VPMOVZXBW X2, Y2
	VMOVDQU Y2, 0(SP)
	VPSRLW $4, X1, X1
	VPAND X14, X1, X1
	VPMOVZXBW X1, Y8
	VPXOR Y11, Y11, Y11
	VMOVDQU 16(DI), Y5
	VMOVDQU 48(DI), Y6
	Q2KGROUP(Y5, 0, 0, 0, 2)
	Q2KGROUP(Y5, 2, 32, 4, 6)
	Q2KGROUP(Y5, 4, 64, 8, 10)
	Q2KGROUP(Y5, 6, 96, 12, 14)
	Q2KGROUP(Y6, 0, 128, 16, 18)
	Q2KGROUP(Y6, 2, 160, 20, 22)
	Q2KGROUP(Y6, 4, 192, 24, 26)
	Q2KGROUP(Y6, 6, 224, 28, 30)
	KFLOAT(80)
	KMINSUM(82)
	ADDQ $84, DI
	ADDQ $256, SI
	ADDQ $4, R8
	ADDQ $32, R9
	DECQ CX
	JNZ  q2kloop
	HSUM8
	VSUBSS X7, X0, X0
	VZEROUPPER
	MOVSS X0, ret+96(FP)
	RET

// Q3KGROUP(src, shift, hbit, aoff, s0, s1): the 32 three-bit weights (bit `shift` of each byte of Y`src`, high bit
// `hbit` of each byte of Y12; weight (q | h<<2) - 4) against the activations at aoff(SI): Y11 += lanes, the first
// four scaled by the int16 at s0(SP), the last four by s1(SP). Y13: 0x03 bytes, Y10: 0x01, Y9: 0x04.
#define Q3KGROUP(src, shift, hbit, aoff, s0, s1) \
	VPSRLW $shift, src, Y1; VPAND Y13, Y1, Y1; VPSRLW $hbit, Y12, Y2; VPAND Y10, Y2, Y2; VPSLLW $2, Y2, Y2; \
	VPOR Y2, Y1, Y1; VPSUBB Y9, Y1, Y1; VMOVDQU aoff(SI), Y2; VPSIGNB Y1, Y1, Y3; VPSIGNB Y1, Y2, Y2; \
	VPMADDUBSW Y2, Y3, Y3; VPBROADCASTW s0(SP), X2; VPBROADCASTW s1(SP), X4; VINSERTI128 $1, X4, Y2, Y2; \
	VPMADDWD Y2, Y3, Y3; VPADDD Y3, Y11, Y11

// Q3KSCALES unpacks a Q3_K super-block's sixteen 6-bit scales (12 bytes at 96(DI); ggml's x86 unpacking, minus
// 32) into 16 int16 at 0(SP). Clobbers AX, BX, DX, R10, R11, X1, X2, Y1.
#define Q3KSCALES \
	MOVL 96(DI), AX; MOVL 100(DI), BX; MOVL 104(DI), DX; \
	MOVL AX, R10; ANDL $0x0f0f0f0f, R10; MOVL DX, R11; ANDL $0x03030303, R11; SHLL $4, R11; ORL R11, R10; \
	MOVL BX, R11; ANDL $0x0f0f0f0f, R11; MOVL DX, R12; SHRL $2, R12; ANDL $0x03030303, R12; SHLL $4, R12; \
	ORL R12, R11; SHLQ $32, R11; ORQ R11, R10; MOVQ R10, X1; \
	MOVL AX, R10; SHRL $4, R10; ANDL $0x0f0f0f0f, R10; MOVL DX, R11; SHRL $4, R11; ANDL $0x03030303, R11; \
	SHLL $4, R11; ORL R11, R10; \
	MOVL BX, R11; SHRL $4, R11; ANDL $0x0f0f0f0f, R11; MOVL DX, R12; SHRL $6, R12; ANDL $0x03030303, R12; \
	SHLL $4, R12; ORL R12, R11; SHLQ $32, R11; ORQ R11, R10; MOVQ R10, X2; \
	VPUNPCKLQDQ X2, X1, X1; VPBROADCASTD thirtytwos<>(SB), X2; VPSUBB X2, X1, X1; VPMOVSXBW X1, Y1; \
	VMOVDQU Y1, 0(SP)

// func dotQ3_KAVX2(b []byte, qs []int8, d []float32) float32
// b: len(d) Q3_K super-blocks (110 bytes: 32 bytes of high bits (bit g of byte l: weight 32g+l), 64 bytes of
// 2-bit weights as Q2_K's, 12 bytes of 6-bit scales, float16 d); qs, d: the Q8_K activations. No minimums.
TEXT ·dotQ3_KAVX2(SB), NOSPLIT, $32-76
	ARGS
	VPBROADCASTD threemask<>(SB), Y13
	VPBROADCASTD ones8<>(SB), Y10
	VPBROADCASTD fours<>(SB), Y9

q3kloop:
	Q3KSCALES
	VMOVDQU 0(DI), Y12
	VPXOR Y11, Y11, Y11
	VMOVDQU 32(DI), Y5
	VMOVDQU 64(DI), Y6
	Q3KGROUP(Y5, 0, 0, 0, 0, 2)
	Q3KGROUP(Y5, 2, 1, 32, 4, 6)
	Q3KGROUP(Y5, 4, 2, 64, 8, 10)
	Q3KGROUP(Y5, 6, 3, 96, 12, 14)
	Q3KGROUP(Y6, 0, 4, 128, 16, 18)
	Q3KGROUP(Y6, 2, 5, 160, 20, 22)
	Q3KGROUP(Y6, 4, 6, 192, 24, 26)
	Q3KGROUP(Y6, 6, 7, 224, 28, 30)
	KFLOAT(108)
	ADDQ $110, DI
	ADDQ $256, SI
	ADDQ $4, R8
	DECQ CX
	JNZ  q3kloop
	HSUM8
	VZEROUPPER
	MOVSS X0, ret+72(FP)
	RET

// The In4 kernels' bodies (CPUs without AVX-512 VNNI: with it, the rows kernels of rows_amd64.s multiply these
// types), by the macro that multiplies a pair of chunks (IN4PAIR) or a Q6_K group (Q6IN4ROW); loop names the
// loop's label.
#define Q4KIN4(pair, loop) \
	IN4ARGS; \
loop: \
	Q4KSCALES; VPXOR Y4, Y4, Y4; VPXOR Y5, Y5, Y5; VPXOR Y6, Y6, Y6; VPXOR Y7, Y7, Y7; \
	NIBS(16); IN4CHUNK(pair, 0, 32, 0, 2); NIBS(48); IN4CHUNK(pair, 64, 96, 4, 6); \
	NIBS(80); IN4CHUNK(pair, 128, 160, 8, 10); NIBS(112); IN4CHUNK(pair, 192, 224, 12, 14); \
	IN4NEXT(144, loop); IN4OUT

#define Q5KIN4(pair, loop) \
	IN4ARGS; VPBROADCASTD ones8<>(SB), Y13; \
loop: \
	Q4KSCALES; VPXOR Y4, Y4, Y4; VPXOR Y5, Y5, Y5; VPXOR Y6, Y6, Y6; VPXOR Y7, Y7, Y7; VMOVDQU 16(DI), Y15; \
	NIBS(48); HIGHBIT15(0, Y2); HIGHBIT15(1, Y1); IN4CHUNK(pair, 0, 32, 0, 2); \
	NIBS(80); HIGHBIT15(2, Y2); HIGHBIT15(3, Y1); IN4CHUNK(pair, 64, 96, 4, 6); \
	NIBS(112); HIGHBIT15(4, Y2); HIGHBIT15(5, Y1); IN4CHUNK(pair, 128, 160, 8, 10); \
	NIBS(144); HIGHBIT15(6, Y2); HIGHBIT15(7, Y1); IN4CHUNK(pair, 192, 224, 12, 14); \
	IN4NEXT(176, loop); IN4OUT

#define Q6KIN4(row, loop) \
	IN4ARGS; VPBROADCASTD threemask<>(SB), Y13; \
loop: \
	VPMOVSXBW 192(DI), Y1; VMOVDQU Y1, 0(SP); VPXOR Y4, Y4, Y4; VPXOR Y5, Y5, Y5; VPXOR Y6, Y6, Y6; VPXOR Y7, Y7, Y7; \
	Q6IN4GROUP(row, 0, 0, 128, 0, 0, 0, 2); Q6IN4GROUP(row, 32, 0, 128, 2, 32, 4, 6); \
	Q6IN4GROUP(row, 0, 4, 128, 4, 64, 8, 10); Q6IN4GROUP(row, 32, 4, 128, 6, 96, 12, 14); \
	Q6IN4GROUP(row, 64, 0, 160, 0, 128, 16, 18); Q6IN4GROUP(row, 96, 0, 160, 2, 160, 20, 22); \
	Q6IN4GROUP(row, 64, 4, 160, 4, 192, 24, 26); Q6IN4GROUP(row, 96, 4, 160, 6, 224, 28, 30); \
	Q6KOFFSET((R9), Y4); Q6KOFFSET((R9)(R13*8), Y5); Q6KOFFSET((R9)(R14*1), Y6); Q6KOFFSET((R9)(R15*8), Y7); \
	VPBROADCASTW 208(DI), X8; VCVTPH2PS X8, Y8; \
	IN4FLOAT(Y4, Y0, (R8)); IN4FLOAT(Y5, Y3, (R8)(R13*1)); IN4FLOAT(Y6, Y11, (R8)(R13*2)); IN4FLOAT(Y7, Y12, (R8)(R15*1)); \
	ADDQ $210, DI; ADDQ $256, SI; ADDQ $256, R10; ADDQ $256, R11; ADDQ $256, R12; ADDQ $4, R8; ADDQ $32, R9; DECQ CX; JNZ loop; \
	IN4OUTNOMIN

// func dotQ4_KIn4AVX2(b []byte, qs []int8, d []float32, bsums []int16, y *float32, ystride int)
// b: one row of len(d)/4 Q4_K super-blocks; qs, d, bsums: four consecutive Q8_K input rows; y[0], y[ystride],
// y[2·ystride], y[3·ystride]: the row's products with them.
TEXT ·dotQ4_KIn4AVX2(SB), NOSPLIT, $80-112
	Q4KIN4(IN4PAIR, q4kin4loop)

// func dotQ5_KIn4AVX2(b []byte, qs []int8, d []float32, bsums []int16, y *float32, ystride int)
// dotQ4_KIn4AVX2 for Q5_K super-blocks, the high bits or'ed in as dotQ5_KAVX2 does.
TEXT ·dotQ5_KIn4AVX2(SB), NOSPLIT, $80-112
	Q5KIN4(IN4PAIR, q5kin4loop)

// func dotQ6_KIn4AVX2(b []byte, qs []int8, d []float32, bsums []int16, y *float32, ystride int)
// dotQ4_KIn4AVX2 for Q6_K super-blocks (bsums unused: Q6_K has no minimums), each row's sums dotQ6_KAVX2's.
TEXT ·dotQ6_KIn4AVX2(SB), NOSPLIT, $80-112
	Q6KIN4(Q6IN4ROW, q6kin4loop)

// func dotQ6_KAVX2(b []byte, qs []int8, d []float32, bsums []int16) float32
// b: len(d) Q6_K super-blocks (210 bytes: 128 bytes of low nibbles, 64 of high bit pairs, 16 int8 scales,
// float16 d); qs, d, bsums: the Q8_K activations. Weights are q-32 with q in 0..63: the lanes of the products
// s·q·a, less 32·(s_2l·bsums[2l] + s_2l+1·bsums[2l+1]) in lane l (ggml's x86 kernel: the 32·a terms once per
// super-block, from the sums of 16).
TEXT ·dotQ6_KAVX2(SB), NOSPLIT, $32-100
	ARGS
	MOVQ bsums_base+72(FP), R9
	VPBROADCASTD threemask<>(SB), Y13

q6kloop:
	VPMOVSXBW 192(DI), Y1
	VMOVDQU Y1, 0(SP)
	VPXOR Y11, Y11, Y11
	VMOVDQU 0(DI), Y6
	VMOVDQU 32(DI), Y7
	VMOVDQU 128(DI), Y8
	VPAND Y14, Y6, Y1
	VPAND Y13, Y8, Y2
	VPSLLW $4, Y2, Y2
	VPOR Y2, Y1, Y1
	VPMADDUBSW 0(SI), Y1, Y1
	VPBROADCASTW 0(SP), X3
	VPBROADCASTW 2(SP), X4
	VINSERTI128 $1, X4, Y3, Y3
	VPMADDWD Y3, Y1, Y1
	VPADDD Y1, Y11, Y11
	VPAND Y14, Y7, Y1
	VPSRLW $2, Y8, Y2
	VPAND Y13, Y2, Y2
	VPSLLW $4, Y2, Y2
	VPOR Y2, Y1, Y1
	VPMADDUBSW 32(SI), Y1, Y1
	VPBROADCASTW 4(SP), X3
	VPBROADCASTW 6(SP), X4
	VINSERTI128 $1, X4, Y3, Y3
	VPMADDWD Y3, Y1, Y1
	VPADDD Y1, Y11, Y11
	VPSRLW $4, Y6, Y1
	VPAND Y14, Y1, Y1
	VPSRLW $4, Y8, Y2
	VPAND Y13, Y2, Y2
	VPSLLW $4, Y2, Y2
	VPOR Y2, Y1, Y1
	VPMADDUBSW 64(SI), Y1, Y1
	VPBROADCASTW 8(SP), X3
	VPBROADCASTW 10(SP), X4
	VINSERTI128 $1, X4, Y3, Y3
	VPMADDWD Y3, Y1, Y1
	VPADDD Y1, Y11, Y11
	VPSRLW $4, Y7, Y1
	VPAND Y14, Y1, Y1
	VPSRLW $6, Y8, Y2
	VPAND Y13, Y2, Y2
	VPSLLW $4, Y2, Y2
	VPOR Y2, Y1, Y1
	VPMADDUBSW 96(SI), Y1, Y1
	VPBROADCASTW 12(SP), X3
	VPBROADCASTW 14(SP), X4
	VINSERTI128 $1, X4, Y3, Y3
	VPMADDWD Y3, Y1, Y1
	VPADDD Y1, Y11, Y11
	VMOVDQU 64(DI), Y6
	VMOVDQU 96(DI), Y7
	VMOVDQU 160(DI), Y8
	VPAND Y14, Y6, Y1
	VPAND Y13, Y8, Y2
	VPSLLW $4, Y2, Y2
	VPOR Y2, Y1, Y1
	VPMADDUBSW 128(SI), Y1, Y1
	VPBROADCASTW 16(SP), X3
	VPBROADCASTW 18(SP), X4
	VINSERTI128 $1, X4, Y3, Y3
	VPMADDWD Y3, Y1, Y1
	VPADDD Y1, Y11, Y11
	VPAND Y14, Y7, Y1
	VPSRLW $2, Y8, Y2
	VPAND Y13, Y2, Y2
	VPSLLW $4, Y2, Y2
	VPOR Y2, Y1, Y1
	VPMADDUBSW 160(SI), Y1, Y1
	VPBROADCASTW 20(SP), X3
	VPBROADCASTW 22(SP), X4
	VINSERTI128 $1, X4, Y3, Y3
	VPMADDWD Y3, Y1, Y1
	VPADDD Y1, Y11, Y11
	VPSRLW $4, Y6, Y1
	VPAND Y14, Y1, Y1
	VPSRLW $4, Y8, Y2
	VPAND Y13, Y2, Y2
	VPSLLW $4, Y2, Y2
	VPOR Y2, Y1, Y1
	VPMADDUBSW 192(SI), Y1, Y1
	VPBROADCASTW 24(SP), X3
	VPBROADCASTW 26(SP), X4
	VINSERTI128 $1, X4, Y3, Y3
	VPMADDWD Y3, Y1, Y1
	VPADDD Y1, Y11, Y11
	VPSRLW $4, Y7, Y1
	VPAND Y14, Y1, Y1
	VPSRLW $6, Y8, Y2
	VPAND Y13, Y2, Y2
	VPSLLW $4, Y2, Y2
	VPOR Y2, Y1, Y1
	VPMADDUBSW 224(SI), Y1, Y1
	VPBROADCASTW 28(SP), X3
	VPBROADCASTW 30(SP), X4
	VINSERTI128 $1, X4, Y3, Y3
	VPMADDWD Y3, Y1, Y1
	VPADDD Y1, Y11, Y11
	Q6KOFFSET((R9), Y11)
	KFLOAT(208)
	ADDQ $210, DI
	ADDQ $256, SI
	ADDQ $4, R8
	ADDQ $32, R9
	DECQ CX
	JNZ  q6kloop
	HSUM8
	VZEROUPPER
	MOVSS X0, ret+96(FP)
	RET

DATA q8consts<>+0(SB)/4, $0x7fffffff // |x| mask
DATA q8consts<>+4(SB)/4, $127.0
DATA q8consts<>+8(SB)/4, $127
DATA q8consts<>+12(SB)/4, $-128
GLOBL q8consts<>(SB), RODATA|NOPTR, $16

// func quantizeQ8BlocksAVX512(q []int8, x []float32, d []float32, sums []int32)
// For each block b of 32 values (len(d) blocks): d[b] = max|x|/127 (unrounded), q = x·(127/max|x|) rounded half
// to even (VCVTPS2DQ under the default rounding) and held to [-128, 127], sums[b] = Σq: quantizeQ8_0Block's
// arithmetic, whose float16 roundings the caller applies. A block holding a NaN gets a NaN scale (its q and sum
// are then 0), so that the NaN reaches the products.
TEXT ·quantizeQ8BlocksAVX512(SB), NOSPLIT, $0-96
	MOVQ q_base+0(FP), DI
	MOVQ x_base+24(FP), SI
	MOVQ d_base+48(FP), R8
	MOVQ d_len+56(FP), CX
	MOVQ sums_base+72(FP), R9
	TESTQ CX, CX
	JZ   q8done
	VPBROADCASTD q8consts<>+0(SB), Z31
	VMOVSS q8consts<>+4(SB), X30
	VPBROADCASTD q8consts<>+8(SB), Z29
	VPBROADCASTD q8consts<>+12(SB), Z28

q8loop:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VPANDD Z31, Z0, Z2
	VPANDD Z31, Z1, Z3
	VMAXPS Z3, Z2, Z2
	VEXTRACTF64X4 $1, Z2, Y3
	VMAXPS Y3, Y2, Y2
	VEXTRACTF128 $1, Y2, X3
	VMAXPS X3, X2, X2
	VMOVHLPS X2, X2, X3
	VMAXPS X3, X2, X2
	VMOVSHDUP X2, X3
	VMAXSS X3, X2, X2
	VCMPPS $3, Z0, Z0, K1 // unordered: the block's NaN lanes, which VMAXPS may drop
	VCMPPS $3, Z1, Z1, K2
	KORTESTW K2, K1
	JZ   q8finite
	VXORPS X2, X2, X2
	VDIVSS X2, X2, X2 // 0/0: a block holding a NaN gets a NaN scale, as quantizeQ8_0Block gives it

q8finite:
	VDIVSS X30, X2, X3
	VMOVSS X3, (R8)
	VXORPS X4, X4, X4
	VUCOMISS X4, X2
	JEQ  q8zero
	VDIVSS X2, X30, X4

q8zero:
	VBROADCASTSS X4, Z4
	VMULPS Z4, Z0, Z0
	VMULPS Z4, Z1, Z1
	VCVTPS2DQ Z0, Z0
	VCVTPS2DQ Z1, Z1
	VPMINSD Z29, Z0, Z0
	VPMINSD Z29, Z1, Z1
	VPMAXSD Z28, Z0, Z0
	VPMAXSD Z28, Z1, Z1
	VPMOVDB Z0, (DI)
	VPMOVDB Z1, 16(DI)
	VPADDD Z1, Z0, Z0
	VEXTRACTI64X4 $1, Z0, Y1
	VPADDD Y1, Y0, Y0
	VEXTRACTI128 $1, Y0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0xb1, X0, X1
	VPADDD X1, X0, X0
	VMOVD X0, (R9)
	ADDQ $32, DI
	ADDQ $128, SI
	ADDQ $4, R8
	ADDQ $4, R9
	DECQ CX
	JNZ  q8loop

q8done:
	VZEROUPPER
	RET

DATA q8kconsts<>+0(SB)/4, $-127.0
DATA q8kconsts<>+4(SB)/4, $1.0
DATA q8kconsts<>+8(SB)/4, $0x80808080
DATA q8kconsts<>+12(SB)/4, $0x08000800 // 2048 twice: the 16 bytes' offsets of 128, as int16
GLOBL q8kconsts<>(SB), RODATA|NOPTR, $16

// func quantizeQ8KBlocksAVX512(q []int8, bsums []int16, x []float32, d []float32)
// For each block b of 256 values (len(d) blocks), as quantizeQ8_KBlock: v the first value of largest magnitude,
// iscale = -127/v, q = min(127, iscale·x rounded half to even) (VCVTPS2DQ under the default rounding), the
// sums of 16 into bsums, d[b] = 1/iscale. A block of zeros gets zeros; a block holding a NaN gets a NaN scale
// and zeros.
TEXT ·quantizeQ8KBlocksAVX512(SB), NOSPLIT, $0-96
	MOVQ q_base+0(FP), DI
	MOVQ bsums_base+24(FP), R9
	MOVQ x_base+48(FP), SI
	MOVQ d_base+72(FP), R8
	MOVQ d_len+80(FP), CX
	TESTQ CX, CX
	JZ   q8kdone
	VPBROADCASTD q8consts<>+0(SB), Z31
	VPBROADCASTD q8consts<>+8(SB), Z29
	VPBROADCASTD q8kconsts<>+8(SB), Z28
	VPBROADCASTD q8kconsts<>+12(SB), Y27
	VPXORD Z26, Z26, Z26

q8kloop:
	// amax: the largest |x| of the block, in every lane of Z0; K1: the lanes where a pair of vectors has a NaN.
	VMOVUPS (SI), Z0
	VCMPPS $3, 64(SI), Z0, K1
	VPANDD Z31, Z0, Z0
	VPANDD 64(SI), Z31, Z1
	VMAXPS Z1, Z0, Z0
	MOVQ $128, AX

q8kmax:
	VMOVUPS (SI)(AX*1), Z2
	VCMPPS $3, 64(SI)(AX*1), Z2, K2
	KORW K2, K1, K1
	VPANDD Z31, Z2, Z2
	VPANDD 64(SI)(AX*1), Z31, Z1
	VMAXPS Z1, Z2, Z2
	VMAXPS Z2, Z0, Z0
	ADDQ $128, AX
	CMPQ AX, $1024
	JLT  q8kmax
	KORTESTW K1, K1
	JNZ  q8knan
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VMAXPS X1, X0, X0
	VMOVSHDUP X0, X1
	VMAXSS X1, X0, X0
	VXORPS X1, X1, X1
	VUCOMISS X1, X0
	JEQ  q8kzero
	VBROADCASTSS X0, Z0

	// The first value of that magnitude: lane BX of the AX-th 64 bytes.
	XORQ AX, AX

q8kfind:
	VPANDD (SI)(AX*1), Z31, Z1
	VCMPPS $0, Z0, Z1, K2
	KMOVW K2, BX
	TESTL BX, BX
	JNZ  q8kfound
	ADDQ $64, AX
	JMP  q8kfind

q8kfound:
	TZCNTL BX, BX
	LEAQ (AX)(BX*4), AX
	VMOVSS q8kconsts<>+0(SB), X1
	VDIVSS (SI)(AX*1), X1, X1 // iscale = -127/v
	VMOVSS q8kconsts<>+4(SB), X2
	VDIVSS X1, X2, X2
	VMOVSS X2, (R8)
	VBROADCASTSS X1, Z1
	XORQ AX, AX
	XORQ BX, BX

q8kquant:
	VMULPS (SI)(AX*4), Z1, Z2
	VMULPS 64(SI)(AX*4), Z1, Z3
	VCVTPS2DQ Z2, Z2
	VCVTPS2DQ Z3, Z3
	VPMINSD Z29, Z2, Z2
	VPMINSD Z29, Z3, Z3
	VPMOVDB Z2, (DI)(AX*1)
	VPMOVDB Z3, 16(DI)(AX*1)
	ADDQ $32, AX
	CMPQ AX, $256
	JLT  q8kquant

	// The sums of 16: VPSADBW sums the bytes of each 8 (q+128 as unsigned) into a quadword; pairs of those
	// added, then less 16·128.
	VPXORD (DI), Z28, Z2
	VPXORD 64(DI), Z28, Z3
	VPXORD 128(DI), Z28, Z4
	VPXORD 192(DI), Z28, Z5
	VPSADBW Z26, Z2, Z2
	VPSADBW Z26, Z3, Z3
	VPSADBW Z26, Z4, Z4
	VPSADBW Z26, Z5, Z5
	VPMOVQD Z2, Y2
	VPMOVQD Z3, Y3
	VPMOVQD Z4, Y4
	VPMOVQD Z5, Y5
	VINSERTI64X4 $1, Y3, Z2, Z2
	VINSERTI64X4 $1, Y5, Z4, Z4
	VPSHUFD $0xb1, Z2, Z3
	VPSHUFD $0xb1, Z4, Z5
	VPADDD Z3, Z2, Z2
	VPADDD Z5, Z4, Z4
	VPMOVQW Z2, X2
	VPMOVQW Z4, X4
	VINSERTI128 $1, X4, Y2, Y2
	VPSUBW Y27, Y2, Y2
	VMOVDQU Y2, (R9)
	JMP  q8knext

q8knan:
	VXORPS X0, X0, X0
	VDIVSS X0, X0, X0 // 0/0
	VMOVSS X0, (R8)
	JMP  q8kclear

q8kzero:
	VMOVSS X0, (R8)

q8kclear:
	VMOVDQU64 Z26, (DI)
	VMOVDQU64 Z26, 64(DI)
	VMOVDQU64 Z26, 128(DI)
	VMOVDQU64 Z26, 192(DI)
	VMOVDQU64 Y26, (R9)

q8knext:
	ADDQ $256, DI
	ADDQ $1024, SI
	ADDQ $4, R8
	ADDQ $32, R9
	DECQ CX
	JNZ  q8kloop

q8kdone:
	VZEROUPPER
	RET

// func dotIQ4_NLAVX2(b []byte, qs []int8, d []float32) float32
// b: len(d) IQ4_NL blocks (18 bytes: float16 d, 16 bytes of nibbles indexing quant.IQ4Values, low nibbles the
// elements 0..15); qs, d: the Q8_0 activations.
TEXT ·dotIQ4_NLAVX2(SB), NOSPLIT, $0-76
	ARGS
	VBROADCASTI128 ·iq4Bytes(SB), Y12

iq4nlloop:
	NIBBLES32(2)
	VPSHUFB Y1, Y12, Y1
	ONESIGNED(18, iq4nlloop)

// IQ4XSGROUP(qoff, aoff, lbyte, lshift, hshift): an IQ4_XS sub-block's 32 weights (the 16 bytes of nibbles at
// qoff(DI)) against the activations at aoff(SI): Y11 += their lanes times the sub-block's scale, its low four bits
// at bit lshift of lbyte(DI), its high two at bit hshift of scales_h (AX), less 32. Y12: iq4Bytes.
#define IQ4XSGROUP(qoff, aoff, lbyte, lshift, hshift) \
	NIBBLES32(qoff); VPSHUFB Y1, Y12, Y1; VMOVDQU aoff(SI), Y2; SIGNEDDOT; \
	MOVBLZX lbyte(DI), BX; SHRL $lshift, BX; ANDL $15, BX; MOVL AX, DX; SHRL $hshift, DX; ANDL $3, DX; SHLL $4, DX; \
	ORL DX, BX; SUBL $32, BX; VMOVD BX, X6; VPBROADCASTD X6, Y6; VPMULLD Y6, Y3, Y3; VPADDD Y3, Y11, Y11

// func dotIQ4_XSAVX2(b []byte, qs []int8, d []float32) float32
// b: len(d) IQ4_XS super-blocks (136 bytes: float16 d, uint16 scales_h, 4 bytes scales_l, 8 sub-blocks of 16
// bytes of nibbles); qs, d: the Q8_K activations. Each super-block's lanes as dotKGo's: the sub-blocks' lanes
// times their scales, then times d_w · d_a and added.
TEXT ·dotIQ4_XSAVX2(SB), NOSPLIT, $0-76
	ARGS
	VBROADCASTI128 ·iq4Bytes(SB), Y12

iq4xsloop:
	MOVWLZX 2(DI), AX
	VPXOR Y11, Y11, Y11
	IQ4XSGROUP(8, 0, 4, 0, 0)
	IQ4XSGROUP(24, 32, 4, 4, 2)
	IQ4XSGROUP(40, 64, 5, 0, 4)
	IQ4XSGROUP(56, 96, 5, 4, 6)
	IQ4XSGROUP(72, 128, 6, 0, 8)
	IQ4XSGROUP(88, 160, 6, 4, 10)
	IQ4XSGROUP(104, 192, 7, 0, 12)
	IQ4XSGROUP(120, 224, 7, 4, 14)
	KFLOAT(0)
	ADDQ $136, DI
	ADDQ $256, SI
	ADDQ $4, R8
	DECQ CX
	JNZ  iq4xsloop
	HSUM8
	VZEROUPPER
	MOVSS X0, ret+72(FP)
	RET

// func dotIQ4_NLRepackedFMA(b []byte, qs []int8, d []float32) float32: dotQ4_0RepackedFMA with IQ4_NL's grid
// (llama.cpp's gemv/gemm_iq4_nl_8x8_q8_0; dotIQ4_NLRepacked).
TEXT ·dotIQ4_NLRepackedFMA(SB), NOSPLIT, $0-76
	ARGS
	VBROADCASTI128 ·iq4Bytes(SB), Y12
	VXORPS X7, X7, X7

iq4nlrloop:
	NIBBLES32(2)
	VPSHUFB Y1, Y12, Y1
	REPACKED32(iq4nlrloop)
