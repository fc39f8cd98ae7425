#include "textflag.h"

// Dot products of float32 activations with block-quantized weight rows (ggml formats), AVX2 + FMA + F16C.
//
// Each block is decoded in registers to exactly the float32 values quant.Dequantize gives (the same products
// and sums, each rounded to float32: VMULPS then VADDPS/VSUBPS, never fused) and multiplied into four 8-lane
// accumulators: accumulator k takes elements 8k..8k+7 of every 32 (as dotF32AVX2 does), so a kernel's result is
// the dot product of x with the dequantized row, summed in a fixed order. The one-row kernels (dotQ*AVX2) and
// the three-row kernels (dotQ*x3AVX2: three input rows against one weight row, its blocks decoded once per
// three rows) add every product into the same accumulator in the same order and reduce alike, so a row's
// result is bit-identical in both. Register use in the three-row kernels: row 0 accumulates in Y0-Y3, row 1 in
// Y8-Y11, row 2 in Y12-Y15; Y4, Y5 hold decoded weights, Y6, Y7 the block's scale and offset.

// nib masks the low nibble of each dword; eight is 8 in each dword.
DATA nib<>+0(SB)/8, $0x0000000f0000000f
DATA nib<>+8(SB)/8, $0x0000000f0000000f
DATA nib<>+16(SB)/8, $0x0000000f0000000f
DATA nib<>+24(SB)/8, $0x0000000f0000000f
GLOBL nib<>(SB), RODATA|NOPTR, $32
DATA eight<>+0(SB)/8, $0x0000000800000008
DATA eight<>+8(SB)/8, $0x0000000800000008
DATA eight<>+16(SB)/8, $0x0000000800000008
DATA eight<>+24(SB)/8, $0x0000000800000008
GLOBL eight<>(SB), RODATA|NOPTR, $32

// HALF broadcasts the float16 at off(DI), widened, into all eight lanes of Y.
#define HALF(off, X, Y) VPBROADCASTW off(DI), X; VCVTPH2PS X, Y

// ZERO4 clears four accumulators.
#define ZERO4(A, B, C, D) VXORPS A, A, A; VXORPS B, B, B; VXORPS C, C, C; VXORPS D, D, D

// REDUCE4 sums accumulators A..D into the low lane of XA (XB, the low half of B, is scratch), as REDUCE1 in
// dot_amd64.s does.
#define REDUCE4(A, B, C, D, XA, XB) \
	VADDPS B, A, A; VADDPS D, C, C; VADDPS C, A, A; \
	VEXTRACTF128 $1, A, XB; VADDPS XB, XA, XA; VHADDPS XA, XA, XA; VHADDPS XA, XA, XA

// FMA3(off, W, a, b, c): the three rows' elements at off times the weights in W, into accumulators a, b, c.
#define FMA3(off, W, a, b, c) VFMADD231PS off(SI), W, a; VFMADD231PS off(R8), W, b; VFMADD231PS off(R9), W, c

// ARGS1 loads a one-row kernel's arguments: x in SI, its length in CX, the weight row b in DI.
#define ARGS1 MOVQ x_base+0(FP), SI; MOVQ x_len+8(FP), CX; MOVQ b_base+24(FP), DI

// ARGS3 loads a three-row kernel's arguments: x in SI, n in R13, the triples in R12, b in R11 (DI walks it),
// y in DX, its stride in bytes in BX, a row's bytes in R10.
#define ARGS3 \
	MOVQ x_base+0(FP), SI; MOVQ n+24(FP), R13; MOVQ triples+32(FP), R12; MOVQ b_base+40(FP), R11; \
	MOVQ y_base+64(FP), DX; MOVQ stride+88(FP), BX; SHLQ $2, BX; LEAQ 0(R13*4), R10

// START3 begins a triple: rows 1 and 2 follow row 0 (SI), DI at the weight row's start, the accumulators zero.
#define START3 \
	LEAQ (SI)(R10*1), R8; LEAQ (R8)(R10*1), R9; MOVQ R11, DI; \
	ZERO4(Y0, Y1, Y2, Y3); ZERO4(Y8, Y9, Y10, Y11); ZERO4(Y12, Y13, Y14, Y15)

