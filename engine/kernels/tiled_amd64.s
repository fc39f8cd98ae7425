#include "textflag.h"

// The tiled K-quant kernel (tiled.go): 16 weight rows (the lanes of each register) times 12 input rows.
// Z0-Z11: each input's sum over the current sub-block (then its minimum sums), Z12-Z23: each input's sum over
// the super-block, scaled per sub-block; Z24: four codes of each row (then d); Z25: the sub-block scales (then the
// minimum factors, then dm); Z26, Z27: the float terms.

// DOT12: the products of one quad of the 16 rows' codes (Z24) with the same quad of the 12 inputs, each four
// values broadcast from (DI).
#define DOT12 \
	VPDPBUSD.BCST 0(DI), Z24, Z0; VPDPBUSD.BCST 4(DI), Z24, Z1; VPDPBUSD.BCST 8(DI), Z24, Z2; VPDPBUSD.BCST 12(DI), Z24, Z3; VPDPBUSD.BCST 16(DI), Z24, Z4; VPDPBUSD.BCST 20(DI), Z24, Z5; VPDPBUSD.BCST 24(DI), Z24, Z6; VPDPBUSD.BCST 28(DI), Z24, Z7; VPDPBUSD.BCST 32(DI), Z24, Z8; VPDPBUSD.BCST 36(DI), Z24, Z9; VPDPBUSD.BCST 40(DI), Z24, Z10; VPDPBUSD.BCST 44(DI), Z24, Z11

// SCALE(zi, zs): zs += zi·(the rows' sub-block scales, Z25); zi = 0.
#define SCALE(zi, zs) VPMULLD Z25, zi, zi; VPADDD zi, zs, zs; VPXORD zi, zi, zi

// MIN12: the minimum factors of a pair of sub-blocks (Z25, int16 pairs) times each input's pair of sums.
#define MIN12 \
	VPDPWSSD.BCST 0(R12), Z25, Z0; VPDPWSSD.BCST 4(R12), Z25, Z1; VPDPWSSD.BCST 8(R12), Z25, Z2; VPDPWSSD.BCST 12(R12), Z25, Z3; VPDPWSSD.BCST 16(R12), Z25, Z4; VPDPWSSD.BCST 20(R12), Z25, Z5; VPDPWSSD.BCST 24(R12), Z25, Z6; VPDPWSSD.BCST 28(R12), Z25, Z7; VPDPWSSD.BCST 32(R12), Z25, Z8; VPDPWSSD.BCST 36(R12), Z25, Z9; VPDPWSSD.BCST 40(R12), Z25, Z10; VPDPWSSD.BCST 44(R12), Z25, Z11

// EPI(zi, zs, dx, y): acc[y..] += ((float(zs)·d) − (float(zi)·dm))·dx, no fused operation; zi = zs = 0.
#define EPI(zi, zs, dx, y) \
	VCVTDQ2PS zs, Z26; VMULPS Z24, Z26, Z26; VCVTDQ2PS zi, Z27; VMULPS Z25, Z27, Z27; VSUBPS Z27, Z26, Z26; \
	VMULPS.BCST dx(R12), Z26, Z26; VADDPS y(AX), Z26, Z26; VMOVUPS Z26, y(AX); VPXORD zi, zi, zi; VPXORD zs, zs, zs

// EPIQ8(zi, zs, corr, dx): zs += ((float(zi − 128·Σx)·d)·dx) for one 32-element block, no fused operation; zi = 0.
#define EPIQ8(zi, zs, corr, dx) \
	VPSUBD.BCST corr(R12), zi, zi; VCVTDQ2PS zi, zi; VMULPS Z25, zi, zi; VMULPS.BCST dx(R12), zi, zi; \
	VADDPS zi, zs, zs; VPXORD zi, zi, zi

// EPIQ81(zi, zs, s, dx): zs += (((float(zi)·d)·dx) + m·s) for one 32-element block with a minimum (Z26: the rows'
// m), no fused operation; zi = 0.
#define EPIQ81(zi, zs, s, dx) \
	VCVTDQ2PS zi, zi; VMULPS Z25, zi, zi; VMULPS.BCST dx(R12), zi, zi; VMULPS.BCST s(R12), Z26, Z27; \
	VADDPS Z27, zi, zi; VADDPS zi, zs, zs; VPXORD zi, zi, zi

