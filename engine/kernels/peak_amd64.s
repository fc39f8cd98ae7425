#include "textflag.h"

// Throughput loops for BenchmarkVPDPBUSDPeak (peak_amd64_test.go): the bound of the rows and tiled kernels.

// ZERO16: Z0-Z15 = 0.
#define ZERO16 \
	VPXORD Z0, Z0, Z0; VPXORD Z1, Z1, Z1; VPXORD Z2, Z2, Z2; VPXORD Z3, Z3, Z3; VPXORD Z4, Z4, Z4; VPXORD Z5, Z5, Z5; VPXORD Z6, Z6, Z6; VPXORD Z7, Z7, Z7 \
	VPXORD Z8, Z8, Z8; VPXORD Z9, Z9, Z9; VPXORD Z10, Z10, Z10; VPXORD Z11, Z11, Z11; VPXORD Z12, Z12, Z12; VPXORD Z13, Z13, Z13; VPXORD Z14, Z14, Z14; VPXORD Z15, Z15, Z15

// BCST8(a, b, c, d, e, f, g, h, off): eight VPDPBUSD of Z16 with the four bytes broadcast from off(DI) + 4i into
// the eight registers.
#define BCST8(a, b, c, d, e, f, g, h, off) \
	VPDPBUSD.BCST off+0(DI), Z16, a; VPDPBUSD.BCST off+4(DI), Z16, b; VPDPBUSD.BCST off+8(DI), Z16, c; VPDPBUSD.BCST off+12(DI), Z16, d \
	VPDPBUSD.BCST off+16(DI), Z16, e; VPDPBUSD.BCST off+20(DI), Z16, f; VPDPBUSD.BCST off+24(DI), Z16, g; VPDPBUSD.BCST off+28(DI), Z16, h

// func peakVPDPBUSD(n int)
// n iterations of 16 VPDPBUSD zmm into 16 independent accumulators.
TEXT ·peakVPDPBUSD(SB), NOSPLIT, $0-8
	MOVQ n+0(FP), CX
	ZERO16
	VPTERNLOGD $0xff, Z16, Z16, Z16
	VPTERNLOGD $0xff, Z17, Z17, Z17

loop:
	VPDPBUSD Z16, Z17, Z0
	VPDPBUSD Z16, Z17, Z1
	VPDPBUSD Z16, Z17, Z2
	VPDPBUSD Z16, Z17, Z3
	VPDPBUSD Z16, Z17, Z4
	VPDPBUSD Z16, Z17, Z5
	VPDPBUSD Z16, Z17, Z6
	VPDPBUSD Z16, Z17, Z7
	VPDPBUSD Z16, Z17, Z8
	VPDPBUSD Z16, Z17, Z9
	VPDPBUSD Z16, Z17, Z10
	VPDPBUSD Z16, Z17, Z11
	VPDPBUSD Z16, Z17, Z12
	VPDPBUSD Z16, Z17, Z13
	VPDPBUSD Z16, Z17, Z14
	VPDPBUSD Z16, Z17, Z15
	DECQ CX
	JNZ  loop
	VZEROUPPER
	RET

// func peakVPDPBUSDBcst(n int, x *byte, eight bool)
// As peakVPDPBUSD with the tiled kernel's operand form: the input's four bytes broadcast from memory; with eight,
// into 8 accumulators (the transposing kernels' count: each takes every eighth instruction).
TEXT ·peakVPDPBUSDBcst(SB), NOSPLIT, $0-17
	MOVQ n+0(FP), CX
	MOVQ x+8(FP), DI
	MOVBQZX eight+16(FP), AX
	ZERO16
	VPTERNLOGD $0xff, Z16, Z16, Z16
	TESTQ AX, AX
	JNZ  bcst8

bcst16:
	BCST8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, 0)
	BCST8(Z8, Z9, Z10, Z11, Z12, Z13, Z14, Z15, 32)
	DECQ CX
	JNZ  bcst16
	VZEROUPPER
	RET

bcst8:
	BCST8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, 0)
	BCST8(Z0, Z1, Z2, Z3, Z4, Z5, Z6, Z7, 32)
	DECQ CX
	JNZ  bcst8
	VZEROUPPER
	RET

// func peakGather(n int, src *byte, stride int)
// n iterations of 8 VPGATHERDD zmm of 16 dwords, one per row at src + r·stride (the tiled layout's transpose by
// gathers).
TEXT ·peakGather(SB), NOSPLIT, $0-24
	MOVQ n+0(FP), CX
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), AX
	VPBROADCASTD AX, Z20
	VPMULLD peakrows<>(SB), Z20, Z20

loop:
	KXNORW K1, K1, K1
	VPGATHERDD 0(SI)(Z20*1), K1, Z0
	KXNORW K2, K2, K2
	VPGATHERDD 4(SI)(Z20*1), K2, Z1
	KXNORW K3, K3, K3
	VPGATHERDD 8(SI)(Z20*1), K3, Z2
	KXNORW K4, K4, K4
	VPGATHERDD 12(SI)(Z20*1), K4, Z3
	KXNORW K1, K1, K1
	VPGATHERDD 16(SI)(Z20*1), K1, Z4
	KXNORW K2, K2, K2
	VPGATHERDD 20(SI)(Z20*1), K2, Z5
	KXNORW K3, K3, K3
	VPGATHERDD 24(SI)(Z20*1), K3, Z6
	KXNORW K4, K4, K4
	VPGATHERDD 28(SI)(Z20*1), K4, Z7
	DECQ CX
	JNZ  loop
	VZEROUPPER
	RET

// func peakClock(n int)
// n iterations of 16 dependent ADDQ (one cycle each): n·16 cycles.
TEXT ·peakClock(SB), NOSPLIT, $0-8
	MOVQ n+0(FP), CX
	XORQ AX, AX

loop:
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	ADDQ $1, AX
	DECQ CX
	JNZ  loop
	RET

DATA peakrows<>+0(SB)/4, $0
DATA peakrows<>+4(SB)/4, $1
DATA peakrows<>+8(SB)/4, $2
DATA peakrows<>+12(SB)/4, $3
DATA peakrows<>+16(SB)/4, $4
DATA peakrows<>+20(SB)/4, $5
DATA peakrows<>+24(SB)/4, $6
DATA peakrows<>+28(SB)/4, $7
DATA peakrows<>+32(SB)/4, $8
DATA peakrows<>+36(SB)/4, $9
DATA peakrows<>+40(SB)/4, $10
DATA peakrows<>+44(SB)/4, $11
DATA peakrows<>+48(SB)/4, $12
DATA peakrows<>+52(SB)/4, $13
DATA peakrows<>+56(SB)/4, $14
DATA peakrows<>+60(SB)/4, $15
GLOBL peakrows<>(SB), RODATA|NOPTR, $64
