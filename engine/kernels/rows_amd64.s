#include "textflag.h"

// The rows kernels (rows.go): one weight row's super-block decoded into registers, multiplied with four input
// rows at a time, in the tiled kernels' float order. Registers: Z0-Z3 the super-block's codes (64 bytes each),
// Z4, Z5 the sub-block scales of the words ROW packs (IQ4_XS: Z4-Z7, of each int32 lane), X8 d (four lanes), X9-X13, X22, X23, X28
// the minimum factors' int16 pairs, each in every lane (Q4_K: X9 dmin, X10-X13), Z16-Z19 the four rows' sums,
// Z20, Z21 scratch, Z24, Z25 the scales' word indexes (IQ4_XS: Z24-Z27), Z30 0x30 bytes, Z31 0x0f bytes, K1 the high 16 words.
// SI: the super-block; DX: the inputs' super-block (row 0); R8: the quad's row 0, R9 the rows' stride, R10 three
// times it; R11: the quad's input parts; R14: the quad's four sums in acc.

// rowsq4pk, rowsq6pk: per 128 codes (two registers of codes packed by ROW's VPACKSSDW: in each 128-bit lane four
// words of the first register's int32 lanes, then four of the second's), the word index of each word's scale.
DATA rowsq4pk<>+0(SB)/8, $0x0000000000000000
DATA rowsq4pk<>+8(SB)/8, $0x0002000200020002
DATA rowsq4pk<>+16(SB)/8, $0x0000000000000000
DATA rowsq4pk<>+24(SB)/8, $0x0002000200020002
DATA rowsq4pk<>+32(SB)/8, $0x0001000100010001
DATA rowsq4pk<>+40(SB)/8, $0x0003000300030003
DATA rowsq4pk<>+48(SB)/8, $0x0001000100010001
DATA rowsq4pk<>+56(SB)/8, $0x0003000300030003
DATA rowsq4pk<>+64(SB)/8, $0x0004000400040004
DATA rowsq4pk<>+72(SB)/8, $0x0006000600060006
DATA rowsq4pk<>+80(SB)/8, $0x0004000400040004
DATA rowsq4pk<>+88(SB)/8, $0x0006000600060006
DATA rowsq4pk<>+96(SB)/8, $0x0005000500050005
DATA rowsq4pk<>+104(SB)/8, $0x0007000700070007
DATA rowsq4pk<>+112(SB)/8, $0x0005000500050005
DATA rowsq4pk<>+120(SB)/8, $0x0007000700070007
GLOBL rowsq4pk<>(SB), RODATA|NOPTR, $128

DATA rowsq6pk<>+0(SB)/8, $0x0000000000000000
DATA rowsq6pk<>+8(SB)/8, $0x0004000400040004
DATA rowsq6pk<>+16(SB)/8, $0x0001000100010001
DATA rowsq6pk<>+24(SB)/8, $0x0005000500050005
DATA rowsq6pk<>+32(SB)/8, $0x0002000200020002
DATA rowsq6pk<>+40(SB)/8, $0x0006000600060006
DATA rowsq6pk<>+48(SB)/8, $0x0003000300030003
DATA rowsq6pk<>+56(SB)/8, $0x0007000700070007
DATA rowsq6pk<>+64(SB)/8, $0x0008000800080008
DATA rowsq6pk<>+72(SB)/8, $0x000c000c000c000c
DATA rowsq6pk<>+80(SB)/8, $0x0009000900090009
DATA rowsq6pk<>+88(SB)/8, $0x000d000d000d000d
DATA rowsq6pk<>+96(SB)/8, $0x000a000a000a000a
DATA rowsq6pk<>+104(SB)/8, $0x000e000e000e000e
DATA rowsq6pk<>+112(SB)/8, $0x000b000b000b000b
DATA rowsq6pk<>+120(SB)/8, $0x000f000f000f000f
GLOBL rowsq6pk<>(SB), RODATA|NOPTR, $128

// ROWD(acc, m0, m1, m2, m3): ROW for codes up to 255 (IQ4_XS's grid values + 128), whose pairs of products could
// saturate VPMADDUBSW: per 64 codes a VPDPBUSD of their own, times the lanes' sub-block scales (Z4-Z7, int32) by
// VPMULLD.
#define ROWD(acc, m0, m1, m2, m3) \
	VPXORD acc, acc, acc; VPDPBUSD m0, Z0, acc; VPMULLD Z4, acc, acc \
	VPXORD Z20, Z20, Z20; VPDPBUSD m1, Z1, Z20; VPMULLD Z5, Z20, Z20; VPADDD Z20, acc, acc \
	VPXORD Z21, Z21, Z21; VPDPBUSD m2, Z2, Z21; VPMULLD Z6, Z21, Z21; VPADDD Z21, acc, acc \
	VPXORD Z20, Z20, Z20; VPDPBUSD m3, Z3, Z20; VPMULLD Z7, Z20, Z20; VPADDD Z20, acc, acc

// ROW(acc, m0, m1, m2, m3): acc = Σ over the four registers of codes (Z0-Z3) of scale·(code·x), x the row's
// 256 values at m0..m3: per 64 codes VPDPBUSD sums fours of code·x in int32 lanes (at most 4·63·128 = 32256, an
// int16), VPACKSSDW packs two registers' lanes into int16 words (exact), and VPDPWSSD multiplies each word by its
// sub-block's scale (Z4: codes 0-127, Z5: 128-255, as the pack lays them out) and adds the pairs: three
// multiplications per 128 codes instead of four.
#define ROW(acc, m0, m1, m2, m3) \
	VPXORD Z20, Z20, Z20; VPDPBUSD m0, Z0, Z20; VPXORD Z21, Z21, Z21; VPDPBUSD m1, Z1, Z21 \
	VPACKSSDW Z21, Z20, Z20; VPMADDWD Z4, Z20, acc \
	VPXORD Z20, Z20, Z20; VPDPBUSD m2, Z2, Z20; VPXORD Z21, Z21, Z21; VPDPBUSD m3, Z3, Z21 \
	VPACKSSDW Z21, Z20, Z20; VPDPWSSD Z5, Z20, acc

// QUAD: the four rows from R8 (stride R9) into Z16-Z19, folded into X16 = the four rows' isb; QUADR(R) the same
// with the row macro R (ROW, or ROWD).
#define QUAD QUADR(ROW)
#define QUADR(R) \
	R(Z16, 0(R8), 64(R8), 128(R8), 192(R8)) \
	R(Z17, 0(R8)(R9*1), 64(R8)(R9*1), 128(R8)(R9*1), 192(R8)(R9*1)) \
	R(Z18, 0(R8)(R9*2), 64(R8)(R9*2), 128(R8)(R9*2), 192(R8)(R9*2)) \
	R(Z19, 0(R8)(R10*1), 64(R8)(R10*1), 128(R8)(R10*1), 192(R8)(R10*1)) \
	VPUNPCKLDQ Z17, Z16, Z20; VPUNPCKHDQ Z17, Z16, Z16; VPADDD Z20, Z16, Z16 \
	VPUNPCKLDQ Z19, Z18, Z20; VPUNPCKHDQ Z19, Z18, Z18; VPADDD Z20, Z18, Z18 \
	VPUNPCKLQDQ Z18, Z16, Z20; VPUNPCKHQDQ Z18, Z16, Z16; VPADDD Z20, Z16, Z16 \
	VEXTRACTI64X4 $1, Z16, Y20; VPADDD Y20, Y16, Y16 \
	VEXTRACTI32X4 $1, Y16, X20; VPADDD X20, X16, X16

