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


// q6shifts: the word shifts of Q6_K's high bits for the even chunks (0 in the low 32 bytes, 2 in the high ones)
// and the odd ones (4, 6).
DATA q6shifts<>+0(SB)/2, $0
DATA q6shifts<>+2(SB)/2, $0
DATA q6shifts<>+4(SB)/2, $0
DATA q6shifts<>+6(SB)/2, $0
DATA q6shifts<>+8(SB)/2, $0
DATA q6shifts<>+10(SB)/2, $0
DATA q6shifts<>+12(SB)/2, $0
DATA q6shifts<>+14(SB)/2, $0
DATA q6shifts<>+16(SB)/2, $0
DATA q6shifts<>+18(SB)/2, $0
DATA q6shifts<>+20(SB)/2, $0
DATA q6shifts<>+22(SB)/2, $0
DATA q6shifts<>+24(SB)/2, $0
DATA q6shifts<>+26(SB)/2, $0
DATA q6shifts<>+28(SB)/2, $0
DATA q6shifts<>+30(SB)/2, $0
DATA q6shifts<>+32(SB)/2, $2
DATA q6shifts<>+34(SB)/2, $2
DATA q6shifts<>+36(SB)/2, $2
DATA q6shifts<>+38(SB)/2, $2
DATA q6shifts<>+40(SB)/2, $2
DATA q6shifts<>+42(SB)/2, $2
DATA q6shifts<>+44(SB)/2, $2
DATA q6shifts<>+46(SB)/2, $2
DATA q6shifts<>+48(SB)/2, $2
DATA q6shifts<>+50(SB)/2, $2
DATA q6shifts<>+52(SB)/2, $2
DATA q6shifts<>+54(SB)/2, $2
DATA q6shifts<>+56(SB)/2, $2
DATA q6shifts<>+58(SB)/2, $2
DATA q6shifts<>+60(SB)/2, $2
DATA q6shifts<>+62(SB)/2, $2
DATA q6shifts<>+64(SB)/2, $4
DATA q6shifts<>+66(SB)/2, $4
DATA q6shifts<>+68(SB)/2, $4
DATA q6shifts<>+70(SB)/2, $4
DATA q6shifts<>+72(SB)/2, $4
DATA q6shifts<>+74(SB)/2, $4
DATA q6shifts<>+76(SB)/2, $4
DATA q6shifts<>+78(SB)/2, $4
DATA q6shifts<>+80(SB)/2, $4
DATA q6shifts<>+82(SB)/2, $4
DATA q6shifts<>+84(SB)/2, $4
DATA q6shifts<>+86(SB)/2, $4
DATA q6shifts<>+88(SB)/2, $4
DATA q6shifts<>+90(SB)/2, $4
DATA q6shifts<>+92(SB)/2, $4
DATA q6shifts<>+94(SB)/2, $4
DATA q6shifts<>+96(SB)/2, $6
DATA q6shifts<>+98(SB)/2, $6
DATA q6shifts<>+100(SB)/2, $6
DATA q6shifts<>+102(SB)/2, $6
DATA q6shifts<>+104(SB)/2, $6
DATA q6shifts<>+106(SB)/2, $6
DATA q6shifts<>+108(SB)/2, $6
DATA q6shifts<>+110(SB)/2, $6
DATA q6shifts<>+112(SB)/2, $6
DATA q6shifts<>+114(SB)/2, $6
DATA q6shifts<>+116(SB)/2, $6
DATA q6shifts<>+118(SB)/2, $6
DATA q6shifts<>+120(SB)/2, $6
DATA q6shifts<>+122(SB)/2, $6
DATA q6shifts<>+124(SB)/2, $6
DATA q6shifts<>+126(SB)/2, $6
GLOBL q6shifts<>(SB), RODATA|NOPTR, $128
DATA tilednib<>+0(SB)/4, $0x0f0f0f0f
GLOBL tilednib<>(SB), RODATA|NOPTR, $4
DATA tiledthree<>+0(SB)/4, $0x03030303
GLOBL tiledthree<>(SB), RODATA|NOPTR, $4
DATA tiled80<>+0(SB)/4, $0x80808080
GLOBL tiled80<>(SB), RODATA|NOPTR, $4