// NEXT3 reduces and stores a triple's sums at DX, DX+BX, DX+2·BX, moves DX three rows down and SI to the next
// triple (where R9 ended), and counts R12 down.
#define NEXT3 \
	REDUCE4(Y0, Y1, Y2, Y3, X0, X1); REDUCE4(Y8, Y9, Y10, Y11, X8, X9); REDUCE4(Y12, Y13, Y14, Y15, X12, X13); \
	VMOVSS X0, (DX); VMOVSS X8, (DX)(BX*1); VMOVSS X12, (DX)(BX*2); \
	LEAQ (DX)(BX*2), DX; ADDQ BX, DX; MOVQ R9, SI; DECQ R12

// Q4_K super-blocks (144 bytes): float16 d, float16 dmin, 12 bytes of 6-bit scales and mins for 8 sub-blocks
// of 32, 128 bytes of nibbles (bytes 32g..32g+31 hold sub-block 2g in their low nibbles and 2g+1 in their
// high ones); w = float32(d·sc)·q - dmin·m.
//
// Q4KSCALES unpacks a super-block's scales (ggml's get_scale_min_k4, done four bytes at a time as ggml's x86
// code does) and stores the sub-blocks' float32 d·sc at 0(SP)..28(SP) and dmin·m at 32(SP)..60(SP), using
// 64(SP)..79(SP) for the bytes. Clobbers AX, BX, DX, Y4, Y5.
#define Q4KSCALES \
	MOVL 8(DI), BX; ANDL $0x3f3f3f3f, BX; MOVL BX, 72(SP); \
	MOVL 8(DI), BX; SHRL $6, BX; ANDL $0x03030303, BX; SHLL $4, BX; \
	MOVL 12(DI), DX; SHRL $4, DX; ANDL $0x0f0f0f0f, DX; ORL DX, BX; MOVL BX, 76(SP); \
	MOVL 4(DI), AX; SHRL $6, AX; ANDL $0x03030303, AX; SHLL $4, AX; \
	MOVL 12(DI), DX; ANDL $0x0f0f0f0f, DX; ORL DX, AX; MOVL AX, 68(SP); \
	MOVL 4(DI), AX; ANDL $0x3f3f3f3f, AX; MOVL AX, 64(SP); \
	HALF(0, X5, Y5); VPMOVZXBD 64(SP), Y4; VCVTDQ2PS Y4, Y4; VMULPS Y5, Y4, Y4; VMOVUPS Y4, 0(SP); \
	HALF(2, X5, Y5); VPMOVZXBD 72(SP), Y4; VCVTDQ2PS Y4, Y4; VMULPS Y5, Y4, Y4; VMOVUPS Y4, 32(SP)

// Q4KSUB(s, m) loads a sub-block's scale (at s(SP)) and offset (at m(SP)) into Y6, Y7.
#define Q4KSUB(s, m) VBROADCASTSS s(SP), Y6; VBROADCASTSS m(SP), Y7

// Q4KLO(qoff) and Q4KHI(qoff) decode 8 weights of the current sub-block into Y4 from the bytes at qoff(DI):
// their low nibbles (LO) or their high ones (HI).
#define Q4KLO(qoff) VPMOVZXBD qoff(DI), Y4; VPAND nib<>(SB), Y4, Y4; VCVTDQ2PS Y4, Y4; VMULPS Y6, Y4, Y4; VSUBPS Y7, Y4, Y4
#define Q4KHI(qoff) VPMOVZXBD qoff(DI), Y4; VPSRLD $4, Y4, Y4; VCVTDQ2PS Y4, Y4; VMULPS Y6, Y4, Y4; VSUBPS Y7, Y4, Y4


// Q8_0 blocks (34 bytes): float16 d, 32 int8 q; w = float32(q)·d.

// func dotQ8_0AVX2(x []float32, b []byte) float32
// len(x) is a positive multiple of 32; b holds len(x)/32 blocks.
TEXT ·dotQ8_0AVX2(SB), NOSPLIT, $0-52
	ARGS1
	SHRQ $5, CX
	ZERO4(Y0, Y1, Y2, Y3)

q8loop:
	HALF(0, X8, Y8)
	VPMOVSXBD 2(DI), Y4
	VPMOVSXBD 10(DI), Y5
	VPMOVSXBD 18(DI), Y6
	VPMOVSXBD 26(DI), Y7
	VCVTDQ2PS Y4, Y4
	VCVTDQ2PS Y5, Y5
	VCVTDQ2PS Y6, Y6
	VCVTDQ2PS Y7, Y7
	VMULPS Y8, Y4, Y4
	VMULPS Y8, Y5, Y5
	VMULPS Y8, Y6, Y6
	VMULPS Y8, Y7, Y7
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	VFMADD231PS 64(SI), Y6, Y2
	VFMADD231PS 96(SI), Y7, Y3
	ADDQ $128, SI
	ADDQ $34, DI
	DECQ CX
	JNZ  q8loop

	REDUCE4(Y0, Y1, Y2, Y3, X0, X1)
	VZEROUPPER
	MOVSS X0, ret+48(FP)
	RET

