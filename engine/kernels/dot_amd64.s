#include "textflag.h"

// The three-row kernels (at the end of the file) share everything but how they load b. Three input rows a0, a1, a2 (SI, R8, R9)
// against one b (DI), CX elements: row 0 accumulates in Y0-Y3, row 1 in Y8-Y11, row 2 in Y12-Y15, and Y4-Y7 hold
// the loaded b. Each row is summed exactly as the one-row kernel sums it (the same accumulators, order and
// reduction; a product is the same whichever operand is loaded), so batched and single results are bit-identical.
// One call takes every triple of input rows against one weight row (while it stays in L1), so the cost of a
// call is paid once per weight row, not once per three input rows.

// WIDEN32 loads 32 bfloat16 elements at DI into Y4-Y7 as float32 (exact: the bits shifted up by 16).
#define WIDEN32 \
	VPMOVZXWD (DI), Y4; VPMOVZXWD 16(DI), Y5; VPMOVZXWD 32(DI), Y6; VPMOVZXWD 48(DI), Y7; \
	VPSLLD $16, Y4, Y4; VPSLLD $16, Y5, Y5; VPSLLD $16, Y6, Y6; VPSLLD $16, Y7, Y7

// ARGS3 loads the three-row kernels' arguments: x (the input rows, n elements each) in SI, n in R13, the number
// of row triples in R12, the weight row b in DI, the output y in DX and its stride between rows in BX (bytes);
// R10 is a row's bytes and R11 keeps b's start.
#define ARGS3 \
	MOVQ x_base+0(FP), SI; \
	MOVQ n+24(FP), R13; \
	MOVQ triples+32(FP), R12; \
	MOVQ b_base+40(FP), DI; \
	MOVQ DI, R11; \
	MOVQ y_base+64(FP), DX; \
	MOVQ stride+88(FP), BX; \
	SHLQ $2, BX; \
	LEAQ 0(R13*4), R10

// START3 begins a triple: a1 and a2 follow a0 (SI), the count is n, the accumulators are zero.
#define START3 \
	LEAQ (SI)(R10*1), R8; \
	LEAQ (R8)(R10*1), R9; \
	MOVQ R13, CX; \
	VXORPS Y0, Y0, Y0; VXORPS Y1, Y1, Y1; VXORPS Y2, Y2, Y2; VXORPS Y3, Y3, Y3; \
	VXORPS Y8, Y8, Y8; VXORPS Y9, Y9, Y9; VXORPS Y10, Y10, Y10; VXORPS Y11, Y11, Y11; \
	VXORPS Y12, Y12, Y12; VXORPS Y13, Y13, Y13; VXORPS Y14, Y14, Y14; VXORPS Y15, Y15, Y15

// FMA3X32: 32 elements of each row times b's 32 in Y4-Y7; then the rows' pointers move on.
#define FMA3X32 \
	VFMADD231PS (SI), Y4, Y0; VFMADD231PS 32(SI), Y5, Y1; VFMADD231PS 64(SI), Y6, Y2; VFMADD231PS 96(SI), Y7, Y3; \
	VFMADD231PS (R8), Y4, Y8; VFMADD231PS 32(R8), Y5, Y9; VFMADD231PS 64(R8), Y6, Y10; VFMADD231PS 96(R8), Y7, Y11; \
	VFMADD231PS (R9), Y4, Y12; VFMADD231PS 32(R9), Y5, Y13; VFMADD231PS 64(R9), Y6, Y14; VFMADD231PS 96(R9), Y7, Y15; \
	ADDQ $128, SI; ADDQ $128, R8; ADDQ $128, R9

// FMA3X8: 8 elements of each row times b's 8 in Y4.
#define FMA3X8 \
	VFMADD231PS (SI), Y4, Y0; VFMADD231PS (R8), Y4, Y8; VFMADD231PS (R9), Y4, Y12; \
	ADDQ $32, SI; ADDQ $32, R8; ADDQ $32, R9

// ARGS1 loads the one-row kernels' arguments (a in SI, its length in CX, b in DI) and zeroes their accumulators
// Y0-Y3.
#define ARGS1 \
	MOVQ a_base+0(FP), SI; MOVQ a_len+8(FP), CX; MOVQ b_base+24(FP), DI; \
	VXORPS Y0, Y0, Y0; VXORPS Y1, Y1, Y1; VXORPS Y2, Y2, Y2; VXORPS Y3, Y3, Y3

