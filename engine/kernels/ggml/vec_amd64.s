#include "textflag.h"

// AVX-512 twins of vec.go's Go functions, instruction for instruction what GCC compiles ggml's AVX-512 code to
// (fused multiply-adds, VSCALEFPS, the lane sums of _mm512_reduce_add_ps): bit for bit the Go functions
// (TestAsmMatchesGo), only faster.

DATA expR<>+0(SB)/4, $0x4b400000
GLOBL expR<>(SB), RODATA|NOPTR, $4
DATA expLog2e<>+0(SB)/4, $0x3fb8aa3b
GLOBL expLog2e<>(SB), RODATA|NOPTR, $4
DATA expLn2hi<>+0(SB)/4, $0x3f317200
GLOBL expLn2hi<>(SB), RODATA|NOPTR, $4
DATA expLn2lo<>+0(SB)/4, $0x35bfbe8e
GLOBL expLn2lo<>(SB), RODATA|NOPTR, $4
DATA expC5<>+0(SB)/4, $0x3c072010
GLOBL expC5<>(SB), RODATA|NOPTR, $4
DATA expC4<>+0(SB)/4, $0x3d2b9f17
GLOBL expC4<>(SB), RODATA|NOPTR, $4
DATA expC3<>+0(SB)/4, $0x3e2aaf33
GLOBL expC3<>(SB), RODATA|NOPTR, $4
DATA expC2<>+0(SB)/4, $0x3efffedb
GLOBL expC2<>(SB), RODATA|NOPTR, $4
DATA expC1<>+0(SB)/4, $0x3f7ffff6
GLOBL expC1<>(SB), RODATA|NOPTR, $4
DATA one<>+0(SB)/4, $0x3f800000
GLOBL one<>(SB), RODATA|NOPTR, $4
DATA big<>+0(SB)/4, $0x43400000
GLOBL big<>(SB), RODATA|NOPTR, $4
DATA inf<>+0(SB)/4, $0x7f800000
GLOBL inf<>(SB), RODATA|NOPTR, $4
DATA absmask<>+0(SB)/4, $0x7fffffff
GLOBL absmask<>(SB), RODATA|NOPTR, $4

// REDUCE16 sums Z0's 16 lanes into X0 as GCC's _mm512_reduce_add_ps: halves, quarters, then (0+2) + (1+3).
#define REDUCE16 \
	VEXTRACTF64X4 $1, Z0, Y1; VADDPS Y1, Y0, Y0; \
	VEXTRACTF128 $1, Y0, X1; VADDPS X1, X0, X0; \
	VPERMILPS $0x4e, X0, X1; VADDPS X1, X0, X0; \
	VMOVSHDUP X0, X1; VADDSS X1, X0, X0

// func vecDot64AVX512(x, y *float32, n int) float32: VecDot's steps of 64 (n a positive multiple of 64) and its
// reduction.
TEXT ·vecDot64AVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
vdloop:
	VMOVUPS (SI), Z4
	VFMADD231PS (DI), Z4, Z0
	VMOVUPS 64(SI), Z5
	VFMADD231PS 64(DI), Z5, Z1
	VMOVUPS 128(SI), Z6
	VFMADD231PS 128(DI), Z6, Z2
	VMOVUPS 192(SI), Z7
	VFMADD231PS 192(DI), Z7, Z3
	ADDQ $256, SI
	ADDQ $256, DI
	SUBQ $64, CX
	JNZ vdloop
	VADDPS Z2, Z0, Z0
	VADDPS Z3, Z1, Z1
	VADDPS Z1, Z0, Z0
	REDUCE16
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func dot16AVX512(x, y *float32, n int) float32: Dot16 (n a positive multiple of 16).
TEXT ·dot16AVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Z0, Z0, Z0
d16loop:
	VMOVUPS (SI), Z4
	VFMADD231PS (DI), Z4, Z0
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ d16loop
	REDUCE16
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// EXPF: Z10 = ggml_v_expf(Z0) (AVX-512), with the constants in Z20-Z31; clobbers Z2-Z9, Z11, K1, K2.
#define EXPF \
	VMOVAPS Z20, Z2; VFMADD231PS Z21, Z0, Z2; \
	VSUBPS Z20, Z2, Z3; \
	VMOVAPS Z0, Z4; VFNMADD231PS Z22, Z3, Z4; VFNMADD231PS Z23, Z3, Z4; \
	VANDPS Z31, Z3, Z5; VCMPPS $0x1e, Z30, Z5, K1; \
	VMULPS Z4, Z4, Z6; \
	VMOVAPS Z25, Z7; VFMADD231PS Z4, Z24, Z7; \
	VMOVAPS Z27, Z8; VFMADD231PS Z4, Z26, Z8; \
	VMOVAPS Z29, Z9; VFMADD231PS Z4, Z28, Z9; \
	VFMADD231PS Z6, Z7, Z8; \
	VFMADD231PS Z6, Z8, Z9; \
	VSCALEFPS Z3, Z9, Z10; \
	VXORPS Z11, Z11, Z11; VCMPPS $0x12, Z11, Z3, K2; \
	VBROADCASTSS inf<>(SB), Z11; VXORPS Z5, Z5, Z5; VMOVAPS Z5, K2, Z11; \
	VMOVAPS Z11, K1, Z10

// EXPCONSTS loads EXPF's constants; Z29 is 1.
#define EXPCONSTS \
	VBROADCASTSS expR<>(SB), Z20; VBROADCASTSS expLog2e<>(SB), Z21; \
	VBROADCASTSS expLn2hi<>(SB), Z22; VBROADCASTSS expLn2lo<>(SB), Z23; \
	VBROADCASTSS expC5<>(SB), Z24; VBROADCASTSS expC4<>(SB), Z25; \
	VBROADCASTSS expC3<>(SB), Z26; VBROADCASTSS expC2<>(SB), Z27; \
	VBROADCASTSS expC1<>(SB), Z28; VBROADCASTSS one<>(SB), Z29; \
	VBROADCASTSS big<>(SB), Z30; VBROADCASTSS absmask<>(SB), Z31

// func expfAVX512(dst, src *float32, n int): dst[i] = Expf(src[i]) (n a positive multiple of 16).
TEXT ·expfAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	EXPCONSTS
exploop:
	VMOVUPS (SI), Z0
	EXPF
	VMOVUPS Z10, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ exploop
	VZEROUPPER
	RET

// func siluAVX512(dst, src *float32, n int): dst[i] = Silu(src[i]) (n a positive multiple of 16): ggml_v_silu,
// x / (1 + expf(0 - x)).
TEXT ·siluAVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	EXPCONSTS
siluloop:
	VMOVUPS (SI), Z12
	VXORPS Z13, Z13, Z13
	VSUBPS Z12, Z13, Z0
	EXPF
	VADDPS Z29, Z10, Z10
	VDIVPS Z10, Z12, Z12
	VMOVUPS Z12, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ siluloop
	VZEROUPPER
	RET