// func dotQ8_0x3AVX2(x []float32, n, triples int, b []byte, y []float32, stride int)
// For r < 3·triples: y[r·stride] = dotQ8_0AVX2(x[r·n:(r+1)·n], b). n is a positive multiple of 32; triples ≥ 1.
TEXT ·dotQ8_0x3AVX2(SB), NOSPLIT, $0-96
	ARGS3

q8x3triple:
	START3
	MOVQ R13, CX
	SHRQ $5, CX

q8x3loop:
	HALF(0, X6, Y6)
	VPMOVSXBD 2(DI), Y4
	VPMOVSXBD 10(DI), Y5
	VCVTDQ2PS Y4, Y4
	VCVTDQ2PS Y5, Y5
	VMULPS Y6, Y4, Y4
	VMULPS Y6, Y5, Y5
	FMA3(0, Y4, Y0, Y8, Y12)
	FMA3(32, Y5, Y1, Y9, Y13)
	VPMOVSXBD 18(DI), Y4
	VPMOVSXBD 26(DI), Y5
	VCVTDQ2PS Y4, Y4
	VCVTDQ2PS Y5, Y5
	VMULPS Y6, Y4, Y4
	VMULPS Y6, Y5, Y5
	FMA3(64, Y4, Y2, Y10, Y14)
	FMA3(96, Y5, Y3, Y11, Y15)
	ADDQ $128, SI
	ADDQ $128, R8
	ADDQ $128, R9
	ADDQ $34, DI
	DECQ CX
	JNZ  q8x3loop
	NEXT3
	JNZ  q8x3triple
	VZEROUPPER
	RET


// Q4_0 blocks (18 bytes): float16 d, 16 bytes of nibbles (low nibbles elements 0..15, high 16..31); w = float32(q-8)·d.

// func dotQ4_0AVX2(x []float32, b []byte) float32
// len(x) is a positive multiple of 32; b holds len(x)/32 blocks.
TEXT ·dotQ4_0AVX2(SB), NOSPLIT, $0-52
	ARGS1
	SHRQ $5, CX
	ZERO4(Y0, Y1, Y2, Y3)

q40loop:
	HALF(0, X8, Y8)
	VPMOVZXBD 2(DI), Y4
	VPMOVZXBD 10(DI), Y5
	VPSRLD $4, Y4, Y6
	VPSRLD $4, Y5, Y7
	VPAND nib<>(SB), Y4, Y4
	VPAND nib<>(SB), Y5, Y5
	VPSUBD eight<>(SB), Y4, Y4
	VCVTDQ2PS Y4, Y4
	VMULPS Y8, Y4, Y4
	VPSUBD eight<>(SB), Y5, Y5
	VCVTDQ2PS Y5, Y5
	VMULPS Y8, Y5, Y5
	VPSUBD eight<>(SB), Y6, Y6
	VCVTDQ2PS Y6, Y6
	VMULPS Y8, Y6, Y6
	VPSUBD eight<>(SB), Y7, Y7
	VCVTDQ2PS Y7, Y7
	VMULPS Y8, Y7, Y7
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	VFMADD231PS 64(SI), Y6, Y2
	VFMADD231PS 96(SI), Y7, Y3
	ADDQ $128, SI
	ADDQ $18, DI
	DECQ CX
	JNZ  q40loop

	REDUCE4(Y0, Y1, Y2, Y3, X0, X1)
	VZEROUPPER
	MOVSS X0, ret+48(FP)
	RET

// func dotQ4_0x3AVX2(x []float32, n, triples int, b []byte, y []float32, stride int)
// For r < 3·triples: y[r·stride] = dotQ4_0AVX2(x[r·n:(r+1)·n], b). n is a positive multiple of 32; triples ≥ 1.
TEXT ·dotQ4_0x3AVX2(SB), NOSPLIT, $0-96
	ARGS3

q40x3triple:
	START3
	MOVQ R13, CX
	SHRQ $5, CX

