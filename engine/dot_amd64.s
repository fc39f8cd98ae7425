#include "textflag.h"

// func dotF32AVX2(a, b []float32) float32
// len(b) ≥ len(a). Four 8-lane accumulators over 32 elements per iteration, then 8 at a time, then one at a time.
TEXT ·dotF32AVX2(SB), NOSPLIT, $0-52
	MOVQ a_base+0(FP), SI
	MOVQ a_len+8(FP), CX
	MOVQ b_base+24(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

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
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0

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
	MOVQ a_base+0(FP), SI
	MOVQ a_len+8(FP), CX
	MOVQ b_base+24(FP), DI
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

bfloop32:
	CMPQ CX, $32
	JL   bfloop8
	VPMOVZXWD (DI), Y4
	VPMOVZXWD 16(DI), Y5
	VPMOVZXWD 32(DI), Y6
	VPMOVZXWD 48(DI), Y7
	VPSLLD $16, Y4, Y4
	VPSLLD $16, Y5, Y5
	VPSLLD $16, Y6, Y6
	VPSLLD $16, Y7, Y7
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
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0

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
