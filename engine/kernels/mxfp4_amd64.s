#include "textflag.h"

// The MXFP4 kernels (mxfp4.go): per block, the scale from ·mxfp4Scales, the 16 bytes of codes widened to dwords,
// low nibbles (elements 0..15) and high nibbles (16..31) looked up in ·mxfp4Values (VPERMPS), times the scale,
// then each input row's x[l]·w[l] added to its first set of 16 lanes and x[16+l]·w[16+l] to its second (VMULPS
// then VADDPS: never fused); at the end the second set is added to the first.

// MXFP4_SETUP loads the code values (Z15), the nibble mask (Z14) and the scale table's address (R8).
#define MXFP4_SETUP \
	VMOVUPS ·mxfp4Values(SB), Z15 \
	LEAQ    ·mxfp4Scales(SB), R8  \
	MOVL    $0x0f, AX             \
	VPBROADCASTD AX, Z14

// MXFP4_DECODE decodes the block at SI: its weights 0..15 into Z5 and 16..31 into Z6 (Z4, Z13, AX clobbered).
#define MXFP4_DECODE MXFP4_DECODE_AT(SI, Z4, Z5, Z6)

// MXFP4_DECODE_AT decodes the block at src: its weights 0..15 into lo and 16..31 into hi (tmp, Z13, AX clobbered).
#define MXFP4_DECODE_AT(src, tmp, lo, hi) \
	MOVBLZX (src), AX             \
	VBROADCASTSS (R8)(AX*4), Z13  \
	VPMOVZXBD 1(src), tmp         \
	VPANDD Z14, tmp, lo           \
	VPSRLD $4, tmp, hi            \
	VPERMPS Z15, lo, lo           \
	VPERMPS Z15, hi, hi           \
	VMULPS Z13, lo, lo            \
	VMULPS Z13, hi, hi

// MXFP4_ROW adds the block at src times the input's two halves (Z8, Z9) to the lane sets a and b.
#define MXFP4_ROW(src, a, b) \
	MXFP4_DECODE_AT(src, Z10, Z11, Z12) \
	VMULPS Z8, Z11, Z11           \
	VADDPS Z11, a, a              \
	VMULPS Z9, Z12, Z12           \
	VADDPS Z12, b, b

// func mxfp4Dot1AVX512(w *byte, blocks int, x *float32, acc *float32)
TEXT ·mxfp4Dot1AVX512(SB), NOSPLIT, $0-32
	MOVQ w+0(FP), SI
	MOVQ blocks+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ acc+24(FP), DX
	MXFP4_SETUP
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1

one:
	MXFP4_DECODE
	VMULPS (DI), Z5, Z7
	VADDPS Z7, Z0, Z0
	VMULPS 64(DI), Z6, Z8
	VADDPS Z8, Z1, Z1
	ADDQ $17, SI
	ADDQ $128, DI
	DECQ CX
	JNZ  one

	VADDPS Z1, Z0, Z0
	VMOVUPS Z0, (DX)
	VZEROUPPER
	RET

// func mxfp4Dot4AVX512(w *byte, blocks int, x *float32, ldx int, acc *float32)
TEXT ·mxfp4Dot4AVX512(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ blocks+8(FP), CX
	MOVQ x+16(FP), DI
	MOVQ ldx+24(FP), R9
	MOVQ acc+32(FP), DX
	SHLQ $2, R9
	LEAQ (DI)(R9*1), R10
	LEAQ (R10)(R9*1), R11
	LEAQ (R11)(R9*1), R12
	MXFP4_SETUP
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z8, Z8, Z8
	VXORPS Z9, Z9, Z9
	VXORPS Z10, Z10, Z10
	VXORPS Z11, Z11, Z11

four:
	MXFP4_DECODE
	VMULPS (DI), Z5, Z7
	VADDPS Z7, Z0, Z0
	VMULPS 64(DI), Z6, Z12
	VADDPS Z12, Z8, Z8
	VMULPS (R10), Z5, Z7
	VADDPS Z7, Z1, Z1
	VMULPS 64(R10), Z6, Z12
	VADDPS Z12, Z9, Z9
	VMULPS (R11), Z5, Z7
	VADDPS Z7, Z2, Z2
	VMULPS 64(R11), Z6, Z12
	VADDPS Z12, Z10, Z10
	VMULPS (R12), Z5, Z7
	VADDPS Z7, Z3, Z3
	VMULPS 64(R12), Z6, Z12
	VADDPS Z12, Z11, Z11
	ADDQ $17, SI
	ADDQ $128, DI
	ADDQ $128, R10
	ADDQ $128, R11
	ADDQ $128, R12
	DECQ CX
	JNZ  four

	VADDPS Z8, Z0, Z0
	VADDPS Z9, Z1, Z1
	VADDPS Z10, Z2, Z2
	VADDPS Z11, Z3, Z3
	VMOVUPS Z0, (DX)
	VMOVUPS Z1, 64(DX)
	VMOVUPS Z2, 128(DX)
	VMOVUPS Z3, 192(DX)
	VZEROUPPER
	RET

// func mxfp4Rows4AVX512(w *byte, stride int, blocks int, x *float32, acc *float32)
// Four weight rows (stride bytes apart) times one input row: the input's halves loaded once per block, eight
// addition chains at once; each row's lanes as mxfp4Dot1AVX512 computes them.
TEXT ·mxfp4Rows4AVX512(SB), NOSPLIT, $0-40
	MOVQ w+0(FP), SI
	MOVQ stride+8(FP), R9
	MOVQ blocks+16(FP), CX
	MOVQ x+24(FP), DI
	MOVQ acc+32(FP), DX
	LEAQ (SI)(R9*1), R10
	LEAQ (R10)(R9*1), R11
	LEAQ (R11)(R9*1), R12
	MXFP4_SETUP
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z5, Z5, Z5
	VXORPS Z6, Z6, Z6
	VXORPS Z7, Z7, Z7

rows4:
	VMOVUPS (DI), Z8
	VMOVUPS 64(DI), Z9
	MXFP4_ROW(SI, Z0, Z1)
	MXFP4_ROW(R10, Z2, Z3)
	MXFP4_ROW(R11, Z4, Z5)
	MXFP4_ROW(R12, Z6, Z7)
	ADDQ $17, SI
	ADDQ $17, R10
	ADDQ $17, R11
	ADDQ $17, R12
	ADDQ $128, DI
	DECQ CX
	JNZ  rows4

	VADDPS Z1, Z0, Z0
	VADDPS Z3, Z2, Z2
	VADDPS Z5, Z4, Z4
	VADDPS Z7, Z6, Z6
	VMOVUPS Z0, (DX)
	VMOVUPS Z2, 64(DX)
	VMOVUPS Z4, 128(DX)
	VMOVUPS Z6, 192(DX)
	VZEROUPPER
	RET