q40x3loop:
	HALF(0, X6, Y6)
	VPMOVZXBD 2(DI), Y4
	VPMOVZXBD 10(DI), Y5
	VPAND nib<>(SB), Y4, Y4
	VPAND nib<>(SB), Y5, Y5
	VPSUBD eight<>(SB), Y4, Y4
	VCVTDQ2PS Y4, Y4
	VMULPS Y6, Y4, Y4
	VPSUBD eight<>(SB), Y5, Y5
	VCVTDQ2PS Y5, Y5
	VMULPS Y6, Y5, Y5
	FMA3(0, Y4, Y0, Y8, Y12)
	FMA3(32, Y5, Y1, Y9, Y13)
	VPMOVZXBD 2(DI), Y4
	VPMOVZXBD 10(DI), Y5
	VPSRLD $4, Y4, Y4
	VPSRLD $4, Y5, Y5
	VPSUBD eight<>(SB), Y4, Y4
	VCVTDQ2PS Y4, Y4
	VMULPS Y6, Y4, Y4
	VPSUBD eight<>(SB), Y5, Y5
	VCVTDQ2PS Y5, Y5
	VMULPS Y6, Y5, Y5
	FMA3(64, Y4, Y2, Y10, Y14)
	FMA3(96, Y5, Y3, Y11, Y15)
	ADDQ $128, SI
	ADDQ $128, R8
	ADDQ $128, R9
	ADDQ $18, DI
	DECQ CX
	JNZ  q40x3loop
	NEXT3
	JNZ  q40x3triple
	VZEROUPPER
	RET


// Q4_1 blocks (20 bytes): float16 d, float16 m, 16 bytes of nibbles; w = float32(q)·d + m.

// func dotQ4_1AVX2(x []float32, b []byte) float32
// len(x) is a positive multiple of 32; b holds len(x)/32 blocks.
TEXT ·dotQ4_1AVX2(SB), NOSPLIT, $0-52
	ARGS1
	SHRQ $5, CX
	ZERO4(Y0, Y1, Y2, Y3)

q41loop:
	HALF(0, X8, Y8)
	HALF(2, X9, Y9)
	VPMOVZXBD 4(DI), Y4
	VPMOVZXBD 12(DI), Y5
	VPSRLD $4, Y4, Y6
	VPSRLD $4, Y5, Y7
	VPAND nib<>(SB), Y4, Y4
	VPAND nib<>(SB), Y5, Y5
	VCVTDQ2PS Y4, Y4
	VMULPS Y8, Y4, Y4
	VADDPS Y9, Y4, Y4
	VCVTDQ2PS Y5, Y5
	VMULPS Y8, Y5, Y5
	VADDPS Y9, Y5, Y5
	VCVTDQ2PS Y6, Y6
	VMULPS Y8, Y6, Y6
	VADDPS Y9, Y6, Y6
	VCVTDQ2PS Y7, Y7
	VMULPS Y8, Y7, Y7
	VADDPS Y9, Y7, Y7
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	VFMADD231PS 64(SI), Y6, Y2
	VFMADD231PS 96(SI), Y7, Y3
	ADDQ $128, SI
	ADDQ $20, DI
	DECQ CX
	JNZ  q41loop

	REDUCE4(Y0, Y1, Y2, Y3, X0, X1)
	VZEROUPPER
	MOVSS X0, ret+48(FP)
	RET

// func dotQ4_1x3AVX2(x []float32, n, triples int, b []byte, y []float32, stride int)
// For r < 3·triples: y[r·stride] = dotQ4_1AVX2(x[r·n:(r+1)·n], b). n is a positive multiple of 32; triples ≥ 1.
TEXT ·dotQ4_1x3AVX2(SB), NOSPLIT, $0-96
	ARGS3

q41x3triple:
	START3
	MOVQ R13, CX
	SHRQ $5, CX

