#include "textflag.h"
#include "transpose_amd64.h"

// The transposing tiled kernels (tiledrows.go): the tiled kernels' products (16 weight rows in the lanes of each
// register, one VPDPBUSD per quad of 4 codes of the 16 rows and input row, the scales per lane), with the 16
// rows' codes transposed in registers as they are read, no panel, for eight input rows at a time (or four: the
// same macros, with the first four of each register group below).
//
// Registers: Z0-Z7 the 16 rows' dwords 0..7 of a 32-byte group (lane r: row r; then the rows' minimum sums of
// each input), Z8-Z15 each input's sum over the current sub-block (first the transposition's scratch), Z16-Z23
// each input's isb over the super-block, Z24 the codes of a quad (then d), Z25 the sub-block scales (then the
// minimum factors, then dm), Z26 0x0f bytes, Z28, Z29 the float terms.
//
// Rows: SI row 0, R10 row 3, R8 row 8, R12 row 11 (each at the current super-block), R9 the stride, R11 3·stride,
// as transpose_amd64.h has them.

// T8LOAD(off): the 32 bytes at off of the 16 rows, two rows to a register: Z8 = rows 0|4, Z9 1|5, Z10 2|6,
// Z11 3|7, Z12 8|12, Z13 9|13, Z14 10|14, Z15 11|15 (the order in which T8TRANSPOSE's lanes come out 0..15).
#define T8LOAD(off) \
	VMOVDQU off(SI), Y8; VINSERTI64X4 $1, off(SI)(R9*4), Z8, Z8 \
	VMOVDQU off(SI)(R9*1), Y9; VINSERTI64X4 $1, off(R10)(R9*2), Z9, Z9 \
	VMOVDQU off(SI)(R9*2), Y10; VINSERTI64X4 $1, off(SI)(R11*2), Z10, Z10 \
	VMOVDQU off(R10), Y11; VINSERTI64X4 $1, off(R10)(R9*4), Z11, Z11 \
	VMOVDQU off(R8), Y12; VINSERTI64X4 $1, off(R8)(R9*4), Z12, Z12 \
	VMOVDQU off(R8)(R9*1), Y13; VINSERTI64X4 $1, off(R12)(R9*2), Z13, Z13 \
	VMOVDQU off(R8)(R9*2), Y14; VINSERTI64X4 $1, off(R8)(R11*2), Z14, Z14 \
	VMOVDQU off(R12), Y15; VINSERTI64X4 $1, off(R12)(R9*4), Z15, Z15

// T8TRANSPOSE: Z8-Z15 (T8LOAD) into Z0-Z7, Zq's lane r row r's dword q: 8×8 transposes of dwords in both
// 256-bit halves (32-bit and 64-bit unpacks), then one 128-bit shuffle that puts the four rows of each lane in
// order. Z8-Z15 end zeroed (the sub-block sums).
#define T8TRANSPOSE \
	VPUNPCKLDQ Z9, Z8, Z0; VPUNPCKHDQ Z9, Z8, Z1; VPUNPCKLDQ Z11, Z10, Z2; VPUNPCKHDQ Z11, Z10, Z3 \
	VPUNPCKLDQ Z13, Z12, Z4; VPUNPCKHDQ Z13, Z12, Z5; VPUNPCKLDQ Z15, Z14, Z6; VPUNPCKHDQ Z15, Z14, Z7 \
	VPUNPCKLQDQ Z2, Z0, Z8; VPUNPCKHQDQ Z2, Z0, Z9; VPUNPCKLQDQ Z3, Z1, Z10; VPUNPCKHQDQ Z3, Z1, Z11 \
	VPUNPCKLQDQ Z6, Z4, Z12; VPUNPCKHQDQ Z6, Z4, Z13; VPUNPCKLQDQ Z7, Z5, Z14; VPUNPCKHQDQ Z7, Z5, Z15 \
	VSHUFI32X4 $0x88, Z12, Z8, Z0; VSHUFI32X4 $0xDD, Z12, Z8, Z4; VSHUFI32X4 $0x88, Z13, Z9, Z1; VSHUFI32X4 $0xDD, Z13, Z9, Z5 \
	VSHUFI32X4 $0x88, Z14, Z10, Z2; VSHUFI32X4 $0xDD, Z14, Z10, Z6; VSHUFI32X4 $0x88, Z15, Z11, Z3; VSHUFI32X4 $0xDD, Z15, Z11, Z7 \
	VPXORD Z8, Z8, Z8; VPXORD Z9, Z9, Z9; VPXORD Z10, Z10, Z10; VPXORD Z11, Z11, Z11 \
	VPXORD Z12, Z12, Z12; VPXORD Z13, Z13, Z13; VPXORD Z14, Z14, Z14; VPXORD Z15, Z15, Z15