// The unpackers of 16 rows' codes (tiled.go, codes16): each chunk of 64 codes of the 16 rows is made in Z0-Z15 (row
// r in Zr, its quads 0..15 in the dword lanes), then TRANSPOSE16 turns them into the panel's layout (quad q of the
// 16 rows in Zq) and they are stored as the chunk's 1 KiB.

// TRANSPOSE16 transposes the 16×16 dwords of Z0-Z15 (Z16-Z31 scratch): 32-bit and 64-bit unpacks within 128-bit
// lanes, then two rounds of 128-bit lane shuffles.
#define TRANSPOSE16 \
	VPUNPCKLDQ Z1, Z0, Z16 \
	VPUNPCKHDQ Z1, Z0, Z17 \
	VPUNPCKLDQ Z3, Z2, Z18 \
	VPUNPCKHDQ Z3, Z2, Z19 \
	VPUNPCKLDQ Z5, Z4, Z20 \
	VPUNPCKHDQ Z5, Z4, Z21 \
	VPUNPCKLDQ Z7, Z6, Z22 \
	VPUNPCKHDQ Z7, Z6, Z23 \
	VPUNPCKLDQ Z9, Z8, Z24 \
	VPUNPCKHDQ Z9, Z8, Z25 \
	VPUNPCKLDQ Z11, Z10, Z26 \
	VPUNPCKHDQ Z11, Z10, Z27 \
	VPUNPCKLDQ Z13, Z12, Z28 \
	VPUNPCKHDQ Z13, Z12, Z29 \
	VPUNPCKLDQ Z15, Z14, Z30 \
	VPUNPCKHDQ Z15, Z14, Z31 \
	VPUNPCKLQDQ Z18, Z16, Z0 \
	VPUNPCKHQDQ Z18, Z16, Z1 \
	VPUNPCKLQDQ Z19, Z17, Z2 \
	VPUNPCKHQDQ Z19, Z17, Z3 \
	VPUNPCKLQDQ Z22, Z20, Z4 \
	VPUNPCKHQDQ Z22, Z20, Z5 \
	VPUNPCKLQDQ Z23, Z21, Z6 \
	VPUNPCKHQDQ Z23, Z21, Z7 \
	VPUNPCKLQDQ Z26, Z24, Z8 \
	VPUNPCKHQDQ Z26, Z24, Z9 \
	VPUNPCKLQDQ Z27, Z25, Z10 \
	VPUNPCKHQDQ Z27, Z25, Z11 \
	VPUNPCKLQDQ Z30, Z28, Z12 \
	VPUNPCKHQDQ Z30, Z28, Z13 \
	VPUNPCKLQDQ Z31, Z29, Z14 \
	VPUNPCKHQDQ Z31, Z29, Z15 \
	VSHUFI32X4 $0x44, Z4, Z0, Z16 \
	VSHUFI32X4 $0xEE, Z4, Z0, Z17 \
	VSHUFI32X4 $0x44, Z12, Z8, Z18 \
	VSHUFI32X4 $0xEE, Z12, Z8, Z19 \
	VSHUFI32X4 $0x44, Z5, Z1, Z20 \
	VSHUFI32X4 $0xEE, Z5, Z1, Z21 \
	VSHUFI32X4 $0x44, Z13, Z9, Z22 \
	VSHUFI32X4 $0xEE, Z13, Z9, Z23 \
	VSHUFI32X4 $0x44, Z6, Z2, Z24 \
	VSHUFI32X4 $0xEE, Z6, Z2, Z25 \
	VSHUFI32X4 $0x44, Z14, Z10, Z26 \
	VSHUFI32X4 $0xEE, Z14, Z10, Z27 \
	VSHUFI32X4 $0x44, Z7, Z3, Z28 \
	VSHUFI32X4 $0xEE, Z7, Z3, Z29 \
	VSHUFI32X4 $0x44, Z15, Z11, Z30 \
	VSHUFI32X4 $0xEE, Z15, Z11, Z31 \
	VSHUFI32X4 $0x88, Z18, Z16, Z0 \
	VSHUFI32X4 $0xDD, Z18, Z16, Z4 \
	VSHUFI32X4 $0x88, Z19, Z17, Z8 \
	VSHUFI32X4 $0xDD, Z19, Z17, Z12 \
	VSHUFI32X4 $0x88, Z22, Z20, Z1 \
	VSHUFI32X4 $0xDD, Z22, Z20, Z5 \
	VSHUFI32X4 $0x88, Z23, Z21, Z9 \
	VSHUFI32X4 $0xDD, Z23, Z21, Z13 \
	VSHUFI32X4 $0x88, Z26, Z24, Z2 \
	VSHUFI32X4 $0xDD, Z26, Z24, Z6 \
	VSHUFI32X4 $0x88, Z27, Z25, Z10 \
	VSHUFI32X4 $0xDD, Z27, Z25, Z14 \
	VSHUFI32X4 $0x88, Z30, Z28, Z3 \
	VSHUFI32X4 $0xDD, Z30, Z28, Z7 \
	VSHUFI32X4 $0x88, Z31, Z29, Z11 \
	VSHUFI32X4 $0xDD, Z31, Z29, Z15

