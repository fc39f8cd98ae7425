#include "textflag.h"

// func halfToF32AVX512(dst *float32, src *uint16, n int)
TEXT ·halfToF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   done
	CMPQ CX, $4
	JB   one

four:
	VCVTPH2PS (SI), Z0
	VCVTPH2PS 32(SI), Z1
	VCVTPH2PS 64(SI), Z2
	VCVTPH2PS 96(SI), Z3
	VMOVUPS   Z0, (DI)
	VMOVUPS   Z1, 64(DI)
	VMOVUPS   Z2, 128(DI)
	VMOVUPS   Z3, 192(DI)
	ADDQ      $128, SI
	ADDQ      $256, DI
	SUBQ      $4, CX
	CMPQ      CX, $4
	JAE       four
	TESTQ     CX, CX
	JZ        done

one:
	VCVTPH2PS (SI), Z0
	VMOVUPS   Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       one

done:
	VZEROUPPER
	RET
