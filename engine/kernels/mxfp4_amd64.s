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
#define MXFP4_DECODE \
	MOVBLZX (SI), AX              \
	VBROADCASTSS (R8)(AX*4), Z13  \
	VPMOVZXBD 1(SI), Z4           \
	VPANDD Z14, Z4, Z5            \
	VPSRLD $4, Z4, Z6             \
	VPERMPS Z15, Z5, Z5           \
	VPERMPS Z15, Z6, Z6           \
	VMULPS Z13, Z5, Z5            \
	VMULPS Z13, Z6, Z6

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
