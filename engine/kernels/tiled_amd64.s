#include "textflag.h"
#include "transpose_amd64.h"

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
DATA tiled10<>+0(SB)/4, $0x10101010
GLOBL tiled10<>(SB), RODATA|NOPTR, $4

// q5rot: the dword rotations that bring Q5_K's high bit of chunk c (bit 2c of each qh byte in the low 32 bytes,
// bit 2c+1 in the high ones) to bit 4: chunk c's two counts at 8·c.
DATA q5rot<>+0(SB)/4, $4
DATA q5rot<>+4(SB)/4, $3
DATA q5rot<>+8(SB)/4, $2
DATA q5rot<>+12(SB)/4, $1
DATA q5rot<>+16(SB)/4, $0
DATA q5rot<>+20(SB)/4, $31
DATA q5rot<>+24(SB)/4, $30
DATA q5rot<>+28(SB)/4, $29
GLOBL q5rot<>(SB), RODATA|NOPTR, $32

// q3rot: the dword rotations that bring Q3_K's hmask bit of chunk c (bit 2c of each byte in the low 32 bytes,
// 2c+1 in the high ones) to bit 2: chunk c's two counts at 8·c.
DATA q3rot<>+0(SB)/4, $2
DATA q3rot<>+4(SB)/4, $1
DATA q3rot<>+8(SB)/4, $0
DATA q3rot<>+12(SB)/4, $31
DATA q3rot<>+16(SB)/4, $30
DATA q3rot<>+20(SB)/4, $29
DATA q3rot<>+24(SB)/4, $28
DATA q3rot<>+28(SB)/4, $27
GLOBL q3rot<>(SB), RODATA|NOPTR, $32
DATA tiled04<>+0(SB)/4, $0x04040404
GLOBL tiled04<>(SB), RODATA|NOPTR, $4
DATA tiled20<>+0(SB)/4, $0x00000020
GLOBL tiled20<>(SB), RODATA|NOPTR, $4

// tiledsh4: the word shift 4 (the lanes of the high nibbles of 32-element blocks).
DATA tiledsh4<>+0(SB)/4, $0x00040004
GLOBL tiledsh4<>(SB), RODATA|NOPTR, $4

// tiledrows: the dword lane numbers 0..15 (row r's gather offset is r·stride).
DATA tiledrows<>+0(SB)/8, $0x0000000100000000
DATA tiledrows<>+8(SB)/8, $0x0000000300000002
DATA tiledrows<>+16(SB)/8, $0x0000000500000004
DATA tiledrows<>+24(SB)/8, $0x0000000700000006
DATA tiledrows<>+32(SB)/8, $0x0000000900000008
DATA tiledrows<>+40(SB)/8, $0x0000000b0000000a
DATA tiledrows<>+48(SB)/8, $0x0000000d0000000c
DATA tiledrows<>+56(SB)/8, $0x0000000f0000000e
GLOBL tiledrows<>(SB), RODATA|NOPTR, $64
DATA tiled0f<>+0(SB)/4, $0x0000000f
GLOBL tiled0f<>(SB), RODATA|NOPTR, $4
DATA tiledffff<>+0(SB)/4, $0x0000ffff
GLOBL tiledffff<>(SB), RODATA|NOPTR, $4

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

// ROWS16(M), ROWS16X(M, x), ROWS16XY(M, x, y): the row macro M for rows 0..15 into Z0..Z15, each with the same
// arguments after its register.
#define ROWS16(M) \
	M(Z0) \
	M(Z1) \
	M(Z2) \
	M(Z3) \
	M(Z4) \
	M(Z5) \
	M(Z6) \
	M(Z7) \
	M(Z8) \
	M(Z9) \
	M(Z10) \
	M(Z11) \
	M(Z12) \
	M(Z13) \
	M(Z14) \
	M(Z15)
#define ROWS16X(M, x) \
	M(Z0, x) \
	M(Z1, x) \
	M(Z2, x) \
	M(Z3, x) \
	M(Z4, x) \
	M(Z5, x) \
	M(Z6, x) \
	M(Z7, x) \
	M(Z8, x) \
	M(Z9, x) \
	M(Z10, x) \
	M(Z11, x) \
	M(Z12, x) \
	M(Z13, x) \
	M(Z14, x) \
	M(Z15, x)
