// The 16-row transposition shared by tiled_amd64.s and tiledrows_amd64.s (Go assembly macros are per file).
//
// Rows: SI row 0, R10 row 3, R8 row 8, R12 row 11, R9 the stride, R11 3·stride (row r of a panel of 16 at
// SI + r·stride).

// TRANS4(off, a0, a1, a2, a3, b0, b1, b2, b3, d0, d1, d2, d3): the 16 bytes at off of the 16 rows, four rows to a
// register (a0 rows 0|4|8|12, a1 1|5|9|13, a2 2|6|10|14, a3 3|7|11|15), transposed through b0-b3 by 32-bit and
// 64-bit unpacks into d0..d3: dq's lane r is row r's dword q (what a 16-dword gather at off+4q would load,
// without its ~12 cycles).
#define TRANS4(off, a0, a1, a2, a3, b0, b1, b2, b3, d0, d1, d2, d3) \
	VBROADCASTI32X4 off(SI), a0; VINSERTI32X4 $1, off(SI)(R9*4), a0, a0; VINSERTI32X4 $2, off(R8), a0, a0; VINSERTI32X4 $3, off(R8)(R9*4), a0, a0 \
	VBROADCASTI32X4 off(SI)(R9*1), a1; VINSERTI32X4 $1, off(R10)(R9*2), a1, a1; VINSERTI32X4 $2, off(R8)(R9*1), a1, a1; VINSERTI32X4 $3, off(R12)(R9*2), a1, a1 \
	VBROADCASTI32X4 off(SI)(R9*2), a2; VINSERTI32X4 $1, off(SI)(R11*2), a2, a2; VINSERTI32X4 $2, off(R8)(R9*2), a2, a2; VINSERTI32X4 $3, off(R8)(R11*2), a2, a2 \
	VBROADCASTI32X4 off(R10), a3; VINSERTI32X4 $1, off(R10)(R9*4), a3, a3; VINSERTI32X4 $2, off(R12), a3, a3; VINSERTI32X4 $3, off(R12)(R9*4), a3, a3 \
	VPUNPCKLDQ a1, a0, b0; VPUNPCKHDQ a1, a0, b1; VPUNPCKLDQ a3, a2, b2; VPUNPCKHDQ a3, a2, b3 \
	VPUNPCKLQDQ b2, b0, d0; VPUNPCKHQDQ b2, b0, d1; VPUNPCKLQDQ b3, b1, d2; VPUNPCKHQDQ b3, b1, d3

// Q4_K's and Q5_K's meta of a super-block of the 16 rows (unpackK4Scales' layout, 896 bytes: 8 scales, 4 pairs
// of minimums, d, dm), shared by scales16K4AVX512 and the transposing kernels, which build it as they go.

// K4CONSTS: Z21 0x3f, Z22 0x0f, Z23 0x30 in each dword (R14 scratch).
#define K4CONSTS \
	MOVL $0x3f, R14; VPBROADCASTD R14, Z21; MOVL $0x0f, R14; VPBROADCASTD R14, Z22; MOVL $0x30, R14; VPBROADCASTD R14, Z23
// HALVES(z, zd, zm): the float16 pairs of z as float32, the low halves into zd, the high ones into zm.
#define HALVES(z, zd, zm) VPMOVDW z, Y28; VCVTPH2PS Y28, zd; VPSRLD $16, z, Z29; VPMOVDW Z29, Y29; VCVTPH2PS Y29, zm
// K4SCALES(sh, off, zm, zm4, dst): scale k and k+4 of Q4_K's eight (sh = 8k) to off(dst) and off+256(dst),
// minimums k and k+4 into zm and zm4 (Z1, Z2, Z3: the rows' q[0..3], q[4..7], q[8..11]; K4CONSTS).
#define K4SCALES(sh, off, zm, zm4, dst) \
	VPSRLD $sh, Z1, Z16; VPSRLD $sh, Z2, Z17; VPSRLD $sh, Z3, Z18 \
	VPANDD Z21, Z16, Z19; VMOVDQU32 Z19, off(dst) \
	VPANDD Z21, Z17, zm \
	VPSRLD $2, Z16, Z16; VPANDD Z22, Z18, Z19; VPTERNLOGD $0xF8, Z23, Z16, Z19; VMOVDQU32 Z19, 256+off(dst) \
	VPSRLD $2, Z17, Z17; VPSRLD $4, Z18, Z18; VPANDD Z22, Z18, zm4; VPTERNLOGD $0xF8, Z23, Z17, zm4