// DOT8(z, off), DOT4: the products of a quad of the 16 rows' codes (z) with the same quad of the 8 (4) inputs,
// each four values broadcast from off(DI).
#define DOT4(z, off) \
	VPDPBUSD.BCST off+0(DI), z, Z8; VPDPBUSD.BCST off+4(DI), z, Z9; VPDPBUSD.BCST off+8(DI), z, Z10; VPDPBUSD.BCST off+12(DI), z, Z11
#define DOT8(z, off) \
	DOT4(z, off) \
	VPDPBUSD.BCST off+16(DI), z, Z12; VPDPBUSD.BCST off+20(DI), z, Z13; VPDPBUSD.BCST off+24(DI), z, Z14; VPDPBUSD.BCST off+28(DI), z, Z15

// SCALE8(zsc, off), SCALE4: Z16+i += Z8+i·(the rows' sub-block scales at off(BX), loaded into zsc); Z8+i = 0.
#define SC(zi, zs, zsc) VPMULLD zsc, zi, zi; VPADDD zi, zs, zs; VPXORD zi, zi, zi
#define SCALE4(zsc, off) \
	VMOVDQU32 off(BX), zsc \
	SC(Z8, Z16, zsc); SC(Z9, Z17, zsc); SC(Z10, Z18, zsc); SC(Z11, Z19, zsc)
#define SCALE8(zsc, off) \
	SCALE4(zsc, off) \
	SC(Z12, Z20, zsc); SC(Z13, Z21, zsc); SC(Z14, Z22, zsc); SC(Z15, Z23, zsc)

// MIN8(off, a), MIN4: Z0+i += the minimum factors of a pair of sub-blocks at off(BX) times input i's pair of
// sums at a+4i(R13).
#define MIN4(off, a) \
	VMOVDQU32 off(BX), Z25 \
	VPDPWSSD.BCST a+0(R13), Z25, Z0; VPDPWSSD.BCST a+4(R13), Z25, Z1; VPDPWSSD.BCST a+8(R13), Z25, Z2; VPDPWSSD.BCST a+12(R13), Z25, Z3
#define MIN8(off, a) \
	MIN4(off, a) \
	VPDPWSSD.BCST a+16(R13), Z25, Z4; VPDPWSSD.BCST a+20(R13), Z25, Z5; VPDPWSSD.BCST a+24(R13), Z25, Z6; VPDPWSSD.BCST a+28(R13), Z25, Z7

// EPI(zi, zs, dx, y): acc[y..] += ((float(zs)·d) − (float(zi)·dm))·dx, no fused operation (Z24 d, Z25 dm);
// zs = 0.
#define EPI(zi, zs, dx, y) \
	VCVTDQ2PS zs, Z28; VMULPS Z24, Z28, Z28; VCVTDQ2PS zi, Z29; VMULPS Z25, Z29, Z29; VSUBPS Z29, Z28, Z28; \
	VMULPS.BCST dx(R13), Z28, Z28; VADDPS y(AX), Z28, Z28; VMOVUPS Z28, y(AX); VPXORD zs, zs, zs