// STORE16(off): Z0-Z15 to off(DI), 64 bytes each.
#define STORE16(off) \
	VMOVDQU64 Z0, off+0(DI) \
	VMOVDQU64 Z1, off+64(DI) \
	VMOVDQU64 Z2, off+128(DI) \
	VMOVDQU64 Z3, off+192(DI) \
	VMOVDQU64 Z4, off+256(DI) \
	VMOVDQU64 Z5, off+320(DI) \
	VMOVDQU64 Z6, off+384(DI) \
	VMOVDQU64 Z7, off+448(DI) \
	VMOVDQU64 Z8, off+512(DI) \
	VMOVDQU64 Z9, off+576(DI) \
	VMOVDQU64 Z10, off+640(DI) \
	VMOVDQU64 Z11, off+704(DI) \
	VMOVDQU64 Z12, off+768(DI) \
	VMOVDQU64 Z13, off+832(DI) \
	VMOVDQU64 Z14, off+896(DI) \
	VMOVDQU64 Z15, off+960(DI)

// Q4ROWLO(zr, h), Q4ROWHI(zr, h): row (R8)'s 64 codes of chunk 2·(h/64) (LO) or 2·(h/64)+1 (HI) into zr: the
// nibbles of its qs bytes h..h+63 (Q4_K's qs at 16), the low then the high nibbles of their low (LO) or high
// (HI) 32 bytes. Z30: 0x0f bytes.
#define Q4NIBBLES(h) VMOVDQU64 16+h(R8), Z28; VPSRLW $4, Z28, Z29; VPANDD Z30, Z28, Z28; VPANDD Z30, Z29, Z29
#define Q4ROWLO(zr, h) Q4NIBBLES(h); VINSERTI64X4 $1, Y29, Z28, zr; ADDQ R9, R8
#define Q4ROWHI(zr, h) Q4NIBBLES(h); VSHUFI64X2 $0xEE, Z29, Z28, zr; ADDQ R9, R8

// Q6ROWLO(zr, l, q), Q6ROWHI(zr, l, q): row (R8)'s 64 codes of an even (LO) or odd (HI) Q6_K chunk: (ql bytes
// l..l+63, shifted right 4 for HI) & 0x0f | ((qh bytes q..q+31, in both halves, >> the word shifts of Z31) & 3)
// << 4. Z30: 0x0f bytes, Z27: 0x03 bytes.
#define Q6HIGH(zr, q) \
	VPANDD Z30, Z28, Z28; VBROADCASTI64X4 128+q(R8), Z29; VPSRLVW Z31, Z29, Z29; VPANDD Z27, Z29, Z29; \
	VPSLLW $4, Z29, Z29; VPORD Z29, Z28, zr; ADDQ R9, R8
#define Q6ROWLO(zr, l, q) VMOVDQU64 l(R8), Z28; Q6HIGH(zr, q)
#define Q6ROWHI(zr, l, q) VMOVDQU64 l(R8), Z28; VPSRLW $4, Z28, Z28; Q6HIGH(zr, q)

// Q8ROW(zr): row (R8)'s codes of two Q8_0 blocks (34 bytes each: a float16 d, then 32 int8) as w + 128 into zr.
// Z30: 0x80 bytes.
#define Q8ROW(zr) \
	VMOVDQU64 2(R8), Y28; VINSERTI64X4 $1, 36(R8), Z28, Z28; VPXORD Z30, Z28, zr; ADDQ R9, R8