// REDUCE1 sums the one-row kernels' accumulators Y0-Y3 into X0 (X1 is scratch).
#define REDUCE1 \
	VADDPS Y1, Y0, Y0; VADDPS Y3, Y2, Y2; VADDPS Y2, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; VADDPS X1, X0, X0; VHADDPS X0, X0, X0; VHADDPS X0, X0, X0

// REDUCE3 sums each row's accumulators into X0, X8 and X12, as REDUCE1 does.
#define REDUCE3 \
	REDUCE1; \
	VADDPS Y9, Y8, Y8; VADDPS Y11, Y10, Y10; VADDPS Y10, Y8, Y8; \
	VEXTRACTF128 $1, Y8, X9; VADDPS X9, X8, X8; VHADDPS X8, X8, X8; VHADDPS X8, X8, X8; \
	VADDPS Y13, Y12, Y12; VADDPS Y15, Y14, Y14; VADDPS Y14, Y12, Y12; \
	VEXTRACTF128 $1, Y12, X13; VADDPS X13, X12, X12; VHADDPS X12, X12, X12; VHADDPS X12, X12, X12

// FMA3X1: one element of each row times b's element in X1.
#define FMA3X1 \
	VFMADD231SS (SI), X1, X0; VFMADD231SS (R8), X1, X8; VFMADD231SS (R9), X1, X12; \
	ADDQ $4, SI; ADDQ $4, R8; ADDQ $4, R9

// NEXT3 stores a triple's sums (X0, X8, X12) at DX, DX+BX and DX+2·BX and moves on: DX three rows down, DI
// back to the weight row's start, SI to the next triple (where R9 ended); R12 counts the triples left.
#define NEXT3 \
	VMOVSS X0, (DX); VMOVSS X8, (DX)(BX*1); VMOVSS X12, (DX)(BX*2); \
	LEAQ (DX)(BX*2), DX; ADDQ BX, DX; \
	MOVQ R11, DI; \
	MOVQ R9, SI; \
	DECQ R12


// func dotF32AVX2(a, b []float32) float32
// len(b) ≥ len(a). Four 8-lane accumulators over 32 elements per iteration, then 8 at a time, then one at a time.
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-52
	ARGS1

f32loop32:
	CMPQ CX, $32
	JL   f32loop8
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  f32loop32

f32loop8:
	CMPQ CX, $8
	JL   f32reduce
	VMOVUPS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  f32loop8

f32reduce:
	REDUCE1

f32tail:
	CMPQ CX, $0
	JE   f32done
	VMOVSS (SI), X1
	VFMADD231SS (DI), X1, X0
	ADDQ $4, SI
	ADDQ $4, DI
	DECQ CX
	JMP  f32tail

f32done:
	VZEROUPPER
	MOVSS X0, ret+48(FP)
	RET

// func dotBF16AVX2(a []float32, b []bfloat16.BFloat16) float32
// len(b) ≥ len(a). b's elements are widened exactly (bf16 bits << 16) as they are loaded.
TEXT ·dotBF16AVX2(SB), NOSPLIT, $0-52
	ARGS1

bfloop32:
	CMPQ CX, $32
	JL   bfloop8
	WIDEN32
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	VFMADD231PS 64(SI), Y6, Y2
	VFMADD231PS 96(SI), Y7, Y3
	ADDQ $128, SI
	ADDQ $64, DI
	SUBQ $32, CX
	JMP  bfloop32

bfloop8:
	CMPQ CX, $8
	JL   bfreduce
	VPMOVZXWD (DI), Y4
	VPSLLD $16, Y4, Y4
	VFMADD231PS (SI), Y4, Y0
	ADDQ $32, SI
	ADDQ $16, DI
	SUBQ $8, CX
	JMP  bfloop8

bfreduce:
	REDUCE1

bftail:
	CMPQ CX, $0
	JE   bfdone
	MOVWLZX (DI), AX
	SHLL $16, AX
	VMOVD AX, X1
	VFMADD231SS (SI), X1, X0
	ADDQ $4, SI
	ADDQ $2, DI
	DECQ CX
	JMP  bftail

