#include "textflag.h"

// The codebook i-quants' kernels (grid.go): per format, a row kernel (gridRow*: gridDot of a row) and a tiled-
// prompt unpacker (gridUnpack*), both decoding each super-block in registers as llama.cpp's AVX2 kernels do. A
// format's macro (IQ2XXS...) decodes 32 weights: their grid points gathered into Y1 by their indices (unsigned
// values; IQ1's signed codes from quant.IQ1Codes), their signs into Y2 as ±1 bytes (from the table ksignPM for 7
// stored bits and their parity, spread in registers from 8 stored bits), and the 16-bit scales of their two
// sixteenths into Y5. DOT32 then applies the signs to the activations (VPSIGNB) and adds VPMADDUBSW's pairs times
// the scales (VPMADDWD) into Y0: per super-block, isum = Σ_s sc[s]·Σ q·x, the integer gridIntsGo computes from
// quant.GridInts; PSTORE writes the signed codes plus 128 into a tiled panel instead.
//
// Registers: DI the super-block, SI the activations (the panel), R8 the grid, R9 ksignPM, Y0 the int32 sums.

// DOT32(ib): the 32 unsigned grid values in Y1 with the signs in Y2 (±1 bytes) against the activations of step ib
// at 32·ib(SI), times the scales in Y5 (low lane: the first sixteenth, high lane: the second), into Y0.
#define DOT32(ib) \
	VMOVDQU (32*ib)(SI), Y3; VPSIGNB Y2, Y3, Y3; VPMADDUBSW Y3, Y1, Y4; VPMADDWD Y5, Y4, Y4; VPADDD Y4, Y0, Y0

// SDOT32(ib): DOT32 for the signed codes in Y1 (IQ1's, never 0): |q| against x with q's signs.
#define SDOT32(ib) \
	VMOVDQU (32*ib)(SI), Y3; VPSIGNB Y1, Y3, Y3; VPABSB Y1, Y1; VPMADDUBSW Y3, Y1, Y4; VPMADDWD Y5, Y4, Y4; VPADDD Y4, Y0, Y0

// SCALE1(r): Y5 = the 16-bit value 2·r+1 in every word (r is clobbered).
#define SCALE1(r) \
	LEAL 1(r)(r*1), r; VMOVD r, X5; VPBROADCASTW X5, Y5

// SCALES2(r): the byte r's low nibble n as 2n+1 for the first sixteenth, its high nibble for the second.
#define SCALES2(r) \
	MOVL r, R10; ANDL $15, R10; LEAL 1(R10)(R10*1), R10; SHRL $4, r; LEAL 1(r)(r*1), r; \
	VMOVD R10, X5; VPBROADCASTW X5, X5; VMOVD r, X6; VPBROADCASTW X6, X6; VINSERTI128 $1, X6, Y5, Y5

// KSIGNS(r): Y2 = the ±1 bytes of the four 7-bit sign groups in r's low 28 bits (ksignPM in R9).
#define KSIGNS(r) \
	MOVL r, R10; ANDL $127, R10; VMOVQ (R9)(R10*8), X2; \
	MOVL r, R10; SHRL $7, R10; ANDL $127, R10; VPINSRQ $1, (R9)(R10*8), X2, X2; \
	MOVL r, R10; SHRL $14, R10; ANDL $127, R10; VMOVQ (R9)(R10*8), X3; \
	MOVL r, R10; SHRL $21, R10; ANDL $127, R10; VPINSRQ $1, (R9)(R10*8), X3, X3; \
	VINSERTI128 $1, X3, Y2, Y2

// Constants for SIGNSV (with quant_amd64.s's ·bitSpread: byte k of a dword spread over bytes 8k..8k+7, per 128-bit
// lane bytes 0, 1 low, 2, 3 high): each byte's bit, and +1.
DATA gridSignBits<>+0(SB)/8, $0x8040201008040201
GLOBL gridSignBits<>(SB), RODATA|NOPTR, $8
DATA gridOnes<>+0(SB)/4, $0x01010101
GLOBL gridOnes<>(SB), RODATA|NOPTR, $4

// SIGNSV(off): Y2 = the ±1 bytes of the four sign bytes at off(DI), in vector registers (Y12 ·bitSpread,
// Y11 gridSignBits, Y10 ones; SIGNSVINIT loads them).
#define SIGNSV(off) \
	VPBROADCASTD off(DI), Y2; VPSHUFB Y12, Y2, Y2; VPAND Y11, Y2, Y2; VPCMPEQB Y11, Y2, Y2; VPOR Y10, Y2, Y2

#define SIGNSVINIT \
	VMOVDQU ·bitSpread(SB), Y12; VPBROADCASTQ gridSignBits<>(SB), Y11; VPBROADCASTD gridOnes<>(SB), Y10