// TILE32ENTRY: the arguments of a kernel of 32-element blocks (tileQ8VNNI, tileQ81VNNI) into their registers,
// Z0-Z11 zeroed, Z12-Z23 from acc; STOREACC12: Z12-Z23 back to acc.
#define TILE32ENTRY \
	MOVQ codes+0(FP), SI; MOVQ meta+8(FP), BX; MOVQ qs+16(FP), DI; MOVQ ameta+24(FP), R12; MOVQ nb+32(FP), CX; \
	MOVQ acc+40(FP), AX; \
	VPXORD Z0, Z0, Z0; VPXORD Z1, Z1, Z1; VPXORD Z2, Z2, Z2; VPXORD Z3, Z3, Z3 \
	VPXORD Z4, Z4, Z4; VPXORD Z5, Z5, Z5; VPXORD Z6, Z6, Z6; VPXORD Z7, Z7, Z7 \
	VPXORD Z8, Z8, Z8; VPXORD Z9, Z9, Z9; VPXORD Z10, Z10, Z10; VPXORD Z11, Z11, Z11 \
	VMOVUPS 0(AX), Z12; VMOVUPS 64(AX), Z13; VMOVUPS 128(AX), Z14; VMOVUPS 192(AX), Z15 \
	VMOVUPS 256(AX), Z16; VMOVUPS 320(AX), Z17; VMOVUPS 384(AX), Z18; VMOVUPS 448(AX), Z19 \
	VMOVUPS 512(AX), Z20; VMOVUPS 576(AX), Z21; VMOVUPS 640(AX), Z22; VMOVUPS 704(AX), Z23
#define STOREACC12 \
	VMOVUPS Z12, 0(AX); VMOVUPS Z13, 64(AX); VMOVUPS Z14, 128(AX); VMOVUPS Z15, 192(AX) \
	VMOVUPS Z16, 256(AX); VMOVUPS Z17, 320(AX); VMOVUPS Z18, 384(AX); VMOVUPS Z19, 448(AX) \
	VMOVUPS Z20, 512(AX); VMOVUPS Z21, 576(AX); VMOVUPS Z22, 640(AX); VMOVUPS Z23, 704(AX)

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
	TILE32ENTRY

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
	STOREACC12
	VZEROUPPER
	RET

// func tileQ81VNNI(codes, meta, qs, ameta *byte, nb int, acc *float32)
// tileQ8VNNI for blocks with a minimum (tileQ81Go): Z25 the rows' d, Z26 their m, Z27 m·s.
TEXT ·tileQ81VNNI(SB), NOSPLIT, $0-48
	TILE32ENTRY

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
	STOREACC12
	VZEROUPPER
	RET

