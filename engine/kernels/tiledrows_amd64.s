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

// Q4GROUPS(lbl, DOT, SCALE, S): the four groups of a Q4_K super-block, in a loop (label lbl, R15 its count):
// group g is qs bytes 32g..32g+31 at 16 (sub-block 2g in the low nibbles, 2g+1 in the high ones), its scales at
// 128g(BX), the inputs' 64 elements at DI (S bytes a quad, which moves on); the rows and BX move on a group each
// time and back at the end. A loop rather than four copies: copied, a super-block's code (~7 KB for 8 inputs)
// made the kernels' speed depend on where the code sat, and the one-input panel kernel streamed from memory at a
// sixth below what its loads alone reach (docs/performance-log.md, issue 40).
#define Q4GROUPS(lbl, DOT, SCALE, S) \
	MOVQ $4, R15 \
	lbl: T8LOAD(16); T8TRANSPOSE; Q4QUADS(DOT, DOT, DOT, DOT, SCALE, S) \
	ADDQ $32, SI; ADDQ $32, R10; ADDQ $32, R8; ADDQ $32, R12; ADDQ $128, BX; DECQ R15; JNZ lbl \
	SUBQ $128, SI; SUBQ $128, R10; SUBQ $128, R8; SUBQ $128, R12; SUBQ $512, BX

// Q4QUADS(DA, DB, DC, DD, SCALE, S): a group's products from its eight registers Z0-Z7 (quad q by DA, DB, DC, DD
// in turn: one accumulator, or four for one input), each sub-block's scales (at BX and 64(BX)) after it, 9 lines
// prefetched.
#define Q4QUADS(DA, DB, DC, DD, SCALE, S) \
	Q4LO(Z0, 0, DA); PF(0); Q4LO(Z1, S, DB); Q4LO(Z2, 2*S, DC); PF(64); Q4LO(Z3, 3*S, DD) \
	Q4LO(Z4, 4*S, DA); PF(128); Q4LO(Z5, 5*S, DB); Q4LO(Z6, 6*S, DC); PF(192); Q4LO(Z7, 7*S, DD) \
	SCALE(Z25, 0) \
	Q4HI(Z0, 8*S, DA); PF(256); Q4HI(Z1, 9*S, DB); Q4HI(Z2, 10*S, DC); PF(320); Q4HI(Z3, 11*S, DD) \
	Q4HI(Z4, 12*S, DA); PF(384); Q4HI(Z5, 13*S, DB); Q4HI(Z6, 14*S, DC); PF(448); Q4HI(Z7, 15*S, DD) \
	SCALE(Z25, 64) \
	PF(512); ADDQ $576, DX \
	ADDQ $(16*S), DI

// Q4OWN: a Q4_K super-block's meta of the 16 rows, built into BX (transpose_amd64.h), then the kernel's Z16-Z23
// zeroed and Z26 again; NOMETA: none (the panel's meta at BX, from scales16K4AVX512).
#define Q4OWN \
	K4CONSTS; K4META(BX) \
	ZERO8(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23); VPBROADCASTD trnib<>(SB), Z26
#define NOMETA

// Q4SB(lbl, DOT, SCALE, MIN, EPIS, S, META, MSTEP): a Q4_K super-block of the 16 rows times 8 or 4 inputs (S =
// 4·inputs: the bytes of a quad; ameta per super-block: the pairs of sums [4][inputs]int32, dx [inputs]float32),
// its meta built first (META Q4OWN, MSTEP 0: one super-block's at BX) or the panel's (NOMETA, 896); lbl labels
// its loop of groups.
#define Q4SB(lbl, DOT, SCALE, MIN, EPIS, S, META, MSTEP) \
	META \
	Q4GROUPS(lbl, DOT, SCALE, S) \
	Q4END(MIN, EPIS, S) \
	NEXTSB(144, MSTEP, 5*S)

// Q4END(MIN, EPIS, S): a Q4_K super-block's minimum terms and float updates, after its four groups.
#define Q4END(MIN, EPIS, S) \
	ZERO8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7) \
	MIN(512, 0); MIN(576, S); MIN(640, 2*S); MIN(704, 3*S) \
	EPIS(768, 4*S)