// func tileKVNNI(codes, meta, qs, ameta *byte, nsb, nsub, qps int, acc *float32)
TEXT ·tileKVNNI(SB), NOSPLIT, $0-64
	MOVQ codes+0(FP), SI
	MOVQ meta+8(FP), BX
	MOVQ qs+16(FP), DI
	MOVQ ameta+24(FP), R12
	MOVQ nsb+32(FP), CX
	MOVQ nsub+40(FP), R11
	MOVQ qps+48(FP), R10
	MOVQ acc+56(FP), AX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13
	VPXORD Z14, Z14, Z14
	VPXORD Z15, Z15, Z15
	VPXORD Z16, Z16, Z16
	VPXORD Z17, Z17, Z17
	VPXORD Z18, Z18, Z18
	VPXORD Z19, Z19, Z19
	VPXORD Z20, Z20, Z20
	VPXORD Z21, Z21, Z21
	VPXORD Z22, Z22, Z22
	VPXORD Z23, Z23, Z23

superblock:
	MOVQ R11, R8

subblock:
	MOVQ R10, DX

quad:
	VMOVDQU32 (SI), Z24
	DOT12
	ADDQ $64, SI
	ADDQ $48, DI
	DECQ DX
	JNZ  quad
	VMOVDQU32 (BX), Z25
	SCALE(Z0, Z12)
	SCALE(Z1, Z13)
	SCALE(Z2, Z14)
	SCALE(Z3, Z15)
	SCALE(Z4, Z16)
	SCALE(Z5, Z17)
	SCALE(Z6, Z18)
	SCALE(Z7, Z19)
	SCALE(Z8, Z20)
	SCALE(Z9, Z21)
	SCALE(Z10, Z22)
	SCALE(Z11, Z23)
	ADDQ $64, BX
	DECQ R8
	JNZ  subblock
	MOVQ R11, R9
	SHRQ $1, R9

pair:
	VMOVDQU32 (BX), Z25
	MIN12
	ADDQ $64, BX
	ADDQ $48, R12
	DECQ R9
	JNZ  pair
	VMOVUPS (BX), Z24
	VMOVUPS 64(BX), Z25
	EPI(Z0, Z12, 0, 0)
	EPI(Z1, Z13, 4, 64)
	EPI(Z2, Z14, 8, 128)
	EPI(Z3, Z15, 12, 192)
	EPI(Z4, Z16, 16, 256)
	EPI(Z5, Z17, 20, 320)
	EPI(Z6, Z18, 24, 384)
	EPI(Z7, Z19, 28, 448)
	EPI(Z8, Z20, 32, 512)
	EPI(Z9, Z21, 36, 576)
	EPI(Z10, Z22, 40, 640)
	EPI(Z11, Z23, 44, 704)
	ADDQ $128, BX
	ADDQ $48, R12
	DECQ CX
	JNZ  superblock
	VZEROUPPER
	RET

// func tileQ8VNNI(codes, meta, qs, ameta *byte, nb int, acc *float32)
// 32-element blocks (tiled.go, tileQ8Go): Z0-Z11 each input's integer sum over the block, Z12-Z23 its float sums
// (from acc), Z24 four codes of each row, Z25 the rows' d.
TEXT ·tileQ8VNNI(SB), NOSPLIT, $0-48
	MOVQ codes+0(FP), SI
	MOVQ meta+8(FP), BX
	MOVQ qs+16(FP), DI
	MOVQ ameta+24(FP), R12
	MOVQ nb+32(FP), CX
	MOVQ acc+40(FP), AX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VMOVUPS 0(AX), Z12
	VMOVUPS 64(AX), Z13
	VMOVUPS 128(AX), Z14
	VMOVUPS 192(AX), Z15
	VMOVUPS 256(AX), Z16
	VMOVUPS 320(AX), Z17
	VMOVUPS 384(AX), Z18
	VMOVUPS 448(AX), Z19
	VMOVUPS 512(AX), Z20
	VMOVUPS 576(AX), Z21
	VMOVUPS 640(AX), Z22
	VMOVUPS 704(AX), Z23

q8block:
	MOVQ $8, DX