// UPDATE(dm, dx): the tiled float update of the quad's four sums (X16) and minimum sums (X21): acc (R14) +=
// ((float(isb)·d) − (float(imin)·dm))·dx, dx at dx(R11); no fused operation.
#define UPDATE(dm, dx) \
	VCVTDQ2PS X16, X16; VMULPS X8, X16, X16 \
	VCVTDQ2PS X21, X21; VMULPS dm, X21, X21 \
	VSUBPS X21, X16, X16; VMULPS dx(R11), X16, X16 \
	VADDPS (R14), X16, X16; VMOVUPS X16, (R14)

// OCT: eight rows, R8 (stride R9) and DI (R8 + 4·R9), into Z16-Z19, Z6, Z7, Z26, Z27 (free in the K-quant
// kernels: ROW's scales are Z4, Z5), folded into Y16 = the eight rows' isb; OCTMIN4: Y21 = their imin (Q4_K's
// pairs of sums of 32, [4][8]int32 at R11), OCTMIN8 Q6_K's (of 16, [8][8]int32); UPDATE8(dm, dx): UPDATE's float update on eight lanes.
#define OCT \
	LEAQ (R8)(R9*4), DI \
	ROW(Z16, 0(R8), 64(R8), 128(R8), 192(R8)) \
	ROW(Z17, 0(R8)(R9*1), 64(R8)(R9*1), 128(R8)(R9*1), 192(R8)(R9*1)) \
	ROW(Z18, 0(R8)(R9*2), 64(R8)(R9*2), 128(R8)(R9*2), 192(R8)(R9*2)) \
	ROW(Z19, 0(R8)(R10*1), 64(R8)(R10*1), 128(R8)(R10*1), 192(R8)(R10*1)) \
	ROW(Z6, 0(DI), 64(DI), 128(DI), 192(DI)) \
	ROW(Z7, 0(DI)(R9*1), 64(DI)(R9*1), 128(DI)(R9*1), 192(DI)(R9*1)) \
	ROW(Z26, 0(DI)(R9*2), 64(DI)(R9*2), 128(DI)(R9*2), 192(DI)(R9*2)) \
	ROW(Z27, 0(DI)(R10*1), 64(DI)(R10*1), 128(DI)(R10*1), 192(DI)(R10*1)) \
	VPUNPCKLDQ Z17, Z16, Z20; VPUNPCKHDQ Z17, Z16, Z16; VPADDD Z20, Z16, Z16 \
	VPUNPCKLDQ Z19, Z18, Z20; VPUNPCKHDQ Z19, Z18, Z18; VPADDD Z20, Z18, Z18 \
	VPUNPCKLQDQ Z18, Z16, Z20; VPUNPCKHQDQ Z18, Z16, Z16; VPADDD Z20, Z16, Z16 \
	VPUNPCKLDQ Z7, Z6, Z20; VPUNPCKHDQ Z7, Z6, Z6; VPADDD Z20, Z6, Z6 \
	VPUNPCKLDQ Z27, Z26, Z20; VPUNPCKHDQ Z27, Z26, Z26; VPADDD Z20, Z26, Z26 \
	VPUNPCKLQDQ Z26, Z6, Z20; VPUNPCKHQDQ Z26, Z6, Z6; VPADDD Z20, Z6, Z6 \
	VSHUFI64X2 $0x44, Z6, Z16, Z20; VSHUFI64X2 $0xee, Z6, Z16, Z16; VPADDD Z20, Z16, Z16 \
	VSHUFI64X2 $0x08, Z16, Z16, Z20; VSHUFI64X2 $0x0d, Z16, Z16, Z16; VPADDD Y20, Y16, Y16
#define OCTMIN4 \
	VPMADDWD 0(R11), Y10, Y21; VPDPWSSD 32(R11), Y11, Y21; VPDPWSSD 64(R11), Y12, Y21; VPDPWSSD 96(R11), Y13, Y21
#define OCTMIN8 \
	VPMADDWD 0(R11), Y9, Y21; VPDPWSSD 32(R11), Y10, Y21; VPDPWSSD 64(R11), Y11, Y21; VPDPWSSD 96(R11), Y12, Y21 \
	VPDPWSSD 128(R11), Y13, Y21; VPDPWSSD 160(R11), Y22, Y21; VPDPWSSD 192(R11), Y23, Y21; VPDPWSSD 224(R11), Y28, Y21
#define UPDATE8(dm, dx) \
	VCVTDQ2PS Y16, Y16; VMULPS Y8, Y16, Y16 \
	VCVTDQ2PS Y21, Y21; VMULPS dm, Y21, Y21 \
	VSUBPS Y21, Y16, Y16; VMULPS dx(R11), Y16, Y16 \
	VADDPS (R14), Y16, Y16; VMOVUPS Y16, (R14)

// Q4CODES(off, z): 32 bytes of Q4_K nibbles at off(SI) as 64 codes: the low nibbles, then the high ones.
#define Q4CODES(off, z) VBROADCASTI64X4 off(SI), z; VPSRLW $4, z, K1, z; VPANDD Z31, z, z

// Q4_K's 12 bytes s of 6-bit scales and minimums, unpacked as ggml's get_scale_min_k4 reads them: scale j < 4 is
// s[j] & 63, minimum j < 4 s[j+4] & 63; for j ≥ 4 the scale is s[j+4] & 15 | (s[j-4] >> 6) << 4 and the minimum
// s[j+4] >> 4 | (s[j] >> 6) << 4. rowsq4p gathers [s0-3, s8-11, s4-7, s8-11], rowsq4q [0, s0-3, 0, s4-7] (for the
// high bits), rowsq4m1 and rowsq4m2 mask the low parts.
DATA rowsq4p<>+0(SB)/8, $0x0b0a090803020100
DATA rowsq4p<>+8(SB)/8, $0x0b0a090807060504
GLOBL rowsq4p<>(SB), RODATA|NOPTR, $16
DATA rowsq4q<>+0(SB)/8, $0x0302010080808080
DATA rowsq4q<>+8(SB)/8, $0x0706050480808080
GLOBL rowsq4q<>(SB), RODATA|NOPTR, $16
DATA rowsq4m1<>+0(SB)/8, $0x0f0f0f0f3f3f3f3f
DATA rowsq4m1<>+8(SB)/8, $0x000000003f3f3f3f
GLOBL rowsq4m1<>(SB), RODATA|NOPTR, $16
DATA rowsq4m2<>+0(SB)/8, $0x0000000000000000
DATA rowsq4m2<>+8(SB)/8, $0x0f0f0f0f00000000
GLOBL rowsq4m2<>(SB), RODATA|NOPTR, $16