// RUN1ENTRY: a one-input panel kernel's arguments (panelsRun1*, below; defined before any TEXT, where vet's
// frame check reads it) into their registers: R8 the panel, R10 the panels left, R11 nsb, R12 pb, BX the meta
// scratch, AX y; its sums zeroed.
#define RUN1ENTRY \
	MOVQ data+0(FP), R8; MOVQ panels+8(FP), R10; MOVQ nsb+16(FP), R11; MOVQ pb+24(FP), R12 \
	MOVQ meta+32(FP), BX; MOVQ y+56(FP), AX \
	ZERO8(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23)

// RUN1NEXT(sb, panel): after a super-block, the panel's next one (label sb), else the next panel (label panel),
// its 16 outputs at the next 64 bytes of y; after the last, return.
#define RUN1NEXT(sb, panel) \
	DECQ CX; JNZ sb \
	ADDQ $64, AX; ADDQ R12, R8 \
	DECQ R10; JNZ panel \
	VZEROUPPER; RET

// func tiledRowsQ4_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// 16 Q4_K rows (row r at w + r·stride) times 8 inputs (qs: [256·nsb/4 quads][8][4]; ameta per super-block: the
// pairs of sums [4][8]int32, dx [8]float32) over nsb super-blocks, building each super-block's meta of the rows
// into the 896 bytes at meta: acc[c·16 + r] += each super-block's tiled update, as tileGo. It prefetches the
// 16·stride bytes from pf (the next panel's rows).
TEXT ·tiledRowsQ4_KVNNI(SB), NOSPLIT, $0-64
	TRKERNEL(q4sb8, Q4SB(q4g8, DOT8, SCALE8, MIN8, EPIS8, 32, Q4OWN, 0))

// func tiledRows4Q4_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// tiledRowsQ4_KVNNI for 4 inputs.
TEXT ·tiledRows4Q4_KVNNI(SB), NOSPLIT, $0-64
	TRKERNEL(q4sb4, Q4SB(q4g4, DOT4, SCALE4, MIN4, EPIS4, 16, Q4OWN, 0))

// func tiledRowsPanelQ4_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// tiledRowsQ4_KVNNI with the panel's meta at meta (scales16K4AVX512's, 896 bytes a super-block), for products of
// more than 8 rows, whose calls share it.
TEXT ·tiledRowsPanelQ4_KVNNI(SB), NOSPLIT, $0-64
	TRKERNEL(q4sb8p, Q4SB(q4g8p, DOT8, SCALE8, MIN8, EPIS8, 32, NOMETA, 896))

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
#define Q6J(J, ql0, ql1, ql2, ql3, h, j, sc, DOT, SCALE, S) Q6JX(J, ql0, ql1, ql2, ql3, h, j, sc, DOT, DOT, DOT, DOT, SCALE, S)

// Q6JX(J, ql0, ql1, ql2, ql3, h, j, sc, DA, DB, DC, DD, SCALE, S): Q6J with its four quads by DA .. DD (four
// accumulators for one input).
#define Q6JX(J, ql0, ql1, ql2, ql3, h, j, sc, DA, DB, DC, DD, SCALE, S) \
	J(ql0, Z24, 8*S*j+4*S*h, DA); J(ql1, Z25, 8*S*j+4*S*h+S, DB); J(ql2, Z26, 8*S*j+4*S*h+2*S, DC); J(ql3, Z27, 8*S*j+4*S*h+3*S, DD) \
	SCALE(Z30, sc)

// PF4(off), PF3(off): prefetch 4 or 3 lines from off of the next panel (DX).
#define PF4(off) PF(off); PF(off+64); PF(off+128); PF(off+192)
#define PF3(off) PF(off); PF(off+64); PF(off+128)