DATA gridEighth<>+0(SB)/4, $0x3e000000
GLOBL gridEighth<>(SB), RODATA|NOPTR, $4
DATA gridQuarter<>+0(SB)/4, $0x3e800000
GLOBL gridQuarter<>(SB), RODATA|NOPTR, $4

// ROWARGS(grid): DI the row, SI the activations, DX their Q8_K scales, CX the super-blocks, R8 the grid, R9
// ksignPM, X15 the row's float sum.
#define ROWARGS(grid) \
	MOVQ w+0(FP), DI; MOVQ x+8(FP), SI; MOVQ xd+16(FP), DX; MOVQ nb+24(FP), CX; \
	LEAQ grid(SB), R8; LEAQ ·ksignPM(SB), R9; VXORPS X15, X15, X15; VPXOR Y0, Y0, Y0

DATA gridCode128<>+0(SB)/4, $0x80808080
GLOBL gridCode128<>(SB), RODATA|NOPTR, $4

// UNPARGS(grid): DI the super-block, SI the row's codes in a tiled panel, R13 the scale vectors out, R8 the grid,
// R9 ksignPM, Y9 0x80 bytes.
#define UNPARGS(grid) \
	MOVQ b+0(FP), DI; MOVQ codes+8(FP), SI; MOVQ scv+16(FP), R13; LEAQ grid(SB), R8; LEAQ ·ksignPM(SB), R9; \
	VPBROADCASTD gridCode128<>(SB), Y9

// PSTORE(ib): the 32 grid values in Y1 with the signs in Y2 applied, plus 128, as the tiled codes of quads
// 8·ib..8·ib+7 (quad i at i·64(SI): tiled.go's codeDst), and the scale vector Y5 to 32·ib(R13). SPSTORE: the
// signed codes in Y1 (IQ1's) as they are.
#define PSTORE(ib) VPSIGNB Y2, Y1, Y1; SPSTORE(ib)

// QSTORE(ib): the 32 grid values in Y1 with the signs in Y2 applied, as signed codes to 32·ib(SI), and the scale
// vector Y5 to 32·ib(R13): a decoded super-block for gridIntsAVX2. SQSTORE: the signed codes in Y1 as they are.
#define QSTORE(ib) VPSIGNB Y2, Y1, Y1; SQSTORE(ib)
#define SQSTORE(ib) VMOVDQU Y1, (32*ib)(SI); VMOVDQU Y5, (32*ib)(R13)
#define SPSTORE(ib) \
	VPXOR Y9, Y1, Y1; VMOVDQU Y5, (32*ib)(R13); \
	VMOVD X1, (512*ib)(SI); VPEXTRD $1, X1, (512*ib+64)(SI); VPEXTRD $2, X1, (512*ib+128)(SI); VPEXTRD $3, X1, (512*ib+192)(SI); \
	VEXTRACTI128 $1, Y1, X1; \
	VMOVD X1, (512*ib+256)(SI); VPEXTRD $1, X1, (512*ib+320)(SI); VPEXTRD $2, X1, (512*ib+384)(SI); VPEXTRD $3, X1, (512*ib+448)(SI)

// HALFD(off): X4 = the float16 at off(DI) as a float32.
#define HALFD(off) MOVWLZX off(DI), AX; VMOVD AX, X4; VCVTPH2PS X4, X4

// IQ1MD: X4 = IQ1_M's float16 d, the top nibbles of its four scale words at 48.
#define IQ1MD \
	MOVBLZX 49(DI), AX; SHRL $4, AX; MOVBLZX 51(DI), BX; ANDL $0xf0, BX; ORL BX, AX; \
	MOVBLZX 53(DI), BX; SHRL $4, BX; SHLL $8, BX; ORL BX, AX; MOVBLZX 55(DI), BX; ANDL $0xf0, BX; SHLL $8, BX; ORL BX, AX; \
	VMOVD AX, X4; VCVTPH2PS X4, X4

// HSUMI: AX = the sum of Y0's eight int32 lanes (X1 is scratch).
#define HSUMI \
	VEXTRACTI128 $1, Y0, X1; VPADDD X1, X0, X0; VPSHUFD $0x4e, X0, X1; VPADDD X1, X0, X0; \
	VPSHUFD $0xb1, X0, X1; VPADDD X1, X0, X0; VMOVD X0, AX

// NEXT(size): the super-block's float update, X15 += float32(d·dx)·float32(isum) with d in X4 (gridDot's
// operations in its order: no fused ones), then on to the next super-block of size bytes, looping to
// the label block while super-blocks are left.
#define NEXT(size) \
	HSUMI; VCVTSI2SSL AX, X3, X3; \
	VMULSS (DX), X4, X4; VMULSS X3, X4, X4; VADDSS X4, X15, X15; VPXOR Y0, Y0, Y0; \
	ADDQ $size, DI; ADDQ $256, SI; ADDQ $4, DX; DECQ CX; JNZ block