q41x3loop:
	HALF(0, X6, Y6)
	HALF(2, X7, Y7)
	VPMOVZXBD 4(DI), Y4
	VPMOVZXBD 12(DI), Y5
	VPAND nib<>(SB), Y4, Y4
	VPAND nib<>(SB), Y5, Y5
	VCVTDQ2PS Y4, Y4
	VMULPS Y6, Y4, Y4
	VADDPS Y7, Y4, Y4
	VCVTDQ2PS Y5, Y5
	VMULPS Y6, Y5, Y5
	VADDPS Y7, Y5, Y5
	FMA3(0, Y4, Y0, Y8, Y12)
	FMA3(32, Y5, Y1, Y9, Y13)
	VPMOVZXBD 4(DI), Y4
	VPMOVZXBD 12(DI), Y5
	VPSRLD $4, Y4, Y4
	VPSRLD $4, Y5, Y5
	VCVTDQ2PS Y4, Y4
	VMULPS Y6, Y4, Y4
	VADDPS Y7, Y4, Y4
	VCVTDQ2PS Y5, Y5
	VMULPS Y6, Y5, Y5
	VADDPS Y7, Y5, Y5
	FMA3(64, Y4, Y2, Y10, Y14)
	FMA3(96, Y5, Y3, Y11, Y15)
	ADDQ $128, SI
	ADDQ $128, R8
	ADDQ $128, R9
	ADDQ $20, DI
	DECQ CX
	JNZ  q41x3loop
	NEXT3
	JNZ  q41x3triple
	VZEROUPPER
	RET


// func dotQ4_KAVX2(x []float32, b []byte) float32
// len(x) is a positive multiple of 256; b holds len(x)/256 super-blocks. The super-block count lives at 80(SP).
TEXT ·dotQ4_KAVX2(SB), NOSPLIT, $96-52
	ARGS1
	SHRQ $8, CX
	MOVQ CX, 80(SP)
	ZERO4(Y0, Y1, Y2, Y3)

q4kloop:
	Q4KSCALES
	Q4KSUB(0, 32)
	Q4KLO(16)
	VFMADD231PS 0(SI), Y4, Y0
	Q4KLO(24)
	VFMADD231PS 32(SI), Y4, Y1
	Q4KLO(32)
	VFMADD231PS 64(SI), Y4, Y2
	Q4KLO(40)
	VFMADD231PS 96(SI), Y4, Y3
	Q4KSUB(4, 36)
	Q4KHI(16)
	VFMADD231PS 128(SI), Y4, Y0
	Q4KHI(24)
	VFMADD231PS 160(SI), Y4, Y1
	Q4KHI(32)
	VFMADD231PS 192(SI), Y4, Y2
	Q4KHI(40)
	VFMADD231PS 224(SI), Y4, Y3
	Q4KSUB(8, 40)
	Q4KLO(48)
	VFMADD231PS 256(SI), Y4, Y0
	Q4KLO(56)
	VFMADD231PS 288(SI), Y4, Y1
	Q4KLO(64)
	VFMADD231PS 320(SI), Y4, Y2
	Q4KLO(72)
	VFMADD231PS 352(SI), Y4, Y3
	Q4KSUB(12, 44)
	Q4KHI(48)
	VFMADD231PS 384(SI), Y4, Y0
	Q4KHI(56)
	VFMADD231PS 416(SI), Y4, Y1
	Q4KHI(64)
	VFMADD231PS 448(SI), Y4, Y2
	Q4KHI(72)
	VFMADD231PS 480(SI), Y4, Y3
	Q4KSUB(16, 48)
	Q4KLO(80)
	VFMADD231PS 512(SI), Y4, Y0
	Q4KLO(88)
	VFMADD231PS 544(SI), Y4, Y1
	Q4KLO(96)
	VFMADD231PS 576(SI), Y4, Y2
	Q4KLO(104)
	VFMADD231PS 608(SI), Y4, Y3
	Q4KSUB(20, 52)
	Q4KHI(80)
	VFMADD231PS 640(SI), Y4, Y0
	Q4KHI(88)
	VFMADD231PS 672(SI), Y4, Y1
	Q4KHI(96)
	VFMADD231PS 704(SI), Y4, Y2
	Q4KHI(104)
	VFMADD231PS 736(SI), Y4, Y3
	Q4KSUB(24, 56)
	Q4KLO(112)
	VFMADD231PS 768(SI), Y4, Y0
	Q4KLO(120)
	VFMADD231PS 800(SI), Y4, Y1
	Q4KLO(128)
	VFMADD231PS 832(SI), Y4, Y2
	Q4KLO(136)
	VFMADD231PS 864(SI), Y4, Y3
	Q4KSUB(28, 60)
	Q4KHI(112)
	VFMADD231PS 896(SI), Y4, Y0
	Q4KHI(120)
	VFMADD231PS 928(SI), Y4, Y1
	Q4KHI(128)
	VFMADD231PS 960(SI), Y4, Y2
	Q4KHI(136)
	VFMADD231PS 992(SI), Y4, Y3
	ADDQ $1024, SI
	ADDQ $144, DI
	DECQ 80(SP)
	JNZ  q4kloop

	REDUCE4(Y0, Y1, Y2, Y3, X0, X1)
	VZEROUPPER
	MOVSS X0, ret+48(FP)
	RET