#define ROWS16XY(M, x, y) \
	M(Z0, x, y) \
	M(Z1, x, y) \
	M(Z2, x, y) \
	M(Z3, x, y) \
	M(Z4, x, y) \
	M(Z5, x, y) \
	M(Z6, x, y) \
	M(Z7, x, y) \
	M(Z8, x, y) \
	M(Z9, x, y) \
	M(Z10, x, y) \
	M(Z11, x, y) \
	M(Z12, x, y) \
	M(Z13, x, y) \
	M(Z14, x, y) \
	M(Z15, x, y)

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

// CODES16ENTRY: the arguments of a super-block's unpacker (codes16Q4_KAVX512 and its kin) into SI (row 0's
// block), R9 (the stride) and DI (the panel's codes).
#define CODES16ENTRY MOVQ src+0(FP), SI; MOVQ stride+8(FP), R9; MOVQ dst+16(FP), DI

// Q4CHUNK(ROW, h, off): the 16 rows' codes of one Q4_K chunk (qs bytes h..h+63, ROW: Q4ROWLO or Q4ROWHI) stored
// at off(DI); the constant is loaded again for each chunk, as TRANSPOSE16 takes Z16-Z31.
#define Q4CHUNK(ROW, h, off) \
	MOVQ SI, R8 \
	VPBROADCASTD tilednib<>(SB), Z30 \
	ROWS16X(ROW, h) \
	TRANSPOSE16 \
	STORE16(off)

// Q6ROWLO(zr, l, q), Q6ROWHI(zr, l, q): row (R8)'s 64 codes of an even (LO) or odd (HI) Q6_K chunk: (ql bytes
// l..l+63, shifted right 4 for HI) & 0x0f | ((qh bytes q..q+31, in both halves, >> the word shifts of Z31) & 3)
// << 4. Z30: 0x0f bytes, Z27: 0x03 bytes.
#define Q6HIGH(zr, q) \
	VPANDD Z30, Z28, Z28; VBROADCASTI64X4 128+q(R8), Z29; VPSRLVW Z31, Z29, Z29; VPANDD Z27, Z29, Z29; \
	VPSLLW $4, Z29, Z29; VPORD Z29, Z28, zr; ADDQ R9, R8
#define Q6ROWLO(zr, l, q) VMOVDQU64 l(R8), Z28; Q6HIGH(zr, q)
#define Q6ROWHI(zr, l, q) VMOVDQU64 l(R8), Z28; VPSRLW $4, Z28, Z28; Q6HIGH(zr, q)

// Q6CHUNK(ROW, l, q, shifts, off): the 16 rows' codes of one Q6_K chunk (ql bytes l..l+63, qh bytes q..q+31,
// ROW: Q6ROWLO or Q6ROWHI, the word shifts at q6shifts+shifts) stored at off(DI).
#define Q6CHUNK(ROW, l, q, shifts, off) \
	MOVQ SI, R8 \
	VMOVDQU64 q6shifts<>+shifts(SB), Z31 \
	VPBROADCASTD tilednib<>(SB), Z30 \
	VPBROADCASTD tiledthree<>(SB), Z27 \
	ROWS16XY(ROW, l, q) \
	TRANSPOSE16 \
	STORE16(off)

// Q8ROW(zr): row (R8)'s codes of two Q8_0 blocks (34 bytes each: a float16 d, then 32 int8) as w + 128 into zr.
// Z30: 0x80 bytes.
#define Q8ROW(zr) \
	VMOVDQU64 2(R8), Y28; VINSERTI64X4 $1, 36(R8), Z28, Z28; VPXORD Z30, Z28, zr; ADDQ R9, R8

