//go:build !amd64

package kernels

func halfToF32AVX512(dst *float32, src *uint16, n int) { panic("no AVX-512") }
