package kernels

// halfToF32AVX512 widens n float16 values (n a multiple of 16) from src to float32 at dst (VCVTPH2PS).
//
//go:noescape
func halfToF32AVX512(dst *float32, src *uint16, n int)