// Q5ROWLO(zr, h), Q5ROWHI(zr, h): Q4ROWLO and Q4ROWHI of Q5_K's qs (at 48), each code's bit 4 from qh (at 16, its
// 32 bytes in both halves) rotated into place by Z31's dword counts (q5rot) and kept by Z26 (0x10 bytes).
#define Q5NIBBLES(h) VMOVDQU64 48+h(R8), Z28; VPSRLW $4, Z28, Z29; VPANDD Z30, Z28, Z28; VPANDD Z30, Z29, Z29
#define Q5HIGH(zr) VBROADCASTI64X4 16(R8), Z27; VPROLVD Z31, Z27, Z27; VPTERNLOGD $0xF8, Z26, Z27, zr; ADDQ R9, R8
#define Q5ROWLO(zr, h) Q5NIBBLES(h); VINSERTI64X4 $1, Y29, Z28, zr; Q5HIGH(zr)
#define Q5ROWHI(zr, h) Q5NIBBLES(h); VSHUFI64X2 $0xEE, Z29, Z28, zr; Q5HIGH(zr)

// Q5CHUNK(h, ROW, rot, off): the 16 rows' codes of one Q5_K chunk (qs bytes h..h+63, ROW: Q5ROWLO or Q5ROWHI;
// rot: its counts in q5rot) stored at off(DI). K1: the high eight dwords.
#define Q5CHUNK(h, ROW, rot, off) \
	MOVQ SI, R8 \
	VPBROADCASTD tilednib<>(SB), Z30 \
	VPBROADCASTD tiled10<>(SB), Z26 \
	VPBROADCASTD q5rot<>+rot(SB), Z31 \
	VPBROADCASTD q5rot<>+4+rot(SB), K1, Z31 \
	ROWS16X(ROW, h) \
	TRANSPOSE16 \
	STORE16(off)

// NIBPAIR(zr, q0, q1): the codes of two 32-element blocks of row (R8) whose 16 qs bytes are at q0 and q1 (block 0's
// low nibbles in lane 0, its high ones in lane 1, block 1's in lanes 2 and 3). Z30: 0x0f bytes, Z31: the word
// shifts 0, 4, 0, 4 of the lanes.
#define NIBPAIR(zr, q0, q1) \
	VBROADCASTI32X4 q0(R8), Y28; VBROADCASTI32X4 q1(R8), Y29; VINSERTI64X4 $1, Y29, Z28, Z28 \
	VPSRLVW Z31, Z28, Z28; VPANDD Z30, Z28, zr
// HIGHPAIR(zr, h0, h1): adds 16 to the codes whose bit is set in the two blocks' 32-bit qh (at h0 and h1).
#define HIGHPAIR(zr, h0, h1) \
	KMOVD h0(R8), K2; KMOVD h1(R8), K3; KUNPCKDQ K2, K3, K2; VPADDB Z26, zr, K2, zr
// Q4_0ROW, Q5_0ROW, Q4_1ROW, Q5_1ROW (zr): row (R8)'s codes of a pair of blocks (18, 22, 20 and 24 bytes), w + 128
// for Q4_0 and Q5_0 (Z27: 0x78 or 0x70 bytes), as they are for Q4_1 and Q5_1; then R8 moves to the next row.
#define Q4_0ROW(zr) NIBPAIR(zr, 2, 20); VPADDB Z27, zr, zr; ADDQ R9, R8
#define Q5_0ROW(zr) NIBPAIR(zr, 6, 28); HIGHPAIR(zr, 2, 24); VPADDB Z27, zr, zr; ADDQ R9, R8
#define Q4_1ROW(zr) NIBPAIR(zr, 4, 24); ADDQ R9, R8
#define Q5_1ROW(zr) NIBPAIR(zr, 8, 32); HIGHPAIR(zr, 4, 28); ADDQ R9, R8

// CODES32(ROW, pairBytes): the body of codes16Q4_0AVX512 and its kin: CX pairs of blocks (pairBytes bytes per row),
// each as the panel's 1 KiB. Z27: BX's four bytes (the offset Q4_0ROW and Q5_0ROW add).
#define CODES32(ROW, pairBytes) \
	MOVQ src+0(FP), SI; MOVQ stride+8(FP), R9; MOVQ dst+16(FP), DI; MOVQ pairs+24(FP), CX \
	MOVL $0xf0f0, AX; KMOVW AX, K1 \