// Q4SCALES: a Q4_K or Q5_K super-block's (SI) scales into Z4, Z5, Y8 (d), Y9 (dmin), Y15 (the minimums, eight
// words, in both halves), the bytes [scales 0-7, minimums 0-7] as (P & m1) | ((P >> 4) & m2) | ((Q >> 2) & 0x30) with P, Q the
// gathers above (Z30: 0x30 bytes); Q4SPLAT: Y15's pairs into Y10-Y13; Q4CODES4: a Q4_K super-block's codes into
// Z0-Z3.
#define Q4SCALES \
	VPBROADCASTW 0(SI), X8; VCVTPH2PS X8, Y8; VPBROADCASTW 2(SI), X9; VCVTPH2PS X9, Y9 \
	VMOVDQU 4(SI), X14; VPSHUFB rowsq4p<>(SB), X14, X20; VPSHUFB rowsq4q<>(SB), X14, X21 \
	VPSRLW $2, X21, X21; VPANDD X30, X21, X21; VPSRLW $4, X20, X14; VPANDD rowsq4m2<>(SB), X14, X14 \
	VPANDD rowsq4m1<>(SB), X20, X20; VPTERNLOGD $0xFE, X21, X14, X20; VPMOVZXBW X20, Y14 \
	VPERMW Z14, Z24, Z4; VPERMW Z14, Z25, Z5 \
	VPERMQ $0xee, Y14, Y15
#define Q4SPLAT VPSHUFD $0x00, Y15, Y10; VPSHUFD $0x55, Y15, Y11; VPSHUFD $0xaa, Y15, Y12; VPSHUFD $0xff, Y15, Y13
#define Q4CODES4 Q4CODES(16, Z0); Q4CODES(48, Z1); Q4CODES(80, Z2); Q4CODES(112, Z3)

// Q5CODES(off, z): Q4CODES with the qh bits (Z20: qh shifted so that bit 2g of each byte is at bit 4) as bit 4,
// bit 2g of the low nibbles' codes and 2g+1 of the high ones' (Z29: 0x10 bytes).
#define Q5CODES(off, z) Q4CODES(off, z); VPSRLW $1, Z20, K1, Z20; VPTERNLOGD $0xF8, Z29, Z20, z

// Q5DECODE: a Q5_K super-block (SI) into Z0-Z7, X8-X13 as Q4DECODE; Q5CODES4 its codes alone (Z14: the qh bytes).
#define Q5DECODE Q4SCALES; Q4SPLAT; Q5CODES4
#define Q5CODES4 \
	VBROADCASTI64X4 16(SI), Z14 \
	VPSLLW $4, Z14, Z20; Q5CODES(48, Z0) \
	VPSLLW $2, Z14, Z20; Q5CODES(80, Z1) \
	VMOVDQU64 Z14, Z20; Q5CODES(112, Z2) \
	VPSRLW $2, Z14, Z20; Q5CODES(144, Z3)

// IQ4_XS: a super-block of 8 sub-blocks of 32, codes IQ4Values + 128 (Z28: that table, as VPSHUFB looks it up),
// signed 6-bit scales ls − 32 (ls: a nibble of scales_l and two bits of scales_h, spread into bytes by PDEP) and
// 128 times them as minimum factors, dm = d. rowsxsidx: per 64 codes, the dword index of each lane's scale.
DATA rowsxsidx<>+0(SB)/4, $0
DATA rowsxsidx<>+4(SB)/4, $0
DATA rowsxsidx<>+8(SB)/4, $0
DATA rowsxsidx<>+12(SB)/4, $0
DATA rowsxsidx<>+16(SB)/4, $0
DATA rowsxsidx<>+20(SB)/4, $0
DATA rowsxsidx<>+24(SB)/4, $0
DATA rowsxsidx<>+28(SB)/4, $0
DATA rowsxsidx<>+32(SB)/4, $1
DATA rowsxsidx<>+36(SB)/4, $1
DATA rowsxsidx<>+40(SB)/4, $1
DATA rowsxsidx<>+44(SB)/4, $1
DATA rowsxsidx<>+48(SB)/4, $1
DATA rowsxsidx<>+52(SB)/4, $1
DATA rowsxsidx<>+56(SB)/4, $1
DATA rowsxsidx<>+60(SB)/4, $1
DATA rowsxsidx<>+64(SB)/4, $2
DATA rowsxsidx<>+68(SB)/4, $2
DATA rowsxsidx<>+72(SB)/4, $2
DATA rowsxsidx<>+76(SB)/4, $2
DATA rowsxsidx<>+80(SB)/4, $2
DATA rowsxsidx<>+84(SB)/4, $2
DATA rowsxsidx<>+88(SB)/4, $2
DATA rowsxsidx<>+92(SB)/4, $2
DATA rowsxsidx<>+96(SB)/4, $3
DATA rowsxsidx<>+100(SB)/4, $3
DATA rowsxsidx<>+104(SB)/4, $3
DATA rowsxsidx<>+108(SB)/4, $3
DATA rowsxsidx<>+112(SB)/4, $3
DATA rowsxsidx<>+116(SB)/4, $3
DATA rowsxsidx<>+120(SB)/4, $3
DATA rowsxsidx<>+124(SB)/4, $3
DATA rowsxsidx<>+128(SB)/4, $4
DATA rowsxsidx<>+132(SB)/4, $4
DATA rowsxsidx<>+136(SB)/4, $4
DATA rowsxsidx<>+140(SB)/4, $4
DATA rowsxsidx<>+144(SB)/4, $4
DATA rowsxsidx<>+148(SB)/4, $4
DATA rowsxsidx<>+152(SB)/4, $4
DATA rowsxsidx<>+156(SB)/4, $4
DATA rowsxsidx<>+160(SB)/4, $5
DATA rowsxsidx<>+164(SB)/4, $5
DATA rowsxsidx<>+168(SB)/4, $5
DATA rowsxsidx<>+172(SB)/4, $5
DATA rowsxsidx<>+176(SB)/4, $5
DATA rowsxsidx<>+180(SB)/4, $5
DATA rowsxsidx<>+184(SB)/4, $5
DATA rowsxsidx<>+188(SB)/4, $5
DATA rowsxsidx<>+192(SB)/4, $6
DATA rowsxsidx<>+196(SB)/4, $6
DATA rowsxsidx<>+200(SB)/4, $6
DATA rowsxsidx<>+204(SB)/4, $6
DATA rowsxsidx<>+208(SB)/4, $6
DATA rowsxsidx<>+212(SB)/4, $6
DATA rowsxsidx<>+216(SB)/4, $6
DATA rowsxsidx<>+220(SB)/4, $6
DATA rowsxsidx<>+224(SB)/4, $7
DATA rowsxsidx<>+228(SB)/4, $7
DATA rowsxsidx<>+232(SB)/4, $7
DATA rowsxsidx<>+236(SB)/4, $7
DATA rowsxsidx<>+240(SB)/4, $7
DATA rowsxsidx<>+244(SB)/4, $7
DATA rowsxsidx<>+248(SB)/4, $7
DATA rowsxsidx<>+252(SB)/4, $7
GLOBL rowsxsidx<>(SB), RODATA|NOPTR, $256