// Q6PIECE(n, h, sc0, sc1, sc2, sc3, DOT, SCALE, S): elements 128n + 32j + 16h + (0..15) of a Q6_K super-block for
// j = 0..3 (sub-blocks 8n + 2j + h, their scales at scj(BX): 64 times the sub-block), the inputs' quads from DI
// (at half n), prefetching 14 lines of the next panel, a few after each element group (all 14 at the end of the
// piece, the one-input panel kernel streamed from memory ~12% slower).
#define Q6PIECE(n, h, sc0, sc1, sc2, sc3, DOT, SCALE, S) \
	T4(64*n+16*h, Z0, Z1, Z2, Z3) \
	T4(64*n+32+16*h, Z4, Z5, Z6, Z7) \
	T4(128+32*n+16*h, Z24, Z25, Z26, Z27) \
	ZERO8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15) \
	Q6J(Q6J0, Z0, Z1, Z2, Z3, h, 0, sc0, DOT, SCALE, S) \
	PF4(0) \
	Q6J(Q6J1, Z4, Z5, Z6, Z7, h, 1, sc1, DOT, SCALE, S) \
	PF4(256) \
	Q6J(Q6J2, Z0, Z1, Z2, Z3, h, 2, sc2, DOT, SCALE, S) \
	PF3(512) \
	Q6J(Q6J3, Z4, Z5, Z6, Z7, h, 3, sc3, DOT, SCALE, S) \
	PF3(704) \
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
	Q6BODY(Q6PIECE, DOT, SCALE, MIN, EPIS, S) \
	NEXTSB(210, MSTEP, 9*S)

// Q6BODY(PIECE, DOT, SCALE, MIN, EPIS, S): a Q6_K super-block's four pieces (PIECE(n, h, ..), the inputs' quads
// moving on after each half n), then its minimum terms and float updates (Q6END).
#define Q6BODY(PIECE, DOT, SCALE, MIN, EPIS, S) \
	PIECE(0, 0, 0, 128, 256, 384, DOT, SCALE, S) \
	PIECE(0, 1, 64, 192, 320, 448, DOT, SCALE, S) \
	ADDQ $(32*S), DI \
	PIECE(1, 0, 512, 640, 768, 896, DOT, SCALE, S) \
	PIECE(1, 1, 576, 704, 832, 960, DOT, SCALE, S) \
	ADDQ $(32*S), DI \
	Q6END(MIN, EPIS, S)

// Q6END(MIN, EPIS, S): a Q6_K super-block's minimum terms and float updates, after its pieces.
#define Q6END(MIN, EPIS, S) \
	ZERO8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7) \
	MIN(1024, 0); MIN(1088, S); MIN(1152, 2*S); MIN(1216, 3*S); MIN(1280, 4*S); MIN(1344, 5*S); MIN(1408, 6*S); MIN(1472, 7*S) \
	EPIS(1536, 8*S)

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

// The panel kernels (panels.go): the transposing kernels' products over a matrix packed in 16-row panels, whose
// super-blocks hold what those kernels build in registers, in the order they build it: the codes
// (per super-block: Q4_K's four 32-byte groups, each eight registers of the 16 rows' dwords; Q6_K's four pieces,
// each ql's two and qh's one T4 registers) at SI, the rows' meta at R9 (per super-block: Q4_K's 16-byte headers
// as four registers of dwords; Q6_K's scales as four, then d as 16 float16). No transposition: a register is
// one load. Same macros, same bits (TestPanelsMatchRows).

// PENTRY: the arguments of a panel kernel into their registers, Z16-Z23 zeroed, Z26 0x0f bytes.
#define PENTRY \
	MOVQ blocks+0(FP), SI; MOVQ side+8(FP), R9; MOVQ meta+16(FP), BX; MOVQ qs+24(FP), DI \
	MOVQ ameta+32(FP), R13; MOVQ nsb+40(FP), CX; MOVQ acc+48(FP), AX; MOVQ pf+56(FP), DX \
	ZERO8(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23) \
	VPBROADCASTD trnib<>(SB), Z26

// PKERNEL(lbl, SB): a panel kernel's body.
#define PKERNEL(lbl, SB) \
	PENTRY \
	lbl: SB; DECQ CX; JNZ lbl \
	VZEROUPPER; RET