c32pair: \
	MOVQ SI, R8 \
	VPBROADCASTD tilednib<>(SB), Z30 \
	VPXORD Z31, Z31, Z31 \
	VPBROADCASTD tiledsh4<>(SB), K1, Z31 \
	VPBROADCASTD tiled10<>(SB), Z26 \
	VPBROADCASTD BX, Z27 \
	ROWS16(ROW) \
	TRANSPOSE16 \
	STORE16(0) \
	ADDQ $pairBytes, SI \
	ADDQ $1024, DI \
	DECQ CX \
	JNZ  c32pair \
	VZEROUPPER \
	RET

// The scale unpackers of 16 rows (tiled.go, scales16): a block's field of the 16 rows is gathered into the dword
// lanes (row r's block at SI + r·stride), which is the panel's meta layout, so each meta field is one store.

// GATHER(off, z): the dwords at off of the 16 rows' blocks into z (Z20: the rows' offsets).
#define GATHER(off, z) KXNORW K1, K1, K1; VPGATHERDD off(SI)(Z20*1), K1, z
// SCALESENTRY: the arguments of a scale unpacker into SI, DI, CX (blocks) and DX (bytes per block), Z20 = r·stride
// in lane r; for TRANS4 (transpose_amd64.h) R9 the stride, R11 3·stride, R10, R8, R12 rows 3, 8 and 11 (ROWSNEXT
// moves them on).
#define SCALESENTRY \
	MOVQ src+0(FP), SI; MOVQ stride+8(FP), AX; MOVQ dst+16(FP), DI; MOVQ nb+24(FP), CX; MOVQ blockBytes+32(FP), DX \
	VPBROADCASTD AX, Z20; VPMULLD tiledrows<>(SB), Z20, Z20 \
	MOVQ AX, R9; LEAQ (R9)(R9*2), R11; LEAQ (SI)(R11*1), R10; LEAQ (SI)(R9*8), R8; LEAQ (R8)(R11*1), R12
#define ROWSNEXT ADDQ DX, SI; ADDQ DX, R10; ADDQ DX, R8; ADDQ DX, R12


// Q3ROW(zr, q), Q2ROW(zr, q): row (R8)'s 64 codes of a Q3_K or Q2_K chunk: its qs bytes q..q+31 (in both halves)
// >> Z31's word shifts (q6shifts) & 3, and for Q3_K the hmask bit (bytes 0..31, rotated to bit 2 by Z25's dword
// counts, q3rot) kept by Z26 (0x04 bytes). Z27: 0x03 bytes.
#define Q2ROW(zr, q) VBROADCASTI64X4 q(R8), Z28; VPSRLVW Z31, Z28, Z28; VPANDD Z27, Z28, zr; ADDQ R9, R8
#define Q3ROW(zr, q) \
	VBROADCASTI64X4 q(R8), Z28; VPSRLVW Z31, Z28, Z28; VPANDD Z27, Z28, zr \
	VBROADCASTI64X4 0(R8), Z29; VPROLVD Z25, Z29, Z29; VPTERNLOGD $0xF8, Z26, Z29, zr; ADDQ R9, R8

// Q23CHUNK(ROW, q, shifts, rot, off): the 16 rows' codes of one Q3_K or Q2_K chunk (qs bytes q..q+31, the word
// shifts at q6shifts+shifts, the hmask rotations at q3rot+rot) stored at off(DI). K1: the high eight dwords.
#define Q23CHUNK(ROW, q, shifts, rot, off) \
	MOVQ SI, R8 \
	VMOVDQU64 q6shifts<>+shifts(SB), Z31 \
	VPBROADCASTD tiledthree<>(SB), Z27 \
	VPBROADCASTD tiled04<>(SB), Z26 \
	VPBROADCASTD q3rot<>+rot(SB), Z25 \
	VPBROADCASTD q3rot<>+4+rot(SB), K1, Z25 \
	ROWS16X(ROW, q) \
	TRANSPOSE16 \
	STORE16(off)