// func dotQ4_Kx3AVX2(x []float32, n, triples int, b []byte, y []float32, stride int)
// For r < 3·triples: y[r·stride] = dotQ4_KAVX2(x[r·n:(r+1)·n], b). n is a positive multiple of 256; triples ≥ 1.
// Q4KSCALES needs BX and DX: y's position is kept at 88(SP) and the stride reloaded; the super-block count
// lives at 80(SP).
TEXT ·dotQ4_Kx3AVX2(SB), NOSPLIT, $96-96
	ARGS3

q4kx3triple:
	START3
	MOVQ DX, 88(SP)
	MOVQ R13, CX
	SHRQ $8, CX
	MOVQ CX, 80(SP)

q4kx3loop:
	Q4KSCALES
	Q4KSUB(0, 32)
	Q4KLO(16)
	FMA3(0, Y4, Y0, Y8, Y12)
	Q4KLO(24)
	FMA3(32, Y4, Y1, Y9, Y13)
	Q4KLO(32)
	FMA3(64, Y4, Y2, Y10, Y14)
	Q4KLO(40)
	FMA3(96, Y4, Y3, Y11, Y15)
	Q4KSUB(4, 36)
	Q4KHI(16)
	FMA3(128, Y4, Y0, Y8, Y12)
	Q4KHI(24)
	FMA3(160, Y4, Y1, Y9, Y13)
	Q4KHI(32)
	FMA3(192, Y4, Y2, Y10, Y14)
	Q4KHI(40)
	FMA3(224, Y4, Y3, Y11, Y15)
	Q4KSUB(8, 40)
	Q4KLO(48)
	FMA3(256, Y4, Y0, Y8, Y12)
	Q4KLO(56)
	FMA3(288, Y4, Y1, Y9, Y13)
	Q4KLO(64)
	FMA3(320, Y4, Y2, Y10, Y14)
	Q4KLO(72)
	FMA3(352, Y4, Y3, Y11, Y15)
	Q4KSUB(12, 44)
	Q4KHI(48)
	FMA3(384, Y4, Y0, Y8, Y12)
	Q4KHI(56)
	FMA3(416, Y4, Y1, Y9, Y13)
	Q4KHI(64)
	FMA3(448, Y4, Y2, Y10, Y14)
	Q4KHI(72)
	FMA3(480, Y4, Y3, Y11, Y15)
	Q4KSUB(16, 48)
	Q4KLO(80)
	FMA3(512, Y4, Y0, Y8, Y12)
	Q4KLO(88)
	FMA3(544, Y4, Y1, Y9, Y13)
	Q4KLO(96)
	FMA3(576, Y4, Y2, Y10, Y14)
	Q4KLO(104)
	FMA3(608, Y4, Y3, Y11, Y15)
	Q4KSUB(20, 52)
	Q4KHI(80)
	FMA3(640, Y4, Y0, Y8, Y12)
	Q4KHI(88)
	FMA3(672, Y4, Y1, Y9, Y13)
	Q4KHI(96)
	FMA3(704, Y4, Y2, Y10, Y14)
	Q4KHI(104)
	FMA3(736, Y4, Y3, Y11, Y15)
	Q4KSUB(24, 56)
	Q4KLO(112)
	FMA3(768, Y4, Y0, Y8, Y12)
	Q4KLO(120)
	FMA3(800, Y4, Y1, Y9, Y13)
	Q4KLO(128)
	FMA3(832, Y4, Y2, Y10, Y14)
	Q4KLO(136)
	FMA3(864, Y4, Y3, Y11, Y15)
	Q4KSUB(28, 60)
	Q4KHI(112)
	FMA3(896, Y4, Y0, Y8, Y12)
	Q4KHI(120)
	FMA3(928, Y4, Y1, Y9, Y13)
	Q4KHI(128)
	FMA3(960, Y4, Y2, Y10, Y14)
	Q4KHI(136)
	FMA3(992, Y4, Y3, Y11, Y15)
	ADDQ $1024, SI
	ADDQ $1024, R8
	ADDQ $1024, R9
	ADDQ $144, DI
	DECQ 80(SP)
	JNZ  q4kx3loop
	MOVQ 88(SP), DX
	MOVQ stride+88(FP), BX
	SHLQ $2, BX
	NEXT3
	JNZ  q4kx3triple
	VZEROUPPER
	RET