// XSSCALES: an IQ4_XS super-block's (SI) d into X8, its scales as int32 lanes into Z4-Z7, its minimum factors
// (128·sc, eight words) into X15.
#define XSSCALES \
	VPBROADCASTW 0(SI), X8; VCVTPH2PS X8, X8 \
	MOVWLZX 2(SI), AX; MOVL 4(SI), BX; MOVQ $0x0f0f0f0f0f0f0f0f, CX; PDEPQ CX, BX, BX \
	MOVQ $0x3030303030303030, CX; PDEPQ CX, AX, AX; ORQ AX, BX \
	VMOVQ BX, X14; VPSUBB rowsxs32<>(SB), X14, X14; VPMOVSXBW X14, X15; VPSLLW $7, X15, X15; VPMOVSXBD X14, Y14 \
	VPERMD Z14, Z24, Z4; VPERMD Z14, Z25, Z5; VPERMD Z14, Z26, Z6; VPERMD Z14, Z27, Z7

// XSCODES: an IQ4_XS super-block's codes into Z0-Z3: each 32 bytes of nibbles as [low 16, high 16] of two
// sub-blocks, looked up in Z28 (K2: the words of the odd 128-bit lanes).
#define XSCODE(off, z) \
	VMOVDQU32 off(SI), Y21; VSHUFI64X2 $0x50, Z21, Z21, Z21; VPSRLW $4, Z21, K2, Z21; VPANDD Z31, Z21, Z21; VPSHUFB Z21, Z28, z
#define XSCODES XSCODE(8, Z0); XSCODE(40, Z1); XSCODE(72, Z2); XSCODE(104, Z3)
DATA rowsxs32<>+0(SB)/8, $0x2020202020202020
DATA rowsxs32<>+8(SB)/8, $0x2020202020202020
GLOBL rowsxs32<>(SB), RODATA|NOPTR, $16

// Q2_K: 16 sub-blocks of 16, codes 0..3 (qs's bit pairs), scales and minimums the nibbles of 16 bytes, d and dmin.
// Q2SCALES: its d into X8, scales into Z4-Z7 (as Q6_K's), minimums (16 words) into Y15; Q2CODES: its codes into
// Z0-Z3 (64 codes: a 32-byte run of qs in both halves, shifted by 0 and 2 or 4 and 6 bits, & 3) and dmin into
// X14.
DATA rowsw0f<>+0(SB)/4, $0x000f000f
GLOBL rowsw0f<>(SB), RODATA|NOPTR, $4
DATA rowsb03<>+0(SB)/4, $0x03030303
GLOBL rowsb03<>(SB), RODATA|NOPTR, $4
#define Q2SCALES \
	VPBROADCASTW 80(SI), X8; VCVTPH2PS X8, Y8 \
	VPMOVZXBW 0(SI), Y14; VPSRLW $4, Y14, Y15; VPANDD.BCST rowsw0f<>(SB), Y14, Y14 \
	VPERMW Z14, Z24, Z4; VPERMW Z14, Z25, Z5
#define Q2CODES \
	VBROADCASTI64X4 16(SI), Z0; VPSRLW $2, Z0, K1, Z0; VPANDD.BCST rowsb03<>(SB), Z0, Z0 \
	VBROADCASTI64X4 16(SI), Z1; VPSRLW $4, Z1, Z1; VPSRLW $2, Z1, K1, Z1; VPANDD.BCST rowsb03<>(SB), Z1, Z1 \
	VBROADCASTI64X4 48(SI), Z2; VPSRLW $2, Z2, K1, Z2; VPANDD.BCST rowsb03<>(SB), Z2, Z2 \
	VBROADCASTI64X4 48(SI), Z3; VPSRLW $4, Z3, Z3; VPSRLW $2, Z3, K1, Z3; VPANDD.BCST rowsb03<>(SB), Z3, Z3 \
	VPBROADCASTW 82(SI), X14; VCVTPH2PS X14, Y14

// Q3_K: 16 sub-blocks of 16, codes 0..7 (qs's bit pairs as Q2_K's, hmask's bit as bit 2; the −4 goes into the
// minimum factors as 4·sc), 16 signed 6-bit scales unpacked as ggml does (kmask1, kmask2), dm = d. Q3SCALES: its d
// into X8, its scales into Z4-Z7 and 4·sc (16 words) into Y15; Q3CODES: its codes into Z0-Z3 (Z21: hmask in both
// halves, Z20 its bits moved to bit 2: 2g for the low half of group g, 2g+1 for the high one).
DATA rowsb04<>+0(SB)/4, $0x04040404
GLOBL rowsb04<>(SB), RODATA|NOPTR, $4
#define Q3SCALES \
	VPBROADCASTW 108(SI), X8; VCVTPH2PS X8, Y8 \
	MOVL 96(SI), AX; MOVL 100(SI), BX; MOVL 104(SI), CX \
	MOVL AX, DI; SHRL $4, DI; ANDL $0x0f0f0f0f, DI; MOVL CX, R12; SHRL $4, R12; ANDL $0x03030303, R12; SHLL $4, R12; ORL R12, DI \
	ANDL $0x0f0f0f0f, AX; MOVL CX, R12; ANDL $0x03030303, R12; SHLL $4, R12; ORL R12, AX \
	VMOVD AX, X14; VPINSRD $2, DI, X14, X14 \
	MOVL BX, DI; SHRL $4, DI; ANDL $0x0f0f0f0f, DI; MOVL CX, R12; SHRL $6, R12; ANDL $0x03030303, R12; SHLL $4, R12; ORL R12, DI \
	ANDL $0x0f0f0f0f, BX; MOVL CX, R12; SHRL $2, R12; ANDL $0x03030303, R12; SHLL $4, R12; ORL R12, BX \
	VPINSRD $1, BX, X14, X14; VPINSRD $3, DI, X14, X14; VPSUBB rowsxs32<>(SB), X14, X14; VPMOVSXBW X14, Y14 \
	VPERMW Z14, Z24, Z4; VPERMW Z14, Z25, Z5; VPSLLW $2, Y14, Y15
#define Q3HI(z) VPSRLW $1, Z20, K1, Z20; VPTERNLOGD.BCST $0xF8, rowsb04<>(SB), Z20, z
#define Q3CODES \
	VBROADCASTI64X4 32(SI), Z0; VPSRLW $2, Z0, K1, Z0; VPANDD.BCST rowsb03<>(SB), Z0, Z0 \
	VBROADCASTI64X4 32(SI), Z1; VPSRLW $4, Z1, Z1; VPSRLW $2, Z1, K1, Z1; VPANDD.BCST rowsb03<>(SB), Z1, Z1 \
	VBROADCASTI64X4 64(SI), Z2; VPSRLW $2, Z2, K1, Z2; VPANDD.BCST rowsb03<>(SB), Z2, Z2 \
	VBROADCASTI64X4 64(SI), Z3; VPSRLW $4, Z3, Z3; VPSRLW $2, Z3, K1, Z3; VPANDD.BCST rowsb03<>(SB), Z3, Z3 \
	VBROADCASTI64X4 0(SI), Z21 \
	VPSLLW $2, Z21, Z20; Q3HI(Z0); VMOVDQU64 Z21, Z20; Q3HI(Z1); VPSRLW $2, Z21, Z20; Q3HI(Z2); VPSRLW $4, Z21, Z20; Q3HI(Z3)