// EPIS8(d, dx), EPIS4: the 8 (4) inputs' float updates (the rows' d at d(BX), dm after it; the inputs' dx at
// dx(R13)).
#define EPIS4(d, dx) \
	VMOVUPS d(BX), Z24; VMOVUPS d+64(BX), Z25 \
	EPI(Z0, Z16, dx, 0); EPI(Z1, Z17, dx+4, 64); EPI(Z2, Z18, dx+8, 128); EPI(Z3, Z19, dx+12, 192)
#define EPIS8(d, dx) \
	EPIS4(d, dx) \
	EPI(Z4, Z20, dx+16, 256); EPI(Z5, Z21, dx+20, 320); EPI(Z6, Z22, dx+24, 384); EPI(Z7, Z23, dx+28, 448)

// NEXTSB(block, meta, ameta): the rows, the meta and the inputs' parts move to the next super-block.
#define NEXTSB(block, meta, ameta) \
	ADDQ $block, SI; ADDQ $block, R10; ADDQ $block, R8; ADDQ $block, R12; ADDQ $meta, BX; ADDQ $(ameta), R13

// ZERO8(a, ..): zeroes eight registers.
#define ZERO8(a, b, c, d, e, f, g, h) \
	VPXORD a, a, a; VPXORD b, b, b; VPXORD c, c, c; VPXORD d, d, d; VPXORD e, e, e; VPXORD f, f, f; VPXORD g, g, g; VPXORD h, h, h

// TRKERNEL(lbl, SB): a transposing kernel's body: TRENTRY, then the super-block macro SB nsb times.
#define TRKERNEL(lbl, SB) \
	TRENTRY \
	lbl: SB; DECQ CX; JNZ lbl \
	VZEROUPPER; RET

// TRENTRY: the arguments of a transposing kernel into their registers, Z16-Z23 zeroed, Z26 0x0f bytes.
#define TRENTRY \
	MOVQ w+0(FP), SI; MOVQ stride+8(FP), R9; MOVQ meta+16(FP), BX; MOVQ qs+24(FP), DI \
	MOVQ ameta+32(FP), R13; MOVQ nsb+40(FP), CX; MOVQ acc+48(FP), AX; MOVQ pf+56(FP), DX \
	LEAQ (R9)(R9*2), R11; LEAQ (SI)(R11*1), R10; LEAQ (SI)(R9*8), R8; LEAQ (R8)(R11*1), R12 \
	ZERO8(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23) \
	VPBROADCASTD trnib<>(SB), Z26

// Q4LO(zq, off, DOT), Q4HI: the low and the high nibbles of the rows' dword q (Zq) times the inputs' quad q (low:
// the group's first 32 elements) or 8+q (high: its second 32), at off(DI).
#define Q4LO(zq, off, DOT) VPANDD Z26, zq, Z24; DOT(Z24, off)
#define Q4HI(zq, off, DOT) VPSRLD $4, zq, Z24; VPANDD Z26, Z24, Z24; DOT(Z24, off)

// PF(off): prefetches the line at off of the next panel (DX). A group prefetches 9 lines, a 16th of a Q4_K
// super-block of 16 rows, one every two quads, so that the next panel's 16 rows are in cache when its kernel
// starts (the 9 together, after the products, ran ~3% slower: the core's misses in flight ran out).
#define PF(off) PREFETCHT0 off(DX)