// func codes16Q4_KAVX512(src *byte, stride int, dst *byte)
// One super-block of 16 Q4_K rows (src: row 0's block, stride: bytes from a row's block to the next's) as the
// panel's 4096 bytes of codes at dst.
TEXT ·codes16Q4_KAVX512(SB), NOSPLIT, $0-24
	MOVQ src+0(FP), SI
	MOVQ stride+8(FP), R9
	MOVQ dst+16(FP), DI
	MOVQ SI, R8
	VPBROADCASTD tilednib<>(SB), Z30 // TRANSPOSE16 took Z16-Z31
	Q4ROWLO(Z0, 0)
	Q4ROWLO(Z1, 0)
	Q4ROWLO(Z2, 0)
	Q4ROWLO(Z3, 0)
	Q4ROWLO(Z4, 0)
	Q4ROWLO(Z5, 0)
	Q4ROWLO(Z6, 0)
	Q4ROWLO(Z7, 0)
	Q4ROWLO(Z8, 0)
	Q4ROWLO(Z9, 0)
	Q4ROWLO(Z10, 0)
	Q4ROWLO(Z11, 0)
	Q4ROWLO(Z12, 0)
	Q4ROWLO(Z13, 0)
	Q4ROWLO(Z14, 0)
	Q4ROWLO(Z15, 0)
	TRANSPOSE16
	STORE16(0)
	MOVQ SI, R8
	VPBROADCASTD tilednib<>(SB), Z30 // TRANSPOSE16 took Z16-Z31
	Q4ROWHI(Z0, 0)
	Q4ROWHI(Z1, 0)
	Q4ROWHI(Z2, 0)
	Q4ROWHI(Z3, 0)
	Q4ROWHI(Z4, 0)
	Q4ROWHI(Z5, 0)
	Q4ROWHI(Z6, 0)
	Q4ROWHI(Z7, 0)
	Q4ROWHI(Z8, 0)
	Q4ROWHI(Z9, 0)
	Q4ROWHI(Z10, 0)
	Q4ROWHI(Z11, 0)
	Q4ROWHI(Z12, 0)
	Q4ROWHI(Z13, 0)
	Q4ROWHI(Z14, 0)
	Q4ROWHI(Z15, 0)
	TRANSPOSE16
	STORE16(1024)
	MOVQ SI, R8
	VPBROADCASTD tilednib<>(SB), Z30 // TRANSPOSE16 took Z16-Z31
	Q4ROWLO(Z0, 64)
	Q4ROWLO(Z1, 64)
	Q4ROWLO(Z2, 64)
	Q4ROWLO(Z3, 64)
	Q4ROWLO(Z4, 64)
	Q4ROWLO(Z5, 64)
	Q4ROWLO(Z6, 64)
	Q4ROWLO(Z7, 64)
	Q4ROWLO(Z8, 64)
	Q4ROWLO(Z9, 64)
	Q4ROWLO(Z10, 64)
	Q4ROWLO(Z11, 64)
	Q4ROWLO(Z12, 64)
	Q4ROWLO(Z13, 64)
	Q4ROWLO(Z14, 64)
	Q4ROWLO(Z15, 64)
	TRANSPOSE16
	STORE16(2048)
	MOVQ SI, R8
	VPBROADCASTD tilednib<>(SB), Z30 // TRANSPOSE16 took Z16-Z31
	Q4ROWHI(Z0, 64)
	Q4ROWHI(Z1, 64)
	Q4ROWHI(Z2, 64)
	Q4ROWHI(Z3, 64)
	Q4ROWHI(Z4, 64)
	Q4ROWHI(Z5, 64)
	Q4ROWHI(Z6, 64)
	Q4ROWHI(Z7, 64)
	Q4ROWHI(Z8, 64)
	Q4ROWHI(Z9, 64)
	Q4ROWHI(Z10, 64)
	Q4ROWHI(Z11, 64)
	Q4ROWHI(Z12, 64)
	Q4ROWHI(Z13, 64)
	Q4ROWHI(Z14, 64)
	Q4ROWHI(Z15, 64)
	TRANSPOSE16
	STORE16(3072)
	VZEROUPPER
	RET