// Q4MIN: X21 = the quad's imin (pairs of sums of 32 at 0..48(R11)).
#define Q4MIN \
	VPMADDWD 0(R11), X10, X21; VPDPWSSD 16(R11), X11, X21; VPDPWSSD 32(R11), X12, X21; VPDPWSSD 48(R11), X13, X21

// Q6HALF(ql, qh, g0, g1): 128 Q6_K codes (0..63) from ql bytes ql..ql+63 and qh bytes qh..qh+31 of SI: g0 the
// low nibbles with qh's bits 0-1 (then 2-3) as bits 4-5, g1 the high nibbles with bits 4-5 (then 6-7).
#define Q6HALF(ql, qh, g0, g1) \
	VMOVDQU64 ql(SI), Z14; VBROADCASTI64X4 qh(SI), Z21; VPSRLW $2, Z21, K1, Z21 \
	VPSLLW $4, Z21, Z20; VPANDD Z31, Z14, g0; VPTERNLOGD $0xF8, Z30, Z20, g0 \
	VPSRLW $4, Z14, g1; VPANDD Z31, g1, g1; VPTERNLOGD $0xF8, Z30, Z21, g1

// Q6SCALES: a Q6_K super-block's (SI) scales into Z4, Z5, Y8 (d) and Y15 (32 times the signed scales, 16 words:
// the minimum factors of codes 0..63, whose −32 they carry); Q6SPLAT: Y15's pairs into Y9-Y13, Y22, Y23, Y28;
// Q6CODES4: the super-block's codes into Z0-Z3.
#define Q6SCALES \
	VPBROADCASTW 208(SI), X8; VCVTPH2PS X8, Y8 \
	VPMOVSXBW 192(SI), Y14 \
	VPERMW Z14, Z24, Z4; VPERMW Z14, Z25, Z5 \
	VPSLLW $5, Y14, Y15
#define Q6SPLAT \
	VPERMQ $0x44, Y15, Y14 \
	VPSHUFD $0x00, Y14, Y9; VPSHUFD $0x55, Y14, Y10; VPSHUFD $0xaa, Y14, Y11; VPSHUFD $0xff, Y14, Y12 \
	VPERMQ $0xee, Y15, Y14 \
	VPSHUFD $0x00, Y14, Y13; VPSHUFD $0x55, Y14, Y22; VPSHUFD $0xaa, Y14, Y23; VPSHUFD $0xff, Y14, Y28
#define Q6CODES4 Q6HALF(0, 128, Z0, Z1); Q6HALF(64, 160, Z2, Z3)

// Q6MIN: X21 = the quad's imin (pairs of sums of 16 at 0..112(R11)).
#define Q6MIN \
	VPMADDWD 0(R11), X9, X21; VPDPWSSD 16(R11), X10, X21; VPDPWSSD 32(R11), X11, X21; VPDPWSSD 48(R11), X12, X21 \
	VPDPWSSD 64(R11), X13, X21; VPDPWSSD 80(R11), X22, X21; VPDPWSSD 96(R11), X23, X21; VPDPWSSD 112(R11), X28, X21


// The one-row kernels: the same products for a single input row, whose sums a horizontal reduction folds (no
// padding rows), the row's pairs of sums contiguous (rowsInputs.pack with one lane).

// RED1: X16 = the sum of Z16's lanes (in every lane).
#define RED1 \
	VEXTRACTI64X4 $1, Z16, Y20; VPADDD Y20, Y16, Y16; VEXTRACTI32X4 $1, Y16, X20; VPADDD X20, X16, X16 \
	VPSHUFD $0x4e, X16, X20; VPADDD X20, X16, X16; VPSHUFD $0xb1, X16, X20; VPADDD X20, X16, X16

// MIN1Q4, MIN1Q6: X21 = imin, the minimum factors (X15, Y15) times the row's pairs of sums (R11), in every lane.
#define HSUM21 VPSHUFD $0x4e, X21, X20; VPADDD X20, X21, X21; VPSHUFD $0xb1, X21, X20; VPADDD X20, X21, X21
#define MIN1Q4 VPMADDWD 0(R11), X15, X21; HSUM21
#define MIN1Q6 VPMADDWD 0(R11), Y15, Y21; VEXTRACTI32X4 $1, Y21, X20; VPADDD X20, X21, X21; HSUM21

// UPDATE1(dm, dx): lane 0 of X17 += ((float(isb)·d) − (float(imin)·dm))·dx, as UPDATE.
#define UPDATE1(dm, dx) \
	VCVTDQ2PS X16, X16; VMULPS X8, X16, X16 \
	VCVTDQ2PS X21, X21; VMULPS dm, X21, X21 \
	VSUBPS X21, X16, X16; VMULSS dx(R11), X16, X16; VADDSS X16, X17, X17

// The kernels of 32-element blocks (Q8_0, and Q4_0, Q5_0, IQ4_NL as the tiled kernels widen them to Q8_0), two
// blocks a step: Z0 their codes w + 128 (unsigned), X8 and X9 their scales d (four lanes each). Per step and quad,
// a row's 16 int32 lanes are VPDPBUSD sums (lanes 0-7: the first block), folded into the four rows' Σ(w + 128)·x
// per block; less 128·Σx (ameta) that is Σ w·x, exact, and the tiled update per block follows: acc +=
// (float(Σ w·x)·d)·dx, the first block then the second. Constants: Z28 0x80 bytes, Z23 0x0f bytes, Z24 0x10
// bytes, Z25 the type's code offset (Q4_0: 120, Q5_0: 112) or grid values + 128 (IQ4_NL), K2 the words of the
// odd 128-bit lanes.

// Q8CODES: two Q8_0 blocks' codes (SI, 34 bytes each) into Z0.
#define Q8CODES VMOVDQU 2(SI), Y0; VINSERTI64X4 $1, 36(SI), Z0, Z0; VPXORD Z28, Z0, Z0

// NIBBLES(a, b): the 16 nibble bytes of two blocks at a(SI) and b(SI) as Z0's bytes: a's low nibbles, its high
// ones, then b's.
#define NIBBLES(a, b) \
	VMOVDQU a(SI), X0; VINSERTI128 $1, b(SI), Y0, Y0; VSHUFI64X2 $0x50, Z0, Z0, Z0; VPSRLW $4, Z0, K2, Z0; VPANDD Z23, Z0, Z0