// MINPAIR(za, zb, off, dst): the int16 pairs za | zb << 16 (both 0..63) to off(dst).
#define MINPAIR(za, zb, off, dst) VPSLLD $16, zb, zb; VPORD za, zb, zb; VMOVDQU32 zb, off(dst)
// K4META(dst): the meta of the rows' current super-block (TRANS4's rows) to dst (K4CONSTS loaded); Z0-Z5,
// Z8-Z19, Z24-Z29 scratch.
#define K4META(dst) \
	TRANS4(0, Z24, Z25, Z26, Z27, Z16, Z17, Z18, Z19, Z0, Z1, Z2, Z3) \
	K4SCALES(0, 0, Z8, Z12, dst); K4SCALES(8, 64, Z9, Z13, dst); K4SCALES(16, 128, Z10, Z14, dst); K4SCALES(24, 192, Z11, Z15, dst) \
	MINPAIR(Z8, Z9, 512, dst); MINPAIR(Z10, Z11, 576, dst); MINPAIR(Z12, Z13, 640, dst); MINPAIR(Z14, Z15, 704, dst) \
	HALVES(Z0, Z4, Z5); VMOVUPS Z4, 768(dst); VMOVUPS Z5, 832(dst)

// Q6_K's meta of a super-block of the 16 rows (unpackQ6_KScales' layout, 1664 bytes: 16 scales, 8 pairs of
// minimum factors (32 times the scales), d twice), shared by scales16Q6_KAVX512 and the transposing kernels.

// Q6SCALES(z, off, dst): the four signed bytes of z (scales 4j..4j+3) sign-extended to off(dst)..off+192(dst),
// and 32 times them into Z8..Z11.
#define Q6SCALES(z, off, dst) \
	VPSLLD $24, z, Z8; VPSRAD $24, Z8, Z8; VMOVDQU32 Z8, off(dst); VPSLLD $5, Z8, Z8 \
	VPSLLD $16, z, Z9; VPSRAD $24, Z9, Z9; VMOVDQU32 Z9, 64+off(dst); VPSLLD $5, Z9, Z9 \
	VPSLLD $8, z, Z10; VPSRAD $24, Z10, Z10; VMOVDQU32 Z10, 128+off(dst); VPSLLD $5, Z10, Z10 \
	VPSRAD $24, z, Z11; VMOVDQU32 Z11, 192+off(dst); VPSLLD $5, Z11, Z11
// Q6PAIRS(off, dst): the minimum factors Z8..Z11 as two int16 pairs to off(dst) and off+64(dst) (Z24 0xffff in
// each dword).
#define Q6PAIRS(off, dst) \
	VPANDD Z24, Z8, Z8; VPSLLD $16, Z9, Z9; VPORD Z9, Z8, Z8; VMOVDQU32 Z8, off(dst) \
	VPANDD Z24, Z10, Z10; VPSLLD $16, Z11, Z11; VPORD Z11, Z10, Z10; VMOVDQU32 Z10, 64+off(dst)
// Q6META(dst): the meta of the rows' current super-block (TRANS4's rows) to dst: the 16 scales (bytes 192-207)
// and d (208-209: the high half of the dword at 206, from the 16 bytes at 194) by two transposed loads; Z24
// 0xffff in each dword; Z0-Z19, Z25-Z29 scratch.
#define Q6META(dst) \
	TRANS4(192, Z12, Z13, Z14, Z15, Z16, Z17, Z18, Z19, Z0, Z1, Z2, Z3) \
	TRANS4(194, Z12, Z13, Z14, Z15, Z16, Z17, Z18, Z19, Z5, Z6, Z7, Z4) \
	Q6SCALES(Z0, 0, dst); Q6PAIRS(1024, dst); Q6SCALES(Z1, 256, dst); Q6PAIRS(1152, dst) \
	Q6SCALES(Z2, 512, dst); Q6PAIRS(1280, dst); Q6SCALES(Z3, 768, dst); Q6PAIRS(1408, dst) \
	HALVES(Z4, Z5, Z6); VMOVUPS Z6, 1536(dst); VMOVUPS Z6, 1600(dst)
