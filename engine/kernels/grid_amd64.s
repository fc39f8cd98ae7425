#include "textflag.h"

// func gridIntsAVX2(q *[256]int8, x *int8, sc *[16]int32) int32
//
// Σ_s sc[s]·Σ_{j in sixteenth s} q[j]·x[j], 32 elements (two sixteenths) a step: VPMADDUBSW multiplies |q| by x
// with q's signs (VPSIGNB; |q| ≤ 63 and |x| ≤ 127, so no pair saturates), VPMADDWD adds the pairs times the
// sixteenth's scale as 16-bit words (the low 128-bit lane is sixteenth 2i, the high one 2i+1).
TEXT ·gridIntsAVX2(SB), NOSPLIT, $0-28
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ sc+16(FP), DX
	VPXOR Y0, Y0, Y0
	MOVQ $8, CX

loop:
	VMOVDQU (SI), Y1
	VMOVDQU (DI), Y2
	VPSIGNB Y1, Y2, Y2
	VPABSB Y1, Y1
	VPMADDUBSW Y2, Y1, Y3
	VPBROADCASTW (DX), X4
	VPBROADCASTW 4(DX), X5
	VINSERTI128 $1, X5, Y4, Y4
	VPMADDWD Y4, Y3, Y3
	VPADDD Y3, Y0, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $8, DX
	DECQ CX
	JNZ loop

	VEXTRACTI128 $1, Y0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0x4e, X0, X1
	VPADDD X1, X0, X0
	VPSHUFD $0xb1, X0, X1
	VPADDD X1, X0, X0
	VMOVD X0, AX
	MOVL AX, ret+24(FP)
	VZEROUPPER
	RET