// Q3SCALES(z, off): the four bytes of z (6-bit scales 4j..4j+3, unsigned) minus 32 to off(DI)..off+192(DI), and 4
// times them into Z8..Z11 (Z23: 32).
#define Q3SCALES(z, off) \
	VPSLLD $24, z, Z8; VPSRLD $24, Z8, Z8; VPSUBD Z23, Z8, Z8; VMOVDQU32 Z8, off(DI); VPSLLD $2, Z8, Z8 \
	VPSLLD $16, z, Z9; VPSRLD $24, Z9, Z9; VPSUBD Z23, Z9, Z9; VMOVDQU32 Z9, 64+off(DI); VPSLLD $2, Z9, Z9 \
	VPSLLD $8, z, Z10; VPSRLD $24, Z10, Z10; VPSUBD Z23, Z10, Z10; VMOVDQU32 Z10, 128+off(DI); VPSLLD $2, Z10, Z10 \
	VPSRLD $24, z, Z11; VPSUBD Z23, Z11, Z11; VMOVDQU32 Z11, 192+off(DI); VPSLLD $2, Z11, Z11
// Q3PACK(lo, sh, z): z = (lo & 0x0f bytes) | ((Z2 >> sh) & 0x03 bytes) << 4: four of Q3_K's 6-bit scales (Z21: 0x0f
// bytes, Z22: 0x03 bytes, Z2: the scale bytes 8..11).
#define Q3PACK(lo, sh, z) VPANDD Z21, lo, z; VPSRLD $sh, Z2, Z19; VPANDD Z22, Z19, Z19; VPSLLD $4, Z19, Z19; VPORD Z19, z, z

// Q2SCALES(z, off): the four bytes of z (scale | minimum << 4 of sub-blocks 4j..4j+3): the scales to
// off(DI)..off+192(DI), the minimums into Z8..Z11 (Z21: 0x0f).
#define Q2SCALE(z, sh, off, zm) VPSRLD $sh, z, Z19; VPANDD Z21, Z19, Z18; VMOVDQU32 Z18, off(DI); VPSRLD $4, Z19, Z19; VPANDD Z21, Z19, zm
#define Q2SCALES(z, off) \
	Q2SCALE(z, 0, off, Z8); Q2SCALE(z, 8, 64+off, Z9); Q2SCALE(z, 16, 128+off, Z10); Q2SCALE(z, 24, 192+off, Z11)

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
	CODES16ENTRY
	Q4CHUNK(Q4ROWLO, 0, 0)
	Q4CHUNK(Q4ROWHI, 0, 1024)
	Q4CHUNK(Q4ROWLO, 64, 2048)
	Q4CHUNK(Q4ROWHI, 64, 3072)
	VZEROUPPER
	RET

// func codes16Q6_KAVX512(src *byte, stride int, dst *byte)
// One super-block of 16 Q6_K rows as the panel's 4096 bytes of codes at dst (codes16Q4_KAVX512's arguments).
TEXT ·codes16Q6_KAVX512(SB), NOSPLIT, $0-24
	CODES16ENTRY
	Q6CHUNK(Q6ROWLO, 0, 0, 0, 0)
	Q6CHUNK(Q6ROWHI, 0, 0, 64, 1024)
	Q6CHUNK(Q6ROWLO, 64, 32, 0, 2048)
	Q6CHUNK(Q6ROWHI, 64, 32, 64, 3072)
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
	ROWS16(Q8ROW)
	TRANSPOSE16
	STORE16(0)
	ADDQ $68, SI
	ADDQ $1024, DI
	DECQ CX
	JNZ  q8pair
	VZEROUPPER
	RET

// func codes16Q5_KAVX512(src *byte, stride int, dst *byte)
// One super-block of 16 Q5_K rows as the panel's 4096 bytes of codes at dst (codes16Q4_KAVX512's arguments).
TEXT ·codes16Q5_KAVX512(SB), NOSPLIT, $0-24
	CODES16ENTRY
	MOVL $0xff00, AX
	KMOVW AX, K1
	Q5CHUNK(0, Q5ROWLO, 0, 0)
	Q5CHUNK(0, Q5ROWHI, 8, 1024)
	Q5CHUNK(64, Q5ROWLO, 16, 2048)
	Q5CHUNK(64, Q5ROWHI, 24, 3072)
	VZEROUPPER
	RET