// IQ2_XXS: per 32 weights, four grid index bytes at q and a uint32 at a: four 7-bit sign groups and the scale.
#define IQ2XXS(q, a) \
	MOVL q(DI), AX; MOVL a(DI), BX; \
	MOVL AX, R10; ANDL $0xff, R10; VMOVQ (R8)(R10*8), X1; \
	MOVL AX, R10; SHRL $8, R10; ANDL $0xff, R10; VPINSRQ $1, (R8)(R10*8), X1, X1; \
	MOVL AX, R10; SHRL $16, R10; ANDL $0xff, R10; VMOVQ (R8)(R10*8), X2; \
	SHRL $24, AX; VPINSRQ $1, (R8)(AX*8), X2, X2; \
	VINSERTI128 $1, X2, Y1, Y1; \
	KSIGNS(BX); SHRL $28, BX; SCALE1(BX)

// IQ2XXS_ALL(T): the super-block's eight steps, each followed by T(ib).
#define IQ2XXS_ALL(T) \
	IQ2XXS(2, 6); T(0); IQ2XXS(10, 14); T(1); IQ2XXS(18, 22); T(2); IQ2XXS(26, 30); T(3); \
	IQ2XXS(34, 38); T(4); IQ2XXS(42, 46); T(5); IQ2XXS(50, 54); T(6); IQ2XXS(58, 62); T(7)

// func gridRowIQ2XXS(w *byte, x *int8, xd *float32, nb int) float32
TEXT ·gridRowIQ2XXS(SB), NOSPLIT, $0-36
	ROWARGS(·iq2xxsGrid)

block:
	IQ2XXS_ALL(DOT32)
	HALFD(0); VMULSS gridEighth<>(SB), X4, X4
	NEXT(66)
	VZEROUPPER; MOVSS X15, ret+32(FP); RET

// IQ2_XS: per 32 weights, four uint16 at q (a 9-bit grid index, 7 sign bits) and the scales byte at s.
#define IQ2XS(q, s) \
	MOVQ q(DI), AX; \
	MOVL AX, R10; ANDL $511, R10; VMOVQ (R8)(R10*8), X1; \
	MOVQ AX, R10; SHRQ $16, R10; ANDL $511, R10; VPINSRQ $1, (R8)(R10*8), X1, X1; \
	MOVQ AX, R10; SHRQ $32, R10; ANDL $511, R10; VMOVQ (R8)(R10*8), X2; \
	MOVQ AX, R10; SHRQ $48, R10; ANDL $511, R10; VPINSRQ $1, (R8)(R10*8), X2, X2; \
	VINSERTI128 $1, X2, Y1, Y1; \
	MOVQ AX, R10; SHRQ $9, R10; ANDL $127, R10; VMOVQ (R9)(R10*8), X2; \
	MOVQ AX, R10; SHRQ $25, R10; ANDL $127, R10; VPINSRQ $1, (R9)(R10*8), X2, X2; \
	MOVQ AX, R10; SHRQ $41, R10; ANDL $127, R10; VMOVQ (R9)(R10*8), X3; \
	SHRQ $57, AX; VPINSRQ $1, (R9)(AX*8), X3, X3; \
	VINSERTI128 $1, X3, Y2, Y2; \
	MOVBLZX s(DI), BX; SCALES2(BX)

// IQ2XS_ALL(T): the super-block's eight steps, each followed by T(ib).
#define IQ2XS_ALL(T) \
	IQ2XS(2, 66); T(0); IQ2XS(10, 67); T(1); IQ2XS(18, 68); T(2); IQ2XS(26, 69); T(3); \
	IQ2XS(34, 70); T(4); IQ2XS(42, 71); T(5); IQ2XS(50, 72); T(6); IQ2XS(58, 73); T(7)

// func gridRowIQ2XS(w *byte, x *int8, xd *float32, nb int) float32
TEXT ·gridRowIQ2XS(SB), NOSPLIT, $0-36
	ROWARGS(·iq2xsGrid)

block:
	IQ2XS_ALL(DOT32)
	HALFD(0); VMULSS gridEighth<>(SB), X4, X4
	NEXT(74)
	VZEROUPPER; MOVSS X15, ret+32(FP); RET

// IQ2_S: per 32 weights, four grid index low bytes at q, their high two bits in the byte at h, four sign bytes at
// sg, the scales byte at s.
#define IQ2S(q, sg, h, s) \
	MOVL q(DI), AX; MOVBLZX h(DI), BX; \
	MOVL AX, R10; ANDL $0xff, R10; MOVL BX, R11; SHLL $8, R11; ANDL $0x300, R11; ORL R11, R10; VMOVQ (R8)(R10*8), X1; \
	MOVL AX, R10; SHRL $8, R10; ANDL $0xff, R10; MOVL BX, R11; SHLL $6, R11; ANDL $0x300, R11; ORL R11, R10; VPINSRQ $1, (R8)(R10*8), X1, X1; \
	MOVL AX, R10; SHRL $16, R10; ANDL $0xff, R10; MOVL BX, R11; SHLL $4, R11; ANDL $0x300, R11; ORL R11, R10; VMOVQ (R8)(R10*8), X2; \
	SHRL $24, AX; SHLL $2, BX; ANDL $0x300, BX; ORL BX, AX; VPINSRQ $1, (R8)(AX*8), X2, X2; \
	VINSERTI128 $1, X2, Y1, Y1; \
	SIGNSV(sg); MOVBLZX s(DI), BX; SCALES2(BX)