// Q4GROUP(g, DOT, SCALE, S): group g of a Q4_K super-block (qs bytes 32g..32g+31 at 16: sub-block 2g in the low
// nibbles, 2g+1 in the high ones; the inputs' 64 elements at DI, S bytes a quad, which moves on).
#define Q4GROUP(g, DOT, SCALE, S) \
	T8LOAD(16+32*g) \
	T8TRANSPOSE \
	Q4LO(Z0, 0, DOT); PF(0); Q4LO(Z1, S, DOT); Q4LO(Z2, 2*S, DOT); PF(64); Q4LO(Z3, 3*S, DOT) \
	Q4LO(Z4, 4*S, DOT); PF(128); Q4LO(Z5, 5*S, DOT); Q4LO(Z6, 6*S, DOT); PF(192); Q4LO(Z7, 7*S, DOT) \
	SCALE(Z25, 128*g) \
	Q4HI(Z0, 8*S, DOT); PF(256); Q4HI(Z1, 9*S, DOT); Q4HI(Z2, 10*S, DOT); PF(320); Q4HI(Z3, 11*S, DOT) \
	Q4HI(Z4, 12*S, DOT); PF(384); Q4HI(Z5, 13*S, DOT); Q4HI(Z6, 14*S, DOT); PF(448); Q4HI(Z7, 15*S, DOT) \
	SCALE(Z25, 128*g+64) \
	PF(512); ADDQ $576, DX \
	ADDQ $(16*S), DI

// Q4OWN: a Q4_K super-block's meta of the 16 rows, built into BX (transpose_amd64.h), then the kernel's Z16-Z23
// zeroed and Z26 again; NOMETA: none (the panel's meta at BX, from scales16K4AVX512).
#define Q4OWN \
	K4CONSTS; K4META(BX) \
	ZERO8(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23); VPBROADCASTD trnib<>(SB), Z26
#define NOMETA

// Q4SB(DOT, SCALE, MIN, EPIS, S, META, MSTEP): a Q4_K super-block of the 16 rows times 8 or 4 inputs (S =
// 4·inputs: the bytes of a quad; ameta per super-block: the pairs of sums [4][inputs]int32, dx [inputs]float32),
// its meta built first (META Q4OWN, MSTEP 0: one super-block's at BX) or the panel's (NOMETA, 896).
#define Q4SB(DOT, SCALE, MIN, EPIS, S, META, MSTEP) \
	META \
	Q4GROUP(0, DOT, SCALE, S); Q4GROUP(1, DOT, SCALE, S); Q4GROUP(2, DOT, SCALE, S); Q4GROUP(3, DOT, SCALE, S) \
	ZERO8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7) \
	MIN(512, 0); MIN(576, S); MIN(640, 2*S); MIN(704, 3*S) \
	EPIS(768, 4*S) \
	NEXTSB(144, MSTEP, 5*S)

// func tiledRowsQ4_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// 16 Q4_K rows (row r at w + r·stride) times 8 inputs (qs: [256·nsb/4 quads][8][4]; ameta per super-block: the
// pairs of sums [4][8]int32, dx [8]float32) over nsb super-blocks, building each super-block's meta of the rows
// into the 896 bytes at meta: acc[c·16 + r] += each super-block's tiled update, as tileGo. It prefetches the
// 16·stride bytes from pf (the next panel's rows).
TEXT ·tiledRowsQ4_KVNNI(SB), NOSPLIT, $0-64
	TRKERNEL(q4sb8, Q4SB(DOT8, SCALE8, MIN8, EPIS8, 32, Q4OWN, 0))

// func tiledRows4Q4_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// tiledRowsQ4_KVNNI for 4 inputs.
TEXT ·tiledRows4Q4_KVNNI(SB), NOSPLIT, $0-64
	TRKERNEL(q4sb4, Q4SB(DOT4, SCALE4, MIN4, EPIS4, 16, Q4OWN, 0))

// func tiledRowsPanelQ4_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// tiledRowsQ4_KVNNI with the panel's meta at meta (scales16K4AVX512's, 896 bytes a super-block), for products of
// more than 8 rows, whose calls share it.
TEXT ·tiledRowsPanelQ4_KVNNI(SB), NOSPLIT, $0-64
	TRKERNEL(q4sb8p, Q4SB(DOT8, SCALE8, MIN8, EPIS8, 32, NOMETA, 896))

