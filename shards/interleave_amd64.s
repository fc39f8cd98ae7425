#include "textflag.h"

// func interleave2AVX2(dst, p0, p1 *byte, n int)
// dst[2i] = p0[i], dst[2i+1] = p1[i] for i < n; n is a positive multiple of 32. VPUNPCK{L,H}BW interleave
// within 128-bit lanes; VPERM2I128 puts the lanes back in order.
TEXT ·interleave2AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), SI
	MOVQ p1+16(FP), DX
	MOVQ n+24(FP), CX

loop:
	VMOVDQU (SI), Y0
	VMOVDQU (DX), Y1
	VPUNPCKLBW Y1, Y0, Y2 // lane 0: elements 0-7, lane 1: elements 16-23
	VPUNPCKHBW Y1, Y0, Y3 // lane 0: elements 8-15, lane 1: elements 24-31
	VPERM2I128 $0x20, Y3, Y2, Y4
	VPERM2I128 $0x31, Y3, Y2, Y5
	VMOVDQU Y4, (DI)
	VMOVDQU Y5, 32(DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $64, DI
	SUBQ $32, CX
	JNZ loop
	VZEROUPPER
	RET

// func expandNibblesAVX2(dst, codes *byte, table *[16]byte, groups int)
// For each group of 32 output bytes: 16 code bytes, low nibbles then high nibbles, looked up in table with
// VPSHUFB (the table in both 128-bit lanes). groups is positive.
TEXT ·expandNibblesAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ codes+8(FP), SI
	MOVQ table+16(FP), DX
	MOVQ groups+24(FP), CX
	VBROADCASTI128 (DX), Y14
	MOVL $0x0f0f0f0f, AX
	MOVL AX, X15
	VPBROADCASTD X15, Y15

nloop:
	VMOVDQU (SI), X0
	VPSRLW $4, X0, X1
	VPAND X15, X0, X0
	VPAND X15, X1, X1
	VINSERTI128 $1, X1, Y0, Y0
	VPSHUFB Y0, Y14, Y2
	VMOVDQU Y2, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ nloop
	VZEROUPPER
	RET