// IQ2S_ALL(T): the super-block's eight steps, each followed by T(ib).
#define IQ2S_ALL(T) \
	IQ2S(2, 34, 66, 74); T(0); IQ2S(6, 38, 67, 75); T(1); IQ2S(10, 42, 68, 76); T(2); IQ2S(14, 46, 69, 77); T(3); \
	IQ2S(18, 50, 70, 78); T(4); IQ2S(22, 54, 71, 79); T(5); IQ2S(26, 58, 72, 80); T(6); IQ2S(30, 62, 73, 81); T(7)

// func gridRowIQ2S(w *byte, x *int8, xd *float32, nb int) float32
TEXT ·gridRowIQ2S(SB), NOSPLIT, $0-36
	ROWARGS(·iq2sGrid)
	SIGNSVINIT

block:
	IQ2S_ALL(DOT32)
	HALFD(0); VMULSS gridEighth<>(SB), X4, X4
	NEXT(82)
	VZEROUPPER; MOVSS X15, ret+32(FP); RET

// GRID4(sb): R10 = grid index byte sb/8 of AX.
#define GRID4(sb) MOVQ AX, R10; SHRQ $sb, R10; ANDL $0xff, R10

// IQ3_XXS: per 32 weights, eight grid index bytes at q (four values each) and a uint32 at a: four 7-bit sign
// groups and the scale.
#define IQ3XXS(q, a) \
	MOVQ q(DI), AX; \
	GRID4(0); VMOVD (R8)(R10*4), X1; GRID4(8); VPINSRD $1, (R8)(R10*4), X1, X1; \
	GRID4(16); VPINSRD $2, (R8)(R10*4), X1, X1; GRID4(24); VPINSRD $3, (R8)(R10*4), X1, X1; \
	GRID4(32); VMOVD (R8)(R10*4), X2; GRID4(40); VPINSRD $1, (R8)(R10*4), X2, X2; \
	GRID4(48); VPINSRD $2, (R8)(R10*4), X2, X2; GRID4(56); VPINSRD $3, (R8)(R10*4), X2, X2; \
	VINSERTI128 $1, X2, Y1, Y1; \
	MOVL a(DI), BX; KSIGNS(BX); SHRL $28, BX; SCALE1(BX)

// IQ3XXS_ALL(T): the super-block's eight steps, each followed by T(ib).
#define IQ3XXS_ALL(T) \
	IQ3XXS(2, 66); T(0); IQ3XXS(10, 70); T(1); IQ3XXS(18, 74); T(2); IQ3XXS(26, 78); T(3); \
	IQ3XXS(34, 82); T(4); IQ3XXS(42, 86); T(5); IQ3XXS(50, 90); T(6); IQ3XXS(58, 94); T(7)

// func gridRowIQ3XXS(w *byte, x *int8, xd *float32, nb int) float32
TEXT ·gridRowIQ3XXS(SB), NOSPLIT, $0-36
	ROWARGS(·iq3xxsGrid)

block:
	IQ3XXS_ALL(DOT32)
	HALFD(0); VMULSS gridQuarter<>(SB), X4, X4
	NEXT(98)
	VZEROUPPER; MOVSS X15, ret+32(FP); RET

DATA grid3sShifts<>+0(SB)/4, $8
DATA grid3sShifts<>+4(SB)/4, $7
DATA grid3sShifts<>+8(SB)/4, $6
DATA grid3sShifts<>+12(SB)/4, $5
DATA grid3sShifts<>+16(SB)/4, $4
DATA grid3sShifts<>+20(SB)/4, $3
DATA grid3sShifts<>+24(SB)/4, $2
DATA grid3sShifts<>+28(SB)/4, $1
GLOBL grid3sShifts<>(SB), RODATA|NOPTR, $32
DATA grid3sBit8<>+0(SB)/4, $256
GLOBL grid3sBit8<>(SB), RODATA|NOPTR, $4