// func codes16Q6_KAVX512(src *byte, stride int, dst *byte)
// One super-block of 16 Q6_K rows as the panel's 4096 bytes of codes at dst (codes16Q4_KAVX512's arguments).
TEXT ·codes16Q6_KAVX512(SB), NOSPLIT, $0-24
	MOVQ src+0(FP), SI
	MOVQ stride+8(FP), R9
	MOVQ dst+16(FP), DI
	VMOVDQU64 q6shifts<>+0(SB), Z31
	MOVQ SI, R8
	VPBROADCASTD tilednib<>(SB), Z30 // TRANSPOSE16 took Z16-Z31
	VPBROADCASTD tiledthree<>(SB), Z27
	Q6ROWLO(Z0, 0, 0)
	Q6ROWLO(Z1, 0, 0)
	Q6ROWLO(Z2, 0, 0)
	Q6ROWLO(Z3, 0, 0)
	Q6ROWLO(Z4, 0, 0)
	Q6ROWLO(Z5, 0, 0)
	Q6ROWLO(Z6, 0, 0)
	Q6ROWLO(Z7, 0, 0)
	Q6ROWLO(Z8, 0, 0)
	Q6ROWLO(Z9, 0, 0)
	Q6ROWLO(Z10, 0, 0)
	Q6ROWLO(Z11, 0, 0)
	Q6ROWLO(Z12, 0, 0)
	Q6ROWLO(Z13, 0, 0)
	Q6ROWLO(Z14, 0, 0)
	Q6ROWLO(Z15, 0, 0)
	TRANSPOSE16
	STORE16(0)
	VMOVDQU64 q6shifts<>+64(SB), Z31
	MOVQ SI, R8
	VPBROADCASTD tilednib<>(SB), Z30 // TRANSPOSE16 took Z16-Z31
	VPBROADCASTD tiledthree<>(SB), Z27
	Q6ROWHI(Z0, 0, 0)
	Q6ROWHI(Z1, 0, 0)
	Q6ROWHI(Z2, 0, 0)
	Q6ROWHI(Z3, 0, 0)
	Q6ROWHI(Z4, 0, 0)
	Q6ROWHI(Z5, 0, 0)
	Q6ROWHI(Z6, 0, 0)
	Q6ROWHI(Z7, 0, 0)
	Q6ROWHI(Z8, 0, 0)
	Q6ROWHI(Z9, 0, 0)
	Q6ROWHI(Z10, 0, 0)
	Q6ROWHI(Z11, 0, 0)
	Q6ROWHI(Z12, 0, 0)
	Q6ROWHI(Z13, 0, 0)
	Q6ROWHI(Z14, 0, 0)
	Q6ROWHI(Z15, 0, 0)
	TRANSPOSE16
	STORE16(1024)
	VMOVDQU64 q6shifts<>+0(SB), Z31
	MOVQ SI, R8
	VPBROADCASTD tilednib<>(SB), Z30 // TRANSPOSE16 took Z16-Z31
	VPBROADCASTD tiledthree<>(SB), Z27
	Q6ROWLO(Z0, 64, 32)
	Q6ROWLO(Z1, 64, 32)
	Q6ROWLO(Z2, 64, 32)
	Q6ROWLO(Z3, 64, 32)
	Q6ROWLO(Z4, 64, 32)
	Q6ROWLO(Z5, 64, 32)
	Q6ROWLO(Z6, 64, 32)
	Q6ROWLO(Z7, 64, 32)
	Q6ROWLO(Z8, 64, 32)
	Q6ROWLO(Z9, 64, 32)
	Q6ROWLO(Z10, 64, 32)
	Q6ROWLO(Z11, 64, 32)
	Q6ROWLO(Z12, 64, 32)
	Q6ROWLO(Z13, 64, 32)
	Q6ROWLO(Z14, 64, 32)
	Q6ROWLO(Z15, 64, 32)
	TRANSPOSE16
	STORE16(2048)
	VMOVDQU64 q6shifts<>+64(SB), Z31
	MOVQ SI, R8
	VPBROADCASTD tilednib<>(SB), Z30 // TRANSPOSE16 took Z16-Z31
	VPBROADCASTD tiledthree<>(SB), Z27
	Q6ROWHI(Z0, 64, 32)
	Q6ROWHI(Z1, 64, 32)
	Q6ROWHI(Z2, 64, 32)
	Q6ROWHI(Z3, 64, 32)
	Q6ROWHI(Z4, 64, 32)
	Q6ROWHI(Z5, 64, 32)
	Q6ROWHI(Z6, 64, 32)
	Q6ROWHI(Z7, 64, 32)
	Q6ROWHI(Z8, 64, 32)
	Q6ROWHI(Z9, 64, 32)
	Q6ROWHI(Z10, 64, 32)
	Q6ROWHI(Z11, 64, 32)
	Q6ROWHI(Z12, 64, 32)
	Q6ROWHI(Z13, 64, 32)
	Q6ROWHI(Z14, 64, 32)
	Q6ROWHI(Z15, 64, 32)
	TRANSPOSE16
	STORE16(3072)
	VZEROUPPER
	RET

// func codes16Q8_0AVX512(src *byte, stride int, dst *byte, pairs int)
// pairs pairs of Q8_0 blocks of 16 rows (src: row 0's first block, stride: bytes from a row to the next) as the
// panel's 1 KiB of codes per pair at dst.
TEXT ·codes16Q8_0AVX512(SB), NOSPLIT, $0-32
	MOVQ src+0(FP), SI
	MOVQ stride+8(FP), R9
	MOVQ dst+16(FP), DI
	MOVQ pairs+24(FP), CX

q8pair:
	MOVQ SI, R8
	VPBROADCASTD tiled80<>(SB), Z30
	Q8ROW(Z0)
	Q8ROW(Z1)
	Q8ROW(Z2)
	Q8ROW(Z3)
	Q8ROW(Z4)
	Q8ROW(Z5)
	Q8ROW(Z6)
	Q8ROW(Z7)
	Q8ROW(Z8)
	Q8ROW(Z9)
	Q8ROW(Z10)
	Q8ROW(Z11)
	Q8ROW(Z12)
	Q8ROW(Z13)
	Q8ROW(Z14)
	Q8ROW(Z15)
	TRANSPOSE16
	STORE16(0)
	ADDQ $68, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ  q8pair
	VZEROUPPER
	RET
