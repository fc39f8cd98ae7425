#include "textflag.h"

// CRC-32C by carry-less multiplication (Intel, "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"),
// on AVX-512: four 512-bit accumulators, each folded forward by 2048 bits per 256 bytes read, then folded into
// one another, their 128-bit lanes into the last, and that last 16-byte remainder through the CRC32
// instruction. The constants are x^(D±32) mod P for the Castagnoli polynomial, bit-reflected and shifted by one
// (crcFoldConst in crc_test.go derives them): for a fold by D bits, the low qword multiplies by x^(D+32), the
// high one by x^(D-32).
DATA k2048<>+0(SB)/8, $0xdcb17aa4
DATA k2048<>+8(SB)/8, $0xb9e02b86
DATA k512<>+0(SB)/8, $0x740eef02
DATA k512<>+8(SB)/8, $0x9e4addf8
DATA k128<>+0(SB)/8, $0xf20c0dfe
DATA k128<>+8(SB)/8, $0x14cd00bd6
GLOBL k2048<>(SB), RODATA|NOPTR, $16
GLOBL k512<>(SB), RODATA|NOPTR, $16
GLOBL k128<>(SB), RODATA|NOPTR, $16

// FOLD folds accumulator A forward by the constants in K into B, XORed with X: B = clmul(A.lo, K.lo) ^
// clmul(A.hi, K.hi) ^ X, per 128-bit lane (T is scratch).
#define FOLD(K, A, X, B, T) \
	VPCLMULQDQ $0x11, K, A, T; \
	VPCLMULQDQ $0x00, K, A, A; \
	VPTERNLOGD $0x96, X, T, A; \
	VMOVDQA64 A, B

// func crc32cFold(crc uint32, p *byte, n int) uint32
// The CRC-32C register (not inverted) after n bytes at p, from register crc; n is a multiple of 256, ≥ 256.
TEXT ·crc32cFold(SB), NOSPLIT, $0-28
	MOVL crc+0(FP), AX
	MOVQ p+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVDQU64 (SI), Z1
	VMOVDQU64 64(SI), Z2
	VMOVDQU64 128(SI), Z3
	VMOVDQU64 192(SI), Z4
	VMOVD AX, X10
	VPXORQ Z10, Z1, Z1
	ADDQ $256, SI
	SUBQ $256, CX
	VBROADCASTI32X4 k2048<>(SB), Z0

loop:
	CMPQ CX, $256
	JB   fold
	FOLD(Z0, Z1, (SI), Z1, Z5)
	FOLD(Z0, Z2, 64(SI), Z2, Z6)
	FOLD(Z0, Z3, 128(SI), Z3, Z7)
	FOLD(Z0, Z4, 192(SI), Z4, Z8)
	ADDQ $256, SI
	SUBQ $256, CX
	JMP  loop

fold:
	VBROADCASTI32X4 k512<>(SB), Z0
	FOLD(Z0, Z1, Z2, Z2, Z5)
	FOLD(Z0, Z2, Z3, Z3, Z5)
	FOLD(Z0, Z3, Z4, Z4, Z5)
	VMOVDQU64 k128<>(SB), X0
	VEXTRACTI32X4 $1, Z4, X2
	VEXTRACTI32X4 $2, Z4, X3
	VEXTRACTI32X4 $3, Z4, X6
	FOLD(X0, X4, X2, X2, X5)
	FOLD(X0, X2, X3, X3, X5)
	FOLD(X0, X3, X6, X6, X5)
	VMOVQ X6, AX
	VPEXTRQ $1, X6, BX
	XORL DX, DX
	CRC32Q AX, DX
	CRC32Q BX, DX
	MOVL DX, ret+24(FP)
	VZEROUPPER
	RET