// IQ3_S: per 32 weights, eight grid index low bytes at q, their ninth bits in the byte at h (bit k of index k:
// shifted to bit 8 by grid3sShifts in Y14, masked by Y13), gathered at once; four sign bytes at sg, the scale in
// the nibble at bit sh of the byte at s.
#define IQ3S(q, h, sg, s, sh) \
	VPMOVZXBD q(DI), Y6; MOVBLZX h(DI), BX; VMOVD BX, X7; VPBROADCASTD X7, Y7; \
	VPSLLVD Y14, Y7, Y7; VPAND Y13, Y7, Y7; VPOR Y7, Y6, Y6; \
	VPCMPEQD Y8, Y8, Y8; VPXOR Y1, Y1, Y1; VPGATHERDD Y8, (R8)(Y6*4), Y1; \
	SIGNSV(sg); MOVBLZX s(DI), BX; SHRL $sh, BX; ANDL $15, BX; SCALE1(BX)

// IQ3S_ALL(T): the super-block's eight steps, each followed by T(ib).
#define IQ3S_ALL(T) \
	IQ3S(2, 66, 74, 106, 0); T(0); IQ3S(10, 67, 78, 106, 4); T(1); IQ3S(18, 68, 82, 107, 0); T(2); IQ3S(26, 69, 86, 107, 4); T(3); \
	IQ3S(34, 70, 90, 108, 0); T(4); IQ3S(42, 71, 94, 108, 4); T(5); IQ3S(50, 72, 98, 109, 0); T(6); IQ3S(58, 73, 102, 109, 4); T(7)

// func gridRowIQ3S(w *byte, x *int8, xd *float32, nb int) float32
TEXT ·gridRowIQ3S(SB), NOSPLIT, $0-36
	ROWARGS(·iq3sGrid)
	VMOVDQU grid3sShifts<>(SB), Y14; VPBROADCASTD grid3sBit8<>(SB), Y13; SIGNSVINIT

block:
	IQ3S_ALL(DOT32)
	HALFD(0)
	NEXT(110)
	VZEROUPPER; MOVSS X15, ret+32(FP); RET

// GRID1(sb, hb, mask): R10 = grid index byte sb/8 of AX with the bits at hb of BX (mask: 7 for IQ1_S's three
// index bits; 15 for IQ1_M's nibble, three index bits and the shift's sign, which selects the second table of
// quant.IQ1Codes, 2048 entries on) above it.
#define GRID1(sb, hb, mask) \
	MOVL AX, R10; SHRL $sb, R10; ANDL $0xff, R10; MOVL BX, R12; SHRL $hb, R12; ANDL $mask, R12; SHLL $8, R12; ORL R12, R10

// IQ1_S: per 32 weights, four grid index low bytes at q and a uint16 at h: four 3-bit index highs, the 3-bit
// scale, the shift's sign (bit 15: R11 = R8 or the second table of quant.IQ1Codes, 2048·8 bytes on).
#define IQ1S(q, h) \
	MOVL q(DI), AX; MOVWLZX h(DI), BX; \
	MOVL BX, R11; SHRL $15, R11; SHLQ $14, R11; ADDQ R8, R11; \
	GRID1(0, 0, 7); VMOVQ (R11)(R10*8), X1; GRID1(8, 3, 7); VPINSRQ $1, (R11)(R10*8), X1, X1; \
	GRID1(16, 6, 7); VMOVQ (R11)(R10*8), X2; GRID1(24, 9, 7); VPINSRQ $1, (R11)(R10*8), X2, X2; \
	VINSERTI128 $1, X2, Y1, Y1; \
	SHRL $12, BX; ANDL $7, BX; SCALE1(BX)

// IQ1S_ALL(T): the super-block's eight steps, each followed by T(ib).
#define IQ1S_ALL(T) \
	IQ1S(2, 34); T(0); IQ1S(6, 36); T(1); IQ1S(10, 38); T(2); IQ1S(14, 40); T(3); \
	IQ1S(18, 42); T(4); IQ1S(22, 44); T(5); IQ1S(26, 46); T(6); IQ1S(30, 48); T(7)

// func gridRowIQ1S(w *byte, x *int8, xd *float32, nb int) float32
TEXT ·gridRowIQ1S(SB), NOSPLIT, $0-36
	ROWARGS(·iq1Codes)

block:
	IQ1S_ALL(SDOT32)
	HALFD(0); VMULSS gridEighth<>(SB), X4, X4
	NEXT(50)
	VZEROUPPER; MOVSS X15, ret+32(FP); RET

// IQ1_M: per 32 weights, four grid index low bytes at q, two bytes at h (a nibble per group), and the 3-bit
// scales of the two sixteenths at bit sh of the uint16 at s.
#define IQ1M(q, h, s, sh) \
	MOVL q(DI), AX; MOVWLZX h(DI), BX; \
	GRID1(0, 0, 15); VMOVQ (R8)(R10*8), X1; GRID1(8, 4, 15); VPINSRQ $1, (R8)(R10*8), X1, X1; \
	GRID1(16, 8, 15); VMOVQ (R8)(R10*8), X2; GRID1(24, 12, 15); VPINSRQ $1, (R8)(R10*8), X2, X2; \
	VINSERTI128 $1, X2, Y1, Y1; \
	MOVWLZX s(DI), BX; SHRL $sh, BX; MOVL BX, R10; ANDL $7, R10; LEAL 1(R10)(R10*1), R10; \
	SHRL $3, BX; ANDL $7, BX; LEAL 1(BX)(BX*1), BX; \
	VMOVD R10, X5; VPBROADCASTW X5, X5; VMOVD BX, X6; VPBROADCASTW X6, X6; VINSERTI128 $1, X6, Y5, Y5