// Q6_K: the 16 rows' 16-byte pieces, four rows to a register, transposed (T4) into four registers of the rows'
// dwords: ql's two pieces and qh's one of the same 16 elements l (Z0-Z3, Z4-Z7, Z24-Z27), from which come the
// codes of four sub-blocks (the low and high nibbles of each ql piece, qh's bit pairs 0..3 as bits 4-5). Z28, Z29
// the codes' terms, Z30 the sub-block scales.

// T4(off, d0, d1, d2, d3): TRANS4 (transpose_amd64.h) through Z8-Z15.
#define T4(off, d0, d1, d2, d3) TRANS4(off, Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, d0, d1, d2, d3)

// Q6CODE(hi, lo): Z29 = hi | (lo & 0x0f bytes), hi already 0x30-masked.
#define Q6CODE VPTERNLOGD.BCST $0xf8, trnib<>(SB), Z28, Z29

// Q6J0(ql, qh, off, DOT) .. Q6J3: the codes of element group j (ql's low nibbles with qh's bits 0-1 (J0) or 2-3
// (J1), the high nibbles with bits 4-5 (J2) or 6-7 (J3)) times the inputs' quad at off(DI).
#define Q6J0(ql, qh, off, DOT) VPSLLD $4, qh, Z29; VPANDD.BCST trq6hi<>(SB), Z29, Z29; VMOVDQA64 ql, Z28; Q6CODE; DOT(Z29, off)
#define Q6J1(ql, qh, off, DOT) VPSLLD $2, qh, Z29; VPANDD.BCST trq6hi<>(SB), Z29, Z29; VMOVDQA64 ql, Z28; Q6CODE; DOT(Z29, off)
#define Q6J2(ql, qh, off, DOT) VPANDD.BCST trq6hi<>(SB), qh, Z29; VPSRLD $4, ql, Z28; Q6CODE; DOT(Z29, off)
#define Q6J3(ql, qh, off, DOT) VPSRLD $2, qh, Z29; VPANDD.BCST trq6hi<>(SB), Z29, Z29; VPSRLD $4, ql, Z28; Q6CODE; DOT(Z29, off)

// Q6J(J, ql0, ql1, ql2, ql3, h, j, sc, DOT, SCALE, S): element group j's four quads of piece h (the inputs' quads
// at (8j + 4h)·S, S bytes each), then the sub-block's scales at sc(BX) (in Z30).
#define Q6J(J, ql0, ql1, ql2, ql3, h, j, sc, DOT, SCALE, S) \
	J(ql0, Z24, 8*S*j+4*S*h, DOT); J(ql1, Z25, 8*S*j+4*S*h+S, DOT); J(ql2, Z26, 8*S*j+4*S*h+2*S, DOT); J(ql3, Z27, 8*S*j+4*S*h+3*S, DOT) \
	SCALE(Z30, sc)

// Q6PIECE(n, h, sc0, sc1, sc2, sc3, DOT, SCALE, S): elements 128n + 32j + 16h + (0..15) of a Q6_K super-block for
// j = 0..3 (sub-blocks 8n + 2j + h, their scales at scj(BX): 64 times the sub-block), the inputs' quads from DI
// (at half n), prefetching 14 lines of the next panel.
#define Q6PIECE(n, h, sc0, sc1, sc2, sc3, DOT, SCALE, S) \
	T4(64*n+16*h, Z0, Z1, Z2, Z3) \
	T4(64*n+32+16*h, Z4, Z5, Z6, Z7) \
	T4(128+32*n+16*h, Z24, Z25, Z26, Z27) \
	ZERO8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15) \
	Q6J(Q6J0, Z0, Z1, Z2, Z3, h, 0, sc0, DOT, SCALE, S) \
	Q6J(Q6J1, Z4, Z5, Z6, Z7, h, 1, sc1, DOT, SCALE, S) \
	Q6J(Q6J2, Z0, Z1, Z2, Z3, h, 2, sc2, DOT, SCALE, S) \
	Q6J(Q6J3, Z4, Z5, Z6, Z7, h, 3, sc3, DOT, SCALE, S) \
	PREFETCHT0 0(DX); PREFETCHT0 64(DX); PREFETCHT0 128(DX); PREFETCHT0 192(DX); PREFETCHT0 256(DX); PREFETCHT0 320(DX); PREFETCHT0 384(DX) \
	PREFETCHT0 448(DX); PREFETCHT0 512(DX); PREFETCHT0 576(DX); PREFETCHT0 640(DX); PREFETCHT0 704(DX); PREFETCHT0 768(DX); PREFETCHT0 832(DX) \
	ADDQ $840, DX