// PLOAD4(off, d0, d1, d2, d3): four registers of the super-block at off(SI).
#define PLOAD4(off, d0, d1, d2, d3) \
	VMOVDQU32 off(SI), d0; VMOVDQU32 off+64(SI), d1; VMOVDQU32 off+128(SI), d2; VMOVDQU32 off+192(SI), d3

// PQ4GROUPS(lbl, DA, DB, DC, DD, SCALE, S): Q4GROUPS over a panel's super-block, each group's eight registers
// loaded (group g at 256 + 512g).
#define PQ4GROUPS(lbl, DA, DB, DC, DD, SCALE, S) \
	MOVQ $4, R15 \
	lbl: PLOAD4(256, Z0, Z1, Z2, Z3); PLOAD4(512, Z4, Z5, Z6, Z7); ZERO8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15) \
	Q4QUADS(DA, DB, DC, DD, SCALE, S) \
	ADDQ $512, SI; ADDQ $128, BX; DECQ R15; JNZ lbl \
	SUBQ $2048, SI; SUBQ $512, BX

// PQ4OWN: Q4OWN with the headers' four registers loaded (K4META's TRANS4).
#define PQ4OWN \
	K4CONSTS \
	VMOVDQU32 0(SI), Z0; VMOVDQU32 64(SI), Z1; VMOVDQU32 128(SI), Z2; VMOVDQU32 192(SI), Z3 \
	K4SCALES(0, 0, Z8, Z12, BX); K4SCALES(8, 64, Z9, Z13, BX); K4SCALES(16, 128, Z10, Z14, BX); K4SCALES(24, 192, Z11, Z15, BX) \
	MINPAIR(Z8, Z9, 512, BX); MINPAIR(Z10, Z11, 576, BX); MINPAIR(Z12, Z13, 640, BX); MINPAIR(Z14, Z15, 704, BX) \
	HALVES(Z0, Z4, Z5); VMOVUPS Z4, 768(BX); VMOVUPS Z5, 832(BX) \
	ZERO8(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23); VPBROADCASTD trnib<>(SB), Z26

// PQ4SB(lbl, DOT, SCALE, MIN, EPIS, S): Q4SB over a panel's super-block (256 bytes of meta, 2048 of codes).
#define PQ4SB(lbl, DOT, SCALE, MIN, EPIS, S) PQ4SBM(lbl, DOT, SCALE, MIN, EPIS, S, PQ4OWN, 0)

// PQ4SBM(lbl, DOT, SCALE, MIN, EPIS, S, META, MSTEP): PQ4SB with the meta built (PQ4OWN) or not (NOMETA: built by
// an earlier call), at BX, which moves on MSTEP bytes a super-block (896: the panel's meta kept for the next
// calls).
#define PQ4SBM(lbl, DOT, SCALE, MIN, EPIS, S, META, MSTEP) \
	META \
	PQ4GROUPS(lbl, DOT, DOT, DOT, DOT, SCALE, S) \
	Q4END(MIN, EPIS, S) \
	ADDQ $2304, SI; ADDQ $(5*S), R13; ADDQ $MSTEP, BX

// One input (a decode step's product): a sub-block's quads go to four accumulators in turn, Z8-Z11 (DOT1A ..
// DOT1D), whose sum SCALE1 takes (one chain of dependent VPDPBUSD a sub-block ran 10% slower than the
// four-input kernel), the sums in Z16, the minimum terms in Z0. Integer sums: the same bits in any order.
#define DOT1A(z, off) VPDPBUSD.BCST off+0(DI), z, Z8
#define DOT1B(z, off) VPDPBUSD.BCST off+0(DI), z, Z9
#define DOT1C(z, off) VPDPBUSD.BCST off+0(DI), z, Z10
#define DOT1D(z, off) VPDPBUSD.BCST off+0(DI), z, Z11
#define SCALE1(zsc, off) \
	VPADDD Z9, Z8, Z8; VPADDD Z11, Z10, Z10; VPADDD Z10, Z8, Z8; VPXORD Z9, Z9, Z9; VPXORD Z10, Z10, Z10; VPXORD Z11, Z11, Z11 \
	VMOVDQU32 off(BX), zsc; SC(Z8, Z16, zsc)
