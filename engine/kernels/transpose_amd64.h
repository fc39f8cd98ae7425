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