// Q6OWN: a Q6_K super-block's meta of the 16 rows, built into BX (transpose_amd64.h), then Z16-Z23 zeroed again.
#define Q6OWN \
	MOVL $0xffff, R14; VPBROADCASTD R14, Z24; Q6META(BX) \
	ZERO8(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23)

// Q6SB(DOT, SCALE, MIN, EPIS, S, META, MSTEP): a Q6_K super-block of the 16 rows times 8 or 4 inputs (S =
// 4·inputs; ameta per super-block: the pairs of sums [8][inputs]int32, dx [inputs]float32), its meta built first
// (Q6OWN, 0) or the panel's (NOMETA, 1664).
#define Q6SB(DOT, SCALE, MIN, EPIS, S, META, MSTEP) \
	META \
	Q6PIECE(0, 0, 0, 128, 256, 384, DOT, SCALE, S) \
	Q6PIECE(0, 1, 64, 192, 320, 448, DOT, SCALE, S) \
	ADDQ $(32*S), DI \
	Q6PIECE(1, 0, 512, 640, 768, 896, DOT, SCALE, S) \
	Q6PIECE(1, 1, 576, 704, 832, 960, DOT, SCALE, S) \
	ADDQ $(32*S), DI \
	ZERO8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7) \
	MIN(1024, 0); MIN(1088, S); MIN(1152, 2*S); MIN(1216, 3*S); MIN(1280, 4*S); MIN(1344, 5*S); MIN(1408, 6*S); MIN(1472, 7*S) \
	EPIS(1536, 8*S) \
	NEXTSB(210, MSTEP, 9*S)

// func tiledRowsQ6_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// tiledRowsQ4_KVNNI for Q6_K (210-byte super-blocks; the meta of a super-block, scales16Q6_KAVX512's layout, 1664
// bytes; ameta per super-block: the pairs of sums [8][8]int32, dx [8]float32).
TEXT ·tiledRowsQ6_KVNNI(SB), NOSPLIT, $0-64
	TRKERNEL(q6sb8, Q6SB(DOT8, SCALE8, MIN8, EPIS8, 32, Q6OWN, 0))

// func tiledRows4Q6_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// tiledRowsQ6_KVNNI for 4 inputs.
TEXT ·tiledRows4Q6_KVNNI(SB), NOSPLIT, $0-64
	TRKERNEL(q6sb4, Q6SB(DOT4, SCALE4, MIN4, EPIS4, 16, Q6OWN, 0))

// func tiledRowsPanelQ6_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// tiledRowsQ6_KVNNI with the panel's meta at meta (scales16Q6_KAVX512's), for products of more than 8 rows.
TEXT ·tiledRowsPanelQ6_KVNNI(SB), NOSPLIT, $0-64
	TRKERNEL(q6sb8p, Q6SB(DOT8, SCALE8, MIN8, EPIS8, 32, NOMETA, 1664))

DATA trnib<>+0(SB)/4, $0x0f0f0f0f
GLOBL trnib<>(SB), RODATA|NOPTR, $4

DATA trq6hi<>+0(SB)/4, $0x30303030
GLOBL trq6hi<>(SB), RODATA|NOPTR, $4