// Q40CODES, IQ4NLCODES, Q50CODES: two blocks' codes into Z0 (Q5_0: qh's bits as bit 4, through K3).
#define Q40CODES NIBBLES(2, 20); VPADDB Z25, Z0, Z0
#define IQ4NLCODES NIBBLES(2, 20); VPSHUFB Z0, Z25, Z0
#define Q50CODES \
	NIBBLES(6, 28); MOVL 2(SI), AX; MOVL 24(SI), BX; SHLQ $32, BX; ORQ BX, AX; KMOVQ AX, K3; VPMOVM2B K3, Z21 \
	VPTERNLOGD $0xF8, Z24, Z21, Z0; VPADDB Z25, Z0, Z0

// Q41CODES, Q51CODES: two Q4_1 or Q5_1 blocks' codes into Z0, as they are (no offset: Q8_1's s carries the
// minimum).
#define Q41CODES NIBBLES(4, 24)
#define Q51CODES \
	NIBBLES(8, 32); MOVL 4(SI), AX; MOVL 28(SI), BX; SHLQ $32, BX; ORQ BX, AX; KMOVQ AX, K3; VPMOVM2B K3, Z21 \
	VPTERNLOGD $0xF8, Z24, Z21, Z0

// Q81SCALES(b): Q8SCALES, and the two blocks' minimums m (at 2 and b+2) into X10 and X11.
#define Q81SCALES(b) \
	Q8SCALES(b); VPBROADCASTW 2(SI), X10; VCVTPH2PS X10, X10; VPBROADCASTW b+2(SI), X11; VCVTPH2PS X11, X11

// Q8SCALES(b): the two blocks' d (at 0 and b of SI) into X8 and X9.
#define Q8SCALES(b) VPBROADCASTW 0(SI), X8; VCVTPH2PS X8, X8; VPBROADCASTW b(SI), X9; VCVTPH2PS X9, X9

// Q8QUAD: the four rows from R8 against Z0, folded into X16 (the first block's sums) and X17 (the second's).
#define Q8QUAD \
	VPXORD Z16, Z16, Z16; VPDPBUSD 0(R8), Z0, Z16; VPXORD Z17, Z17, Z17; VPDPBUSD 0(R8)(R9*1), Z0, Z17 \
	VPXORD Z18, Z18, Z18; VPDPBUSD 0(R8)(R9*2), Z0, Z18; VPXORD Z19, Z19, Z19; VPDPBUSD 0(R8)(R10*1), Z0, Z19 \
	VPUNPCKLDQ Z17, Z16, Z20; VPUNPCKHDQ Z17, Z16, Z16; VPADDD Z20, Z16, Z16 \
	VPUNPCKLDQ Z19, Z18, Z20; VPUNPCKHDQ Z19, Z18, Z18; VPADDD Z20, Z18, Z18 \
	VPUNPCKLQDQ Z18, Z16, Z20; VPUNPCKHQDQ Z18, Z16, Z16; VPADDD Z20, Z16, Z16 \
	VEXTRACTI64X4 $1, Z16, Y17; VEXTRACTI32X4 $1, Y16, X20; VPADDD X20, X16, X16 \
	VEXTRACTI32X4 $1, Y17, X20; VPADDD X20, X17, X17

// Q8UPDATE: acc (R14) += (float(sum − 128·Σx)·d)·dx for the first block (X16), then the second (X17).
#define Q8UPDATE \
	VPSUBD 0(R11), X16, X16; VCVTDQ2PS X16, X16; VMULPS X8, X16, X16; VMULPS 32(R11), X16, X16; VADDPS (R14), X16, X16 \
	VPSUBD 16(R11), X17, X17; VCVTDQ2PS X17, X17; VMULPS X9, X17, X17; VMULPS 48(R11), X17, X17; VADDPS X17, X16, X16 \
	VMOVUPS X16, (R14)

// Q81UPDATE: the tiled update of blocks with a minimum, acc (R14) += ((float(sum)·d)·dx) + m·s, for the first
// block (X16), then the second (X17); ameta: the two blocks' s, then their dx.
#define Q81UPDATE \
	VCVTDQ2PS X16, X16; VMULPS X8, X16, X16; VMULPS 32(R11), X16, X16; VMULPS 0(R11), X10, X21; VADDPS X21, X16, X16 \
	VADDPS (R14), X16, X16 \
	VCVTDQ2PS X17, X17; VMULPS X9, X17, X17; VMULPS 48(R11), X17, X17; VMULPS 16(R11), X11, X21; VADDPS X21, X17, X17 \
	VADDPS X17, X16, X16; VMOVUPS X16, (R14)

// Q81ONE(b): one row (R8) against Z0, blocks with a minimum (their d at 0 and b, m at 2 and b+2 of SI; ameta:
// the two s, then the two dx): X17 += ((t0·d0)·dx0 + m0·s0), then the second block's.
#define Q81ONE(b) \
	VPXORD Z10, Z10, Z10; VPDPBUSD (R8), Z0, Z10; VEXTRACTI64X4 $1, Z10, Y11 \
	VPHADDD Y11, Y10, Y12; VPHADDD Y12, Y12, Y12; VEXTRACTI128 $1, Y12, X11; VPADDD X11, X12, X12; VCVTDQ2PS X12, X12 \
	VPBROADCASTW (SI), X8; VPINSRW $1, b(SI), X8, X8; VCVTPH2PS X8, X8; VMULPS X8, X12, X12 \
	VMOVQ 8(R11), X13; VMULPS X13, X12, X12 \
	VPBROADCASTW 2(SI), X14; VPINSRW $1, b+2(SI), X14, X14; VCVTPH2PS X14, X14; VMOVQ (R11), X13; VMULPS X13, X14, X14 \
	VADDPS X14, X12, X12; VADDSS X12, X17, X17; VMOVSHDUP X12, X13; VADDSS X13, X17, X17

// Q8ONE: one row (R8) against Z0: the two blocks' sums, less their 128·Σx, as floats in lanes 0 and 1 of X12
// (ameta R11: the two 128·Σx, then the two dx).
#define Q8ONE \
	VPXORD Z10, Z10, Z10; VPDPBUSD (R8), Z0, Z10; VEXTRACTI64X4 $1, Z10, Y11 \
	VPHADDD Y11, Y10, Y12; VPHADDD Y12, Y12, Y12; VEXTRACTI128 $1, Y12, X11; VPADDD X11, X12, X12 \
	VPSUBD (R11), X12, X12; VCVTDQ2PS X12, X12

// Q8CONSTS: the constants of the kernels of 32-element blocks (K2's words, Z23-Z25, Z28).
#define Q8CONSTS \
	MOVL $0x80808080, AX; VPBROADCASTD AX, Z28; MOVL $0x0f0f0f0f, AX; VPBROADCASTD AX, Z23 \
	MOVL $0x10101010, AX; VPBROADCASTD AX, Z24; MOVL $0xff00ff00, AX; KMOVD AX, K2

// KCONSTS(idx): the K-quant kernels' constants (Z24, Z25 the scales' word indexes at idx, Z29-Z31, K1).
#define KCONSTS(idx) \
	MOVL $0x0f0f0f0f, AX; VPBROADCASTD AX, Z31; MOVL $0x30303030, AX; VPBROADCASTD AX, Z30; MOVL $0x10101010, AX; VPBROADCASTD AX, Z29 \
	MOVL $-65536, AX; KMOVD AX, K1 \
	VMOVDQU64 idx<>+0(SB), Z24; VMOVDQU64 idx<>+64(SB), Z25