#define MIN1(off, a) VMOVDQU32 off(BX), Z25; VPDPWSSD.BCST a+0(R13), Z25, Z0
#define EPIS1(d, dx) VMOVUPS d(BX), Z24; VMOVUPS d+64(BX), Z25; EPI(Z0, Z16, dx, 0)

// PQ4SB1(lbl): PQ4SB for one input.
#define PQ4SB1(lbl) \
	PQ4OWN \
	PQ4GROUPS(lbl, DOT1A, DOT1B, DOT1C, DOT1D, SCALE1, 4) \
	Q4END(MIN1, EPIS1, 4) \
	ADDQ $2304, SI; ADDQ $20, R13

// func panelsQ4_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// tiledRowsQ4_KVNNI over a Q4_K panel (panels.go), 8 inputs.
TEXT ·panelsQ4_KVNNI(SB), NOSPLIT, $0-64
	PKERNEL(pq4sb8, PQ4SB(pq4g8, DOT8, SCALE8, MIN8, EPIS8, 32))

// func panelsBuildQ4_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// panelsQ4_KVNNI keeping the panel's meta at meta (896 bytes a super-block), for the calls after it.
TEXT ·panelsBuildQ4_KVNNI(SB), NOSPLIT, $0-64
	PKERNEL(pq4sb8b, PQ4SBM(pq4g8b, DOT8, SCALE8, MIN8, EPIS8, 32, PQ4OWN, 896))

// func panelsKeptQ4_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// panelsQ4_KVNNI with the panel's meta at meta, as panelsBuildQ4_KVNNI left it.
TEXT ·panelsKeptQ4_KVNNI(SB), NOSPLIT, $0-64
	PKERNEL(pq4sb8k, PQ4SBM(pq4g8k, DOT8, SCALE8, MIN8, EPIS8, 32, NOMETA, 896))

// func panels4Q4_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// panelsQ4_KVNNI for 4 inputs.
TEXT ·panels4Q4_KVNNI(SB), NOSPLIT, $0-64
	PKERNEL(pq4sb4, PQ4SB(pq4g4, DOT4, SCALE4, MIN4, EPIS4, 16))

// func panels1Q4_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// panelsQ4_KVNNI for one input.
TEXT ·panels1Q4_KVNNI(SB), NOSPLIT, $0-64
	PKERNEL(pq4sb1, PQ4SB1(pq4g1))

// PQ6PIECE(n, h, sc0, sc1, sc2, sc3, DOT, SCALE, S): Q6PIECE with piece 2n + h's twelve registers loaded.
#define PQ6PIECE(n, h, sc0, sc1, sc2, sc3, DOT, SCALE, S) PQ6PIECEX(n, h, sc0, sc1, sc2, sc3, DOT, DOT, DOT, DOT, SCALE, S)

// PQ6PIECE1(n, h, sc0, sc1, sc2, sc3, DOT, SCALE, S): PQ6PIECE for one input (DOT, SCALE and S: its own).
#define PQ6PIECE1(n, h, sc0, sc1, sc2, sc3, DOT, SCALE, S) PQ6PIECEX(n, h, sc0, sc1, sc2, sc3, DOT1A, DOT1B, DOT1C, DOT1D, SCALE1, 4)

// PQ6PIECEX(n, h, sc0, sc1, sc2, sc3, DA, DB, DC, DD, SCALE, S): PQ6PIECE, its quads by DA .. DD in turn.
#define PQ6PIECEX(n, h, sc0, sc1, sc2, sc3, DA, DB, DC, DD, SCALE, S) \
	PLOAD4(256+768*(2*n+h), Z0, Z1, Z2, Z3); PLOAD4(512+768*(2*n+h), Z4, Z5, Z6, Z7); PLOAD4(768+768*(2*n+h), Z24, Z25, Z26, Z27) \
	ZERO8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15) \
	Q6JX(Q6J0, Z0, Z1, Z2, Z3, h, 0, sc0, DA, DB, DC, DD, SCALE, S) \
	PF4(0) \
	Q6JX(Q6J1, Z4, Z5, Z6, Z7, h, 1, sc1, DA, DB, DC, DD, SCALE, S) \
	PF4(256) \
	Q6JX(Q6J2, Z0, Z1, Z2, Z3, h, 2, sc2, DA, DB, DC, DD, SCALE, S) \
	PF3(512) \
	Q6JX(Q6J3, Z4, Z5, Z6, Z7, h, 3, sc3, DA, DB, DC, DD, SCALE, S) \
	PF3(704) \
	ADDQ $840, DX