// func codes16Q4_0AVX512(src *byte, stride int, dst *byte, pairs int)
// pairs pairs of Q4_0 blocks of 16 rows as the panel's 1 KiB of codes per pair at dst (codes16Q8_0AVX512's
// arguments); codes16Q5_0AVX512, codes16Q4_1AVX512 and codes16Q5_1AVX512 the same for their types.
TEXT ·codes16Q4_0AVX512(SB), NOSPLIT, $0-32
	MOVL $0x78787878, BX // nibble − 8 + 128
	CODES32(Q4_0ROW, 36)

TEXT ·codes16Q5_0AVX512(SB), NOSPLIT, $0-32
	MOVL $0x70707070, BX // value − 16 + 128
	CODES32(Q5_0ROW, 44)

TEXT ·codes16Q4_1AVX512(SB), NOSPLIT, $0-32
	XORL BX, BX
	CODES32(Q4_1ROW, 40)

TEXT ·codes16Q5_1AVX512(SB), NOSPLIT, $0-32
	XORL BX, BX
	CODES32(Q5_1ROW, 48)

// func scales16K4AVX512(src *byte, stride int, dst *byte, nb, blockBytes int)
// The meta of nb super-blocks of 16 Q4_K or Q5_K rows, as unpackK4Scales writes it: 8 scales, 4 pairs of
// minimums, d, dm (896 bytes each).
TEXT ·scales16K4AVX512(SB), NOSPLIT, $0-40
	SCALESENTRY
	K4CONSTS

k4block:
	// Z0: d, dmin; Z1: q[0..3] (scales 0-3, the high bits of scales 4-7); Z2: q[4..7] (minimums 0-3, the high bits
	// of minimums 4-7); Z3: q[8..11] (the low bits of scales and minimums 4-7).
	K4META(DI)
	ROWSNEXT
	ADDQ $896, DI
	DECQ CX
	JNZ  k4block
	VZEROUPPER
	RET

// func scales16Q6_KAVX512(src *byte, stride int, dst *byte, nb, blockBytes int)
// The meta of nb super-blocks of 16 Q6_K rows, as unpackQ6_KScales writes it: 16 scales, 8 pairs of minimum
// factors (32 times the scales), d twice (1664 bytes each).
TEXT ·scales16Q6_KAVX512(SB), NOSPLIT, $0-40
	SCALESENTRY
	VPBROADCASTD tiledffff<>(SB), Z24

q6block:
	Q6META(DI)
	ROWSNEXT
	ADDQ $1664, DI
	DECQ CX
	JNZ  q6block
	VZEROUPPER
	RET

// func scales16HalfAVX512(src *byte, stride int, dst *byte, nb, blockBytes int, withMin bool)
// The meta of nb 32-element blocks of 16 rows: d, the float16 at the block's start (64 bytes each); withMin, the
// minimum m after it too (Q4_1, Q5_1: 128 bytes each).
TEXT ·scales16HalfAVX512(SB), NOSPLIT, $0-41
	SCALESENTRY
	MOVBQZX withMin+40(FP), BX
	TESTQ BX, BX
	JNZ  halfmin

half:
	GATHER(0, Z0)
	HALVES(Z0, Z1, Z2)
	VMOVUPS Z1, 0(DI)
	ADDQ DX, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  half
	VZEROUPPER
	RET

halfmin:
	GATHER(0, Z0)
	HALVES(Z0, Z1, Z2)
	VMOVUPS Z1, 0(DI)
	VMOVUPS Z2, 64(DI)
	ADDQ DX, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  halfmin
	VZEROUPPER
	RET

// func codes16Q3_KAVX512(src *byte, stride int, dst *byte)
// One super-block of 16 Q3_K rows as the panel's 4096 bytes of codes at dst (codes16Q4_KAVX512's arguments).
TEXT ·codes16Q3_KAVX512(SB), NOSPLIT, $0-24
	CODES16ENTRY
	MOVL $0xff00, AX
	KMOVW AX, K1
	Q23CHUNK(Q3ROW, 32, 0, 0, 0)
	Q23CHUNK(Q3ROW, 32, 64, 8, 1024)
	Q23CHUNK(Q3ROW, 64, 0, 16, 2048)
	Q23CHUNK(Q3ROW, 64, 64, 24, 3072)
	VZEROUPPER
	RET