// IQ1M_ALL(T): the super-block's eight steps, each followed by T(ib).
#define IQ1M_ALL(T) \
	IQ1M(0, 32, 48, 0); T(0); IQ1M(4, 34, 48, 6); T(1); IQ1M(8, 36, 50, 0); T(2); IQ1M(12, 38, 50, 6); T(3); \
	IQ1M(16, 40, 52, 0); T(4); IQ1M(20, 42, 52, 6); T(5); IQ1M(24, 44, 54, 0); T(6); IQ1M(28, 46, 54, 6); T(7)

// func gridRowIQ1M(w *byte, x *int8, xd *float32, nb int) float32
TEXT ·gridRowIQ1M(SB), NOSPLIT, $0-36
	ROWARGS(·iq1Codes)

block:
	IQ1M_ALL(SDOT32)
	IQ1MD; VMULSS gridEighth<>(SB), X4, X4
	NEXT(56)
	VZEROUPPER; MOVSS X15, ret+32(FP); RET

// func gridUnpackIQ2XXS(b *byte, codes *byte, scv *int16)
TEXT ·gridUnpackIQ2XXS(SB), NOSPLIT, $0-24
	UNPARGS(·iq2xxsGrid)
	IQ2XXS_ALL(PSTORE)
	VZEROUPPER; RET

// func gridUnpackIQ2XS(b *byte, codes *byte, scv *int16)
TEXT ·gridUnpackIQ2XS(SB), NOSPLIT, $0-24
	UNPARGS(·iq2xsGrid)
	IQ2XS_ALL(PSTORE)
	VZEROUPPER; RET

// func gridUnpackIQ2S(b *byte, codes *byte, scv *int16)
TEXT ·gridUnpackIQ2S(SB), NOSPLIT, $0-24
	UNPARGS(·iq2sGrid)
	SIGNSVINIT
	IQ2S_ALL(PSTORE)
	VZEROUPPER; RET

// func gridUnpackIQ3XXS(b *byte, codes *byte, scv *int16)
TEXT ·gridUnpackIQ3XXS(SB), NOSPLIT, $0-24
	UNPARGS(·iq3xxsGrid)
	IQ3XXS_ALL(PSTORE)
	VZEROUPPER; RET

// func gridUnpackIQ3S(b *byte, codes *byte, scv *int16)
TEXT ·gridUnpackIQ3S(SB), NOSPLIT, $0-24
	UNPARGS(·iq3sGrid)
	VMOVDQU grid3sShifts<>(SB), Y14; VPBROADCASTD grid3sBit8<>(SB), Y13; SIGNSVINIT
	IQ3S_ALL(PSTORE)
	VZEROUPPER; RET

// func gridUnpackIQ1S(b *byte, codes *byte, scv *int16)
TEXT ·gridUnpackIQ1S(SB), NOSPLIT, $0-24
	UNPARGS(·iq1Codes)
	IQ1S_ALL(SPSTORE)
	VZEROUPPER; RET

// func gridUnpackIQ1M(b *byte, codes *byte, scv *int16)
TEXT ·gridUnpackIQ1M(SB), NOSPLIT, $0-24
	UNPARGS(·iq1Codes)
	IQ1M_ALL(SPSTORE)
	VZEROUPPER; RET

// func gridDecodeIQ2XXS(b *byte, q *int8, scv *int16)
TEXT ·gridDecodeIQ2XXS(SB), NOSPLIT, $0-24
	UNPARGS(·iq2xxsGrid)
	IQ2XXS_ALL(QSTORE)
	VZEROUPPER; RET

// func gridDecodeIQ2XS(b *byte, q *int8, scv *int16)
TEXT ·gridDecodeIQ2XS(SB), NOSPLIT, $0-24
	UNPARGS(·iq2xsGrid)
	IQ2XS_ALL(QSTORE)
	VZEROUPPER; RET

// func gridDecodeIQ2S(b *byte, q *int8, scv *int16)
TEXT ·gridDecodeIQ2S(SB), NOSPLIT, $0-24
	UNPARGS(·iq2sGrid)
	SIGNSVINIT
	IQ2S_ALL(QSTORE)
	VZEROUPPER; RET

// func gridDecodeIQ3XXS(b *byte, q *int8, scv *int16)
TEXT ·gridDecodeIQ3XXS(SB), NOSPLIT, $0-24
	UNPARGS(·iq3xxsGrid)
	IQ3XXS_ALL(QSTORE)
	VZEROUPPER; RET