// The kernels' bodies. ROWS(CONSTS, DECODE, QUADOPS, block, xstep, meta): for each output (R15 of them, the rows
// one after the other from SI) its 4·nq sums in acc zeroed; for each step (a super-block, or two 32-element
// blocks: block bytes of the row, xstep values of each input row, meta bytes of input parts per quad) DECODE,
// then QUADOPS for each quad (R8 its first row, R11 its parts, R14 its sums); then the sums of the rows (< rows)
// to y[r·ystride], y one float on. ONE(CONSTS, DECODE, ONEOPS, block, xstep, meta): the same for one row, whose
// sum is lane 0 of X17, ONEOPS adding the step's update to it.
#define ROWS(CONSTS, DECODE, QUADOPS, block, xstep, meta) ROWSG(CONSTS, DECODE, QUADOPS, block, xstep, meta, ZERO4, NEXT4)
#define ZERO4 VMOVDQU32 X20, (R14); ADDQ $16, R14
#define NEXT4 LEAQ (R8)(R9*4), R8; ADDQ $16, R14

// OCTS(CONSTS, DECODE, OCTOPS, block, xstep, meta): ROWS with groups of eight rows (nq: their number; meta: the
// input parts' bytes per step and group), OCTOPS on each (R8 its row 0).
#define OCTS(CONSTS, DECODE, OCTOPS, block, xstep, meta) ROWSG(CONSTS, DECODE, OCTOPS, block, xstep, meta, ZERO8, NEXT8)
#define ZERO8 VMOVDQU32 Y20, (R14); ADDQ $32, R14
#define NEXT8 LEAQ (R8)(R9*8), R8; ADDQ $32, R14

// ROWSG: ROWS with ZERO (zero a group's sums at R14 and move on) and NEXT (move R8, R14 to the next group).
#define ROWSG(CONSTS, DECODE, QUADOPS, block, xstep, meta, ZERO, NEXT) \
	MOVQ w+0(FP), SI; MOVQ xstride+32(FP), R9; LEAQ (R9)(R9*2), R10; MOVQ nout+8(FP), R15; \
	CONSTS; \
output: \
	MOVQ acc+80(FP), R14; MOVQ nq+40(FP), R12; VPXORD Y20, Y20, Y20; \
zero: \
	ZERO; DECQ R12; JNZ zero; \
	MOVQ qs+24(FP), DX; MOVQ ameta+48(FP), R11; MOVQ nst+16(FP), R13; \
step: \
	DECODE; \
	MOVQ DX, R8; MOVQ acc+80(FP), R14; MOVQ nq+40(FP), R12; \
quad: \
	QUADOPS; \
	NEXT; ADDQ $meta, R11; DECQ R12; JNZ quad; \
	ADDQ $block, SI; ADDQ $xstep, DX; DECQ R13; JNZ step; \
	MOVQ acc+80(FP), R14; MOVQ rows+56(FP), CX; MOVQ ystride+72(FP), BX; SHLQ $2, BX; MOVQ y+64(FP), AX; MOVQ AX, DI; \
store: \
	MOVL (R14), R12; MOVL R12, (DI); ADDQ $4, R14; ADDQ BX, DI; DECQ CX; JNZ store; \
	ADDQ $4, AX; MOVQ AX, y+64(FP); DECQ R15; JNZ output; \
	VZEROUPPER; RET

#define ONE(CONSTS, DECODE, ONEOPS, block, xstep, meta) \
	MOVQ w+0(FP), SI; MOVQ nout+8(FP), R15; MOVQ y+40(FP), R14; \
	CONSTS; \
output: \
	VXORPS X17, X17, X17; MOVQ qs+24(FP), R8; MOVQ ameta+32(FP), R11; MOVQ nst+16(FP), R13; \
step: \
	DECODE; \
	ONEOPS; \
	ADDQ $block, SI; ADDQ $xstep, R8; ADDQ $meta, R11; DECQ R13; JNZ step; \
	VMOVSS X17, (R14); ADDQ $4, R14; DECQ R15; JNZ output; \
	VZEROUPPER; RET

// Each type's work per quad (QUADOPS) and per row (ONEOPS), and its constants.
#define Q4OPS QUAD; Q4MIN; UPDATE(X9, 64)
#define Q4OCTOPS OCT; OCTMIN4; UPDATE8(Y9, 128)
#define Q4ONE ROW(Z16, 0(R8), 64(R8), 128(R8), 192(R8)); RED1; MIN1Q4; UPDATE1(X9, 16)
#define Q6ONE ROW(Z16, 0(R8), 64(R8), 128(R8), 192(R8)); RED1; MIN1Q6; UPDATE1(X8, 32)
#define Q4CONSTS KCONSTS(rowsq4pk)
#define Q3OPS QUAD; Q6MIN; UPDATE(X8, 128)
#define Q3OCTOPS OCT; OCTMIN8; UPDATE8(Y8, 256)
#define Q3DECODE Q3SCALES; Q6SPLAT; Q3CODES
#define Q3DEC1 Q3SCALES; Q3CODES
#define Q3ONE ROW(Z16, 0(R8), 64(R8), 128(R8), 192(R8)); RED1; MIN1Q6; UPDATE1(X8, 32)
#define Q2OPS QUAD; Q6MIN; UPDATE(X14, 128)
#define Q2OCTOPS OCT; OCTMIN8; UPDATE8(Y14, 256)
#define Q2DECODE Q2SCALES; Q6SPLAT; Q2CODES
#define Q2DEC1 Q2SCALES; Q2CODES
#define Q2ONE ROW(Z16, 0(R8), 64(R8), 128(R8), 192(R8)); RED1; MIN1Q6; UPDATE1(X14, 32)
#define XSCONSTS KCONSTS(rowsxsidx); VMOVDQU64 rowsxsidx<>+128(SB), Z26; VMOVDQU64 rowsxsidx<>+192(SB), Z27; MOVL $0xff00ff00, AX; KMOVD AX, K2; VBROADCASTI32X4 ·iq4Bytes(SB), Z28; MOVL $0x80808080, AX; VPBROADCASTD AX, Z21; VPXORD Z21, Z28, Z28
#define XSOPS QUADR(ROWD); Q4MIN; UPDATE(X8, 64)
#define XSDECODE XSSCALES; Q4SPLAT; XSCODES
#define XSDEC1 XSSCALES; XSCODES
#define XSONE ROWD(Z16, 0(R8), 64(R8), 128(R8), 192(R8)); RED1; MIN1Q4; UPDATE1(X8, 16)
#define Q6CONSTS KCONSTS(rowsq6pk)
#define Q8OPS Q8QUAD; Q8UPDATE
#define Q80CONSTS Q8CONSTS
#define Q40CONSTS Q8CONSTS; MOVL $0x78787878, AX; VPBROADCASTD AX, Z25
#define Q50CONSTS Q8CONSTS; MOVL $0x70707070, AX; VPBROADCASTD AX, Z25
#define IQ4NLCONSTS Q8CONSTS; VBROADCASTI32X4 ·iq4Bytes(SB), Z25; VPXORD Z28, Z25, Z25