// func codes16Q2_KAVX512(src *byte, stride int, dst *byte)
// One super-block of 16 Q2_K rows as the panel's 4096 bytes of codes at dst (codes16Q4_KAVX512's arguments).
TEXT ·codes16Q2_KAVX512(SB), NOSPLIT, $0-24
	CODES16ENTRY
	MOVL $0xff00, AX
	KMOVW AX, K1
	Q23CHUNK(Q2ROW, 16, 0, 0, 0)
	Q23CHUNK(Q2ROW, 16, 64, 8, 1024)
	Q23CHUNK(Q2ROW, 48, 0, 16, 2048)
	Q23CHUNK(Q2ROW, 48, 64, 24, 3072)
	VZEROUPPER
	RET

// func scales16Q3_KAVX512(src *byte, stride int, dst *byte, nb, blockBytes int)
// The meta of nb super-blocks of 16 Q3_K rows, as unpackQ3_KTiled writes it: 16 scales, 8 pairs of minimum
// factors (4 times the scales), d twice (1664 bytes each).
TEXT ·scales16Q3_KAVX512(SB), NOSPLIT, $0-40
	SCALESENTRY
	VPBROADCASTD tilednib<>(SB), Z21
	VPBROADCASTD tiledthree<>(SB), Z22
	VPBROADCASTD tiled20<>(SB), Z23
	VPBROADCASTD tiledffff<>(SB), Z24

q3block:
	GATHER(96, Z0)  // scale bytes 0..3: the low four bits of scales 0-3 and (high nibbles) 8-11
	GATHER(100, Z1) // bytes 4..7: of scales 4-7 and 12-15
	GATHER(104, Z2) // bytes 8..11: the high two bits of all
	GATHER(106, Z3) // d in the high halves
	Q3PACK(Z0, 0, Z4)
	Q3PACK(Z1, 2, Z5)
	VPSRLD $4, Z0, Z0
	Q3PACK(Z0, 4, Z6)
	VPSRLD $4, Z1, Z1
	Q3PACK(Z1, 6, Z7)
	Q3SCALES(Z4, 0)
	Q6PAIRS(1024, DI)
	Q3SCALES(Z5, 256)
	Q6PAIRS(1152, DI)
	Q3SCALES(Z6, 512)
	Q6PAIRS(1280, DI)
	Q3SCALES(Z7, 768)
	Q6PAIRS(1408, DI)
	HALVES(Z3, Z5, Z6)
	VMOVUPS Z6, 1536(DI)
	VMOVUPS Z6, 1600(DI)
	ADDQ DX, SI
	ADDQ $1664, DI
	DECQ CX
	JNZ  q3block
	VZEROUPPER
	RET

// func scales16Q2_KAVX512(src *byte, stride int, dst *byte, nb, blockBytes int)
// The meta of nb super-blocks of 16 Q2_K rows, as unpackQ2_KTiled writes it: 16 4-bit scales, 8 pairs of 4-bit
// minimums, d, dm (1664 bytes each).
TEXT ·scales16Q2_KAVX512(SB), NOSPLIT, $0-40
	SCALESENTRY
	VPBROADCASTD tiled0f<>(SB), Z21
	VPBROADCASTD tiledffff<>(SB), Z24

q2block:
	GATHER(0, Z0)
	GATHER(4, Z1)
	GATHER(8, Z2)
	GATHER(12, Z3)
	GATHER(80, Z4) // d, dmin
	Q2SCALES(Z0, 0)
	Q6PAIRS(1024, DI)
	Q2SCALES(Z1, 256)
	Q6PAIRS(1152, DI)
	Q2SCALES(Z2, 512)
	Q6PAIRS(1280, DI)
	Q2SCALES(Z3, 768)
	Q6PAIRS(1408, DI)
	HALVES(Z4, Z5, Z6)
	VMOVUPS Z5, 1536(DI)
	VMOVUPS Z6, 1600(DI)
	ADDQ DX, SI
	ADDQ $1664, DI
	DECQ CX
	JNZ  q2block
	VZEROUPPER
	RET