bfdone:
	VZEROUPPER
	MOVSS X0, ret+48(FP)
	RET

// func dotBF16x3AVX2(x []float32, n, triples int, b []bfloat16.BFloat16, y []float32, stride int)
// For r < 3·triples: y[r·stride] = dotBF16AVX2(x[r·n:(r+1)·n], b), b loaded and widened once per three rows.
// triples ≥ 1; len(b) ≥ n.
TEXT ·dotBF16x3AVX2(SB), NOSPLIT, $0-96
	ARGS3

bx3triple:
	START3

bx3loop32:
	CMPQ CX, $32
	JL   bx3loop8
	WIDEN32
	FMA3X32
	ADDQ $64, DI
	SUBQ $32, CX
	JMP  bx3loop32

bx3loop8:
	CMPQ CX, $8
	JL   bx3reduce
	VPMOVZXWD (DI), Y4
	VPSLLD $16, Y4, Y4
	FMA3X8
	ADDQ $16, DI
	SUBQ $8, CX
	JMP  bx3loop8

bx3reduce:
	REDUCE3

bx3tail:
	CMPQ CX, $0
	JE   bx3next
	MOVWLZX (DI), AX
	SHLL $16, AX
	VMOVD AX, X1
	FMA3X1
	ADDQ $2, DI
	DECQ CX
	JMP  bx3tail

bx3next:
	NEXT3
	JNZ  bx3triple
	VZEROUPPER
	RET

// func dotF32x3AVX2(x []float32, n, triples int, b []float32, y []float32, stride int)
// For r < 3·triples: y[r·stride] = dotF32AVX2(x[r·n:(r+1)·n], b), b loaded once per three rows. triples ≥ 1;
// len(b) ≥ n.
TEXT ·dotF32x3AVX2(SB), NOSPLIT, $0-96
	ARGS3

fx3triple:
	START3

fx3loop32:
	CMPQ CX, $32
	JL   fx3loop8
	VMOVUPS (DI), Y4
	VMOVUPS 32(DI), Y5
	VMOVUPS 64(DI), Y6
	VMOVUPS 96(DI), Y7
	FMA3X32
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  fx3loop32

fx3loop8:
	CMPQ CX, $8
	JL   fx3reduce
	VMOVUPS (DI), Y4
	FMA3X8
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  fx3loop8

fx3reduce:
	REDUCE3

fx3tail:
	CMPQ CX, $0
	JE   fx3next
	VMOVSS (DI), X1
	FMA3X1
	ADDQ $4, DI
	DECQ CX
	JMP  fx3tail

fx3next:
	NEXT3
	JNZ  fx3triple
	VZEROUPPER
	RET

// func axpyF32AVX2(y []float32, a float32, x []float32)
// y[i] += a·x[i] (fused multiply-add) for i < len(y); len(x) ≥ len(y).
TEXT ·axpyF32AVX2(SB), NOSPLIT, $0-56
	MOVQ y_base+0(FP), DI
	MOVQ y_len+8(FP), CX
	VBROADCASTSS a+24(FP), Y0
	MOVQ x_base+32(FP), SI

axloop32:
	CMPQ CX, $32
	JL   axloop8
	VMOVUPS (DI), Y1
	VMOVUPS 32(DI), Y2
	VMOVUPS 64(DI), Y3
	VMOVUPS 96(DI), Y4
	VFMADD231PS (SI), Y0, Y1
	VFMADD231PS 32(SI), Y0, Y2
	VFMADD231PS 64(SI), Y0, Y3
	VFMADD231PS 96(SI), Y0, Y4
	VMOVUPS Y1, (DI)
	VMOVUPS Y2, 32(DI)
	VMOVUPS Y3, 64(DI)
	VMOVUPS Y4, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  axloop32

axloop8:
	CMPQ CX, $8
	JL   axtail
	VMOVUPS (DI), Y1
	VFMADD231PS (SI), Y0, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  axloop8

axtail:
	CMPQ CX, $0
	JE   axdone
	VMOVSS (DI), X1
	VFMADD231SS (SI), X0, X1
	VMOVSS X1, (DI)
	ADDQ $4, SI
	ADDQ $4, DI
	DECQ CX
	JMP  axtail

axdone:
	VZEROUPPER
	RET