// func gridDecodeIQ3S(b *byte, q *int8, scv *int16)
TEXT ·gridDecodeIQ3S(SB), NOSPLIT, $0-24
	UNPARGS(·iq3sGrid)
	VMOVDQU grid3sShifts<>(SB), Y14; VPBROADCASTD grid3sBit8<>(SB), Y13; SIGNSVINIT
	IQ3S_ALL(QSTORE)
	VZEROUPPER; RET

// func gridDecodeIQ1S(b *byte, q *int8, scv *int16)
TEXT ·gridDecodeIQ1S(SB), NOSPLIT, $0-24
	UNPARGS(·iq1Codes)
	IQ1S_ALL(SQSTORE)
	VZEROUPPER; RET

// func gridDecodeIQ1M(b *byte, q *int8, scv *int16)
TEXT ·gridDecodeIQ1M(SB), NOSPLIT, $0-24
	UNPARGS(·iq1Codes)
	IQ1M_ALL(SQSTORE)
	VZEROUPPER; RET

// func gridIntsAVX2(q *[256]int8, x *int8, scv *[128]int16) int32
//
// Σ_s sc[s]·Σ_{j in sixteenth s} q[j]·x[j] of a super-block decoded by gridDecode*: VPMADDUBSW multiplies |q| by x
// with q's signs (VPSIGNB), VPMADDWD adds the pairs times the step's scale vector.
TEXT ·gridIntsAVX2(SB), NOSPLIT, $0-28
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ scv+16(FP), DX
	VPXOR Y0, Y0, Y0
	MOVQ $8, CX

loop:
	VMOVDQU (SI), Y1
	VMOVDQU (DI), Y2
	VPSIGNB Y1, Y2, Y2
	VPABSB Y1, Y1
	VPMADDUBSW Y2, Y1, Y3
	VPMADDWD (DX), Y3, Y3
	VPADDD Y3, Y0, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ loop

	HSUMI
	MOVL AX, ret+24(FP)
	VZEROUPPER
	RET

// func gridInts4AVX2(q *[256]int8, x *int8, stride int, scv *[128]int16, out *[4]int32)
//
// gridIntsAVX2 for four activation rows at once (row r at x + r·stride): each step's codes, their absolute values
// and its scale vector are loaded once for the four.
TEXT ·gridInts4AVX2(SB), NOSPLIT, $0-40
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ stride+16(FP), R8
	MOVQ scv+24(FP), DX
	LEAQ (DI)(R8*2), R9
	VPXOR Y0, Y0, Y0
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7
	VPXOR Y8, Y8, Y8
	MOVQ $8, CX

loop4:
	VMOVDQU (SI), Y1
	VPABSB Y1, Y9
	VMOVDQU (DX), Y5
	VMOVDQU (DI), Y2
	VPSIGNB Y1, Y2, Y2
	VPMADDUBSW Y2, Y9, Y3
	VPMADDWD Y5, Y3, Y3
	VPADDD Y3, Y0, Y0
	VMOVDQU (DI)(R8*1), Y2
	VPSIGNB Y1, Y2, Y2
	VPMADDUBSW Y2, Y9, Y3
	VPMADDWD Y5, Y3, Y3
	VPADDD Y3, Y6, Y6
	VMOVDQU (R9), Y2
	VPSIGNB Y1, Y2, Y2
	VPMADDUBSW Y2, Y9, Y3
	VPMADDWD Y5, Y3, Y3
	VPADDD Y3, Y7, Y7
	VMOVDQU (R9)(R8*1), Y2
	VPSIGNB Y1, Y2, Y2
	VPMADDUBSW Y2, Y9, Y3
	VPMADDWD Y5, Y3, Y3
	VPADDD Y3, Y8, Y8
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R9
	ADDQ $32, DX
	DECQ CX
	JNZ loop4

	// Reduce the four accumulators: out[r] = the sum of row r's eight lanes.
	VPHADDD Y6, Y0, Y0 // rows 0,1 pairwise (per 128-bit lane)
	VPHADDD Y8, Y7, Y7 // rows 2,3
	VPHADDD Y7, Y0, Y0 // lanes: r0 r0' r1 r1' ... per 128-bit lane partial sums of rows 0,1,2,3
	VEXTRACTI128 $1, Y0, X1
	VPADDD X1, X0, X0
	MOVQ out+32(FP), AX
	VMOVDQU X0, (AX)
	VZEROUPPER
	RET

DATA gridOnesW<>+0(SB)/4, $0x00010001
GLOBL gridOnesW<>(SB), RODATA|NOPTR, $4