// Q8ONEUPDATE(b): the one-row update of two 32-element blocks (their d at 0 and b of SI): X17 += t0·dx0, then
// t1·dx1 (lanes 0 and 1 of X12, Q8ONE's).
#define Q8ONEUPDATE(b) \
	VPBROADCASTW (SI), X8; VPINSRW $1, b(SI), X8, X8; VCVTPH2PS X8, X8; VMULPS X8, X12, X12; \
	VMOVQ 8(R11), X13; VMULPS X13, X12, X12; VADDSS X12, X17, X17; VMOVSHDUP X12, X13; VADDSS X13, X17, X17
#define Q81OPS Q8QUAD; Q81UPDATE
#define Q41DEC Q41CODES; Q81SCALES(20)
#define Q51DEC Q51CODES; Q81SCALES(24)
#define Q41ONE Q81ONE(20)
#define Q51ONE Q81ONE(24)
#define Q80DEC Q8CODES; Q8SCALES(34)
#define Q40DEC Q40CODES; Q8SCALES(18)
#define Q50DEC Q50CODES; Q8SCALES(22)
#define IQ4NLDEC IQ4NLCODES; Q8SCALES(18)
#define Q80ONE Q8ONE; Q8ONEUPDATE(34)
#define Q40ONE Q8ONE; Q8ONEUPDATE(18)
#define Q50ONE Q8ONE; Q8ONEUPDATE(22)
#define Q5DEC1 Q4SCALES; Q5CODES4
#define Q4DEC1 Q4SCALES; Q4CODES4
#define Q6DEC1 Q6SCALES; Q6CODES4

// func octsQ5_KVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·octsQ5_KVNNI(SB), NOSPLIT, $0-88
	OCTS(Q4CONSTS, Q5DECODE, Q4OCTOPS, 176, 256, 160)

// func rowsQ5_KVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·rowsQ5_KVNNI(SB), NOSPLIT, $0-88
	ROWS(Q4CONSTS, Q5DECODE, Q4OPS, 176, 256, 80)

// func rowsQ8_0VNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·rowsQ8_0VNNI(SB), NOSPLIT, $0-88
	ROWS(Q80CONSTS, Q80DEC, Q8OPS, 68, 64, 64)

// func rowsQ4_0VNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·rowsQ4_0VNNI(SB), NOSPLIT, $0-88
	ROWS(Q40CONSTS, Q40DEC, Q8OPS, 36, 64, 64)

// func rowsQ5_0VNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·rowsQ5_0VNNI(SB), NOSPLIT, $0-88
	ROWS(Q50CONSTS, Q50DEC, Q8OPS, 44, 64, 64)

// func rowsIQ4_NLVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·rowsIQ4_NLVNNI(SB), NOSPLIT, $0-88
	ROWS(IQ4NLCONSTS, IQ4NLDEC, Q8OPS, 36, 64, 64)

// func rowQ4_KVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)
TEXT ·rowQ4_KVNNI(SB), NOSPLIT, $0-48
	ONE(Q4CONSTS, Q4DEC1, Q4ONE, 144, 256, 20)

// func rowQ5_KVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)
TEXT ·rowQ5_KVNNI(SB), NOSPLIT, $0-48
	ONE(Q4CONSTS, Q5DEC1, Q4ONE, 176, 256, 20)

// func rowQ6_KVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)
TEXT ·rowQ6_KVNNI(SB), NOSPLIT, $0-48
	ONE(Q6CONSTS, Q6DEC1, Q6ONE, 210, 256, 36)

// func rowQ8_0VNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)
TEXT ·rowQ8_0VNNI(SB), NOSPLIT, $0-48
	ONE(Q80CONSTS, Q8CODES, Q80ONE, 68, 64, 16)

// func rowQ4_0VNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)
TEXT ·rowQ4_0VNNI(SB), NOSPLIT, $0-48
	ONE(Q40CONSTS, Q40CODES, Q40ONE, 36, 64, 16)

// func rowQ5_0VNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)
TEXT ·rowQ5_0VNNI(SB), NOSPLIT, $0-48
	ONE(Q50CONSTS, Q50CODES, Q50ONE, 44, 64, 16)

// func rowIQ4_NLVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)
TEXT ·rowIQ4_NLVNNI(SB), NOSPLIT, $0-48
	ONE(IQ4NLCONSTS, IQ4NLCODES, Q40ONE, 36, 64, 16)

// func rowsQ4_1VNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·rowsQ4_1VNNI(SB), NOSPLIT, $0-88
	ROWS(Q80CONSTS, Q41DEC, Q81OPS, 40, 64, 64)

// func rowsQ5_1VNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·rowsQ5_1VNNI(SB), NOSPLIT, $0-88
	ROWS(Q80CONSTS, Q51DEC, Q81OPS, 48, 64, 64)

// func rowQ4_1VNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)
TEXT ·rowQ4_1VNNI(SB), NOSPLIT, $0-48
	ONE(Q80CONSTS, Q41CODES, Q41ONE, 40, 64, 16)

// func rowQ5_1VNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)
TEXT ·rowQ5_1VNNI(SB), NOSPLIT, $0-48
	ONE(Q80CONSTS, Q51CODES, Q51ONE, 48, 64, 16)

// func rowsIQ4_XSVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·rowsIQ4_XSVNNI(SB), NOSPLIT, $0-88
	ROWS(XSCONSTS, XSDECODE, XSOPS, 136, 256, 80)

// func rowIQ4_XSVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)
TEXT ·rowIQ4_XSVNNI(SB), NOSPLIT, $0-48
	ONE(XSCONSTS, XSDEC1, XSONE, 136, 256, 20)

// func rowsQ2_KVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·rowsQ2_KVNNI(SB), NOSPLIT, $0-88
	ROWS(Q6CONSTS, Q2DECODE, Q2OPS, 84, 256, 144)

// func rowQ2_KVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)
TEXT ·rowQ2_KVNNI(SB), NOSPLIT, $0-48
	ONE(Q6CONSTS, Q2DEC1, Q2ONE, 84, 256, 36)

// func rowsQ3_KVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·rowsQ3_KVNNI(SB), NOSPLIT, $0-88
	ROWS(Q6CONSTS, Q3DECODE, Q3OPS, 110, 256, 144)

// func rowQ3_KVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)
TEXT ·rowQ3_KVNNI(SB), NOSPLIT, $0-48
	ONE(Q6CONSTS, Q3DEC1, Q3ONE, 110, 256, 36)

// func octsQ2_KVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·octsQ2_KVNNI(SB), NOSPLIT, $0-88
	OCTS(Q6CONSTS, Q2DECODE, Q2OCTOPS, 84, 256, 288)

// func octsQ3_KVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)
TEXT ·octsQ3_KVNNI(SB), NOSPLIT, $0-88
	OCTS(Q6CONSTS, Q3DECODE, Q3OCTOPS, 110, 256, 288)