// PQ6OWN: Q6OWN with the scales' four registers loaded (Q6META's first TRANS4) and d from the side part's 16
// float16 (its second).
#define PQ6OWN \
	MOVL $0xffff, R14; VPBROADCASTD R14, Z24 \
	VMOVDQU32 0(SI), Z0; VMOVDQU32 64(SI), Z1; VMOVDQU32 128(SI), Z2; VMOVDQU32 192(SI), Z3 \
	Q6SCALES(Z0, 0, BX); Q6PAIRS(1024, BX); Q6SCALES(Z1, 256, BX); Q6PAIRS(1152, BX) \
	Q6SCALES(Z2, 512, BX); Q6PAIRS(1280, BX); Q6SCALES(Z3, 768, BX); Q6PAIRS(1408, BX) \
	VCVTPH2PS 0(R9), Z6; VMOVUPS Z6, 1536(BX); VMOVUPS Z6, 1600(BX) \
	ZERO8(Z16, Z17, Z18, Z19, Z20, Z21, Z22, Z23)

// PQ6BODY(lbl, PIECE, DOT, SCALE, MIN, EPIS, S): Q6BODY over a panel's super-block, its two halves in a loop
// (label lbl, R15 its count): a half's pieces are 1536 bytes on, its scales 512 (as Q4GROUPS, the copies ran a
// one-input product from memory ~4% slower).
#define PQ6BODY(lbl, PIECE, DOT, SCALE, MIN, EPIS, S) \
	MOVQ $2, R15 \
	lbl: PIECE(0, 0, 0, 128, 256, 384, DOT, SCALE, S); PIECE(0, 1, 64, 192, 320, 448, DOT, SCALE, S) \
	ADDQ $(32*S), DI; ADDQ $1536, SI; ADDQ $512, BX; DECQ R15; JNZ lbl \
	SUBQ $3072, SI; SUBQ $1024, BX \
	Q6END(MIN, EPIS, S)

// PQ6SB(lbl, DOT, SCALE, MIN, EPIS, S): Q6SB over a panel's super-block (256 bytes of meta, 3072 of codes; d in
// the side part).
#define PQ6SB(lbl, DOT, SCALE, MIN, EPIS, S) \
	PQ6OWN \
	PQ6BODY(lbl, PQ6PIECE, DOT, SCALE, MIN, EPIS, S) \
	ADDQ $3328, SI; ADDQ $32, R9; ADDQ $(9*S), R13

// func panelsQ6_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// tiledRowsQ6_KVNNI over a Q6_K panel (panels.go), 8 inputs.
TEXT ·panelsQ6_KVNNI(SB), NOSPLIT, $0-64
	PKERNEL(pq6sb8, PQ6SB(pq6h8, DOT8, SCALE8, MIN8, EPIS8, 32))

// func panels4Q6_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// panelsQ6_KVNNI for 4 inputs.
TEXT ·panels4Q6_KVNNI(SB), NOSPLIT, $0-64
	PKERNEL(pq6sb4, PQ6SB(pq6h4, DOT4, SCALE4, MIN4, EPIS4, 16))

// PQ6SB1(lbl): PQ6SB for one input.
#define PQ6SB1(lbl) \
	PQ6OWN \
	PQ6BODY(lbl, PQ6PIECE1, DOT1A, SCALE1, MIN1, EPIS1, 4) \
	ADDQ $3328, SI; ADDQ $32, R9; ADDQ $36, R13