// func gridQuadsAVX2(q *[256]int8, x *int8, out *[64]int32)
//
// The quad sums of a decoded super-block (kQuadFormat.quads for --arithmetic llama.cpp): out[i] is the sum of the
// four products of elements 4i..4i+3, |q| against x with q's signs (VPSIGNB), VPMADDUBSW, then VPMADDWD by ones.
TEXT ·gridQuadsAVX2(SB), NOSPLIT, $0-24
	MOVQ q+0(FP), SI
	MOVQ x+8(FP), DI
	MOVQ out+16(FP), DX
	VPBROADCASTD gridOnesW<>(SB), Y4
	MOVQ $8, CX

quads:
	VMOVDQU (SI), Y1
	VMOVDQU (DI), Y2
	VPSIGNB Y1, Y2, Y2
	VPABSB Y1, Y1
	VPMADDUBSW Y2, Y1, Y3
	VPMADDWD Y4, Y3, Y3
	VMOVDQU Y3, (DX)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ quads
	VZEROUPPER
	RET

DATA gridFlip<>+0(SB)/4, $0x80808080
GLOBL gridFlip<>(SB), RODATA|NOPTR, $4
DATA gridLoW<>+0(SB)/4, $0x0000ffff
GLOBL gridLoW<>(SB), RODATA|NOPTR, $4

// gridSixteenths are the word indices of each sixteenth's scale in 64 words of gridScales (VPERMI2W).
DATA gridSixteenths<>+0(SB)/8, $0x0018001000080000
DATA gridSixteenths<>+8(SB)/8, $0x0038003000280020
GLOBL gridSixteenths<>(SB), RODATA|NOPTR, $16

// func gridIntsRowsVNNI(q *[256]int8, scv *gridScales, x *int8, xstride int, bsums *int16, bstride int, n int, out *int32)
//
// gridIntsAVX2 for n activation rows (row r's 256 values at x + r·xstride, its sums of 16 at bsums + r·bstride
// bytes), out[r] for r < n, by AVX-512 VNNI: the codes + 128 (unsigned) against each row by VPDPBUSD, per 64
// codes sums of four in 16 int32 lanes, times their sixteenths' scales (VPMULLD; lane l of the c-th 64 codes has
// sixteenth 4c + l/4, word 2l of scv's c-th 64 bytes), less 128 times the row's sums of 16 times the scales, the
// lanes summed. Exact integers: gridIntsGo's.
TEXT ·gridIntsRowsVNNI(SB), NOSPLIT, $0-64
	MOVQ q+0(FP), SI
	MOVQ scv+8(FP), DX
	MOVQ x+16(FP), DI
	MOVQ xstride+24(FP), R9
	MOVQ bsums+32(FP), BX
	MOVQ bstride+40(FP), R10
	MOVQ n+48(FP), CX
	MOVQ out+56(FP), R8
	VPBROADCASTD gridFlip<>(SB), Z12
	VPXORD (SI), Z12, Z0
	VPXORD 64(SI), Z12, Z1
	VPXORD 128(SI), Z12, Z2
	VPXORD 192(SI), Z12, Z3
	VPBROADCASTD gridLoW<>(SB), Z12
	VPANDD (DX), Z12, Z4
	VPANDD 64(DX), Z12, Z5
	VPANDD 128(DX), Z12, Z6
	VPANDD 192(DX), Z12, Z7
	// The 16 scales as dwords (Z11): words 8s of scv, s < 16.
	VMOVDQU gridSixteenths<>(SB), X13
	VMOVDQU64 (DX), Z14
	VPERMI2W 64(DX), Z14, Z13
	VMOVDQU gridSixteenths<>(SB), X15
	VMOVDQU64 128(DX), Z14
	VPERMI2W 192(DX), Z14, Z15
	VINSERTI128 $1, X15, Y13, Y13
	VPMOVZXWD Y13, Z11

rowsv:
	VPXORD Z8, Z8, Z8
	VPDPBUSD (DI), Z0, Z8
	VPMULLD Z4, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPDPBUSD 64(DI), Z1, Z9
	VPMULLD Z5, Z9, Z9
	VPADDD Z9, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPDPBUSD 128(DI), Z2, Z9
	VPMULLD Z6, Z9, Z9
	VPADDD Z9, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPDPBUSD 192(DI), Z3, Z9
	VPMULLD Z7, Z9, Z9
	VPADDD Z9, Z8, Z8
	VPMOVSXWD (BX), Z10
	VPMULLD Z11, Z10, Z10
	VPSLLD $7, Z10, Z10
	VPSUBD Z10, Z8, Z8
	VEXTRACTI64X4 $1, Z8, Y9
	VPADDD Y9, Y8, Y8
	VEXTRACTI128 $1, Y8, X9
	VPADDD X9, X8, X8
	VPSHUFD $0x4e, X8, X9
	VPADDD X9, X8, X8
	VPSHUFD $0xb1, X8, X9
	VPADDD X9, X8, X8
	VMOVD X8, (R8)
	ADDQ $4, R8
	ADDQ R9, DI
	ADDQ R10, BX
	DECQ CX
	JNZ rowsv
	VZEROUPPER
	RET