q8quad:
	VMOVDQU32 (SI), Z24
	DOT12
	ADDQ $64, SI
	ADDQ $48, DI
	DECQ DX
	JNZ  q8quad
	VMOVUPS (BX), Z25
	EPIQ8(Z0, Z12, 0, 48)
	EPIQ8(Z1, Z13, 4, 52)
	EPIQ8(Z2, Z14, 8, 56)
	EPIQ8(Z3, Z15, 12, 60)
	EPIQ8(Z4, Z16, 16, 64)
	EPIQ8(Z5, Z17, 20, 68)
	EPIQ8(Z6, Z18, 24, 72)
	EPIQ8(Z7, Z19, 28, 76)
	EPIQ8(Z8, Z20, 32, 80)
	EPIQ8(Z9, Z21, 36, 84)
	EPIQ8(Z10, Z22, 40, 88)
	EPIQ8(Z11, Z23, 44, 92)
	ADDQ $64, BX
	ADDQ $96, R12
	DECQ CX
	JNZ  q8block
	VMOVUPS Z12, 0(AX)
	VMOVUPS Z13, 64(AX)
	VMOVUPS Z14, 128(AX)
	VMOVUPS Z15, 192(AX)
	VMOVUPS Z16, 256(AX)
	VMOVUPS Z17, 320(AX)
	VMOVUPS Z18, 384(AX)
	VMOVUPS Z19, 448(AX)
	VMOVUPS Z20, 512(AX)
	VMOVUPS Z21, 576(AX)
	VMOVUPS Z22, 640(AX)
	VMOVUPS Z23, 704(AX)
	VZEROUPPER
	RET

// func tileQ81VNNI(codes, meta, qs, ameta *byte, nb int, acc *float32)
// tileQ8VNNI for blocks with a minimum (tileQ81Go): Z25 the rows' d, Z26 their m, Z27 m·s.
TEXT ·tileQ81VNNI(SB), NOSPLIT, $0-48
	MOVQ codes+0(FP), SI
	MOVQ meta+8(FP), BX
	MOVQ qs+16(FP), DI
	MOVQ ameta+24(FP), R12
	MOVQ nb+32(FP), CX
	MOVQ acc+40(FP), AX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VMOVUPS 0(AX), Z12
	VMOVUPS 64(AX), Z13
	VMOVUPS 128(AX), Z14
	VMOVUPS 192(AX), Z15
	VMOVUPS 256(AX), Z16
	VMOVUPS 320(AX), Z17
	VMOVUPS 384(AX), Z18
	VMOVUPS 448(AX), Z19
	VMOVUPS 512(AX), Z20
	VMOVUPS 576(AX), Z21
	VMOVUPS 640(AX), Z22
	VMOVUPS 704(AX), Z23

q81block:
	MOVQ $8, DX

q81quad:
	VMOVDQU32 (SI), Z24
	DOT12
	ADDQ $64, SI
	ADDQ $48, DI
	DECQ DX
	JNZ  q81quad
	VMOVUPS (BX), Z25
	VMOVUPS 64(BX), Z26
	EPIQ81(Z0, Z12, 0, 48)
	EPIQ81(Z1, Z13, 4, 52)
	EPIQ81(Z2, Z14, 8, 56)
	EPIQ81(Z3, Z15, 12, 60)
	EPIQ81(Z4, Z16, 16, 64)
	EPIQ81(Z5, Z17, 20, 68)
	EPIQ81(Z6, Z18, 24, 72)
	EPIQ81(Z7, Z19, 28, 76)
	EPIQ81(Z8, Z20, 32, 80)
	EPIQ81(Z9, Z21, 36, 84)
	EPIQ81(Z10, Z22, 40, 88)
	EPIQ81(Z11, Z23, 44, 92)
	ADDQ $128, BX
	ADDQ $96, R12
	DECQ CX
	JNZ  q81block
	VMOVUPS Z12, 0(AX)
	VMOVUPS Z13, 64(AX)
	VMOVUPS Z14, 128(AX)
	VMOVUPS Z15, 192(AX)
	VMOVUPS Z16, 256(AX)
	VMOVUPS Z17, 320(AX)
	VMOVUPS Z18, 384(AX)
	VMOVUPS Z19, 448(AX)
	VMOVUPS Z20, 512(AX)
	VMOVUPS Z21, 576(AX)
	VMOVUPS Z22, 640(AX)
	VMOVUPS Z23, 704(AX)
	VZEROUPPER
	RET
