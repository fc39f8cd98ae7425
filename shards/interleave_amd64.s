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

// func interleave4AVX2(dst, p0, p1, p2, p3 *byte, n int)
// dst[4i+k] = pk[i] for i < n; n is a positive multiple of 32. Bytes of planes 0/1 and 2/3 are paired into
// words, the words into dwords, within 128-bit lanes; VPERM2I128 puts the lanes back in order.
TEXT ·interleave4AVX2(SB), NOSPLIT, $0-48
	MOVQ dst+0(FP), DI
	MOVQ p0+8(FP), SI
	MOVQ p1+16(FP), DX
	MOVQ p2+24(FP), R8
	MOVQ p3+32(FP), R9
	MOVQ n+40(FP), CX

loop4:
	VMOVDQU (SI), Y0
	VMOVDQU (DX), Y1
	VMOVDQU (R8), Y2
	VMOVDQU (R9), Y3
	VPUNPCKLBW Y1, Y0, Y4 // lane 0: elements 0-7, lane 1: 16-23 (bytes 0, 1)
	VPUNPCKHBW Y1, Y0, Y5 // lane 0: 8-15, lane 1: 24-31
	VPUNPCKLBW Y3, Y2, Y6 // the same for bytes 2, 3
	VPUNPCKHBW Y3, Y2, Y7
	VPUNPCKLWD Y6, Y4, Y8  // lane 0: elements 0-3, lane 1: 16-19
	VPUNPCKHWD Y6, Y4, Y9  // lane 0: 4-7, lane 1: 20-23
	VPUNPCKLWD Y7, Y5, Y10 // lane 0: 8-11, lane 1: 24-27
	VPUNPCKHWD Y7, Y5, Y11 // lane 0: 12-15, lane 1: 28-31
	VPERM2I128 $0x20, Y9, Y8, Y0
	VPERM2I128 $0x20, Y11, Y10, Y1
	VPERM2I128 $0x31, Y9, Y8, Y2
	VPERM2I128 $0x31, Y11, Y10, Y3
	VMOVDQU Y0, (DI)
	VMOVDQU Y1, 32(DI)
	VMOVDQU Y2, 64(DI)
	VMOVDQU Y3, 96(DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $128, DI
	SUBQ $32, CX
	JNZ loop4
	VZEROUPPER
	RET