// func panels1Q6_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)
// panelsQ6_KVNNI for one input.
TEXT ·panels1Q6_KVNNI(SB), NOSPLIT, $0-64
	PKERNEL(pq6sb1, PQ6SB1(pq6h1))

// The one-input kernels over panels in a row (panelsRun1*): panels panels from data (pb bytes each, nsb
// super-blocks), each one's 16 outputs added to y (zeroed by the caller; the next panel's 16 floats after): a
// decode step's product in one call a worker, as the rows kernels make it (a call a panel cost ~10% of it from
// memory).

// func panelsRun1Q4_KVNNI(data *byte, panels, nsb, pb int, meta, qs, ameta *byte, y *float32)
// PQ4SB1 over the panels.
TEXT ·panelsRun1Q4_KVNNI(SB), NOSPLIT, $0-64
	RUN1ENTRY

rq4panel:
	MOVQ R8, SI // no side part

rq4ready:
	LEAQ 8192(R8), DX // prefetches: 8 KiB ahead in the stream of panels (past the end too: prefetches never fault)
	MOVQ R11, CX; MOVQ qs+40(FP), DI; MOVQ ameta+48(FP), R13

rq4sb:
	PQ4SB1(rq4g)
	RUN1NEXT(rq4sb, rq4panel)

// func panelsRun1Q6_KVNNI(data *byte, panels, nsb, pb int, meta, qs, ameta *byte, y *float32)
// PQ6SB1 over the panels.
TEXT ·panelsRun1Q6_KVNNI(SB), NOSPLIT, $0-64
	RUN1ENTRY

rq6panel:
	MOVQ R8, SI; MOVQ R8, R9
	TESTQ $63, R8
	JNZ  rq6side
	IMUL3Q $3328, R11, R14
	ADDQ R14, R9 // the super-blocks first, the side part after them (panelFormat.split)
	JMP  rq6ready

rq6side:
	IMUL3Q $32, R11, R14
	ADDQ R14, SI // the side part first

rq6ready:
	LEAQ 8192(R8), DX // prefetches: 8 KiB ahead in the stream of panels (past the end too: prefetches never fault)
	MOVQ R11, CX; MOVQ qs+40(FP), DI; MOVQ ameta+48(FP), R13
	IMUL3Q $3328, R11, R15 // and the next panel's side part, where it ends the panel: it is read with the
	ADDQ R8, R15           // panel's first super-block, a panel (~20 KiB) past what the stream has prefetched
	ADDQ R12, R15
	PREFETCHT0 0(R15); PREFETCHT0 64(R15); PREFETCHT0 128(R15); PREFETCHT0 191(R15)

rq6sb:
	PQ6SB1(rq6h)
	RUN1NEXT(rq6sb, rq6panel)

// A prompt's product over a Q6_K matrix in panels takes the tiled kernels (panelFormat.tiledFrom), whose tiles
// hold each super-block's codes whole (6 bits a byte: quad q of the 16 rows at q·64) and its meta
// (unpackQ6_KScales' layout): panelsTiledQ6_K writes both from a panel, as the panel kernels build them on the
// way to their products, instead of unpacking the panel back into rows first (moveDwords, in Go: 12% more on a
// 512-row product than a matrix in rows).
#define STQ(z, off) VMOVDQU32 z, off(DI)
#define NOSCALE(zsc, off)
#define NOMIN(off, a)
#define NOEPIS(d, dx)

// func panelsTiledQ6_K(blocks, side, codes, meta *byte, nsb int)
TEXT ·panelsTiledQ6_K(SB), NOSPLIT, $0-40
	MOVQ blocks+0(FP), SI; MOVQ side+8(FP), R9; MOVQ codes+16(FP), DI; MOVQ meta+24(FP), BX; MOVQ nsb+32(FP), CX
	LEAQ 8192(SI), DX

ptq6sb:
	PQ6OWN
	PQ6BODY(ptq6h, PQ6PIECE, STQ, NOSCALE, NOMIN, NOEPIS, 64)
	ADDQ $3328, SI; ADDQ $32, R9; ADDQ $1664, BX
	DECQ CX
	JNZ  ptq6sb
	VZEROUPPER
	RET
