package kernels

import "github.com/layerstream/layerstream/quant"

//go:noescape
func quadsQ2_K(b []byte, qs []int8, out *[64]int32)

//go:noescape
func quadsIQ4_XS(b []byte, qs []int8, out *[64]int32)

//go:noescape
func quadsQ3_K(b []byte, qs []int8, out *[64]int32)

//go:noescape
func quadsQ4_K(b []byte, qs []int8, out *[64]int32)

//go:noescape
func quadsQ5_K(b []byte, qs []int8, out *[64]int32)

//go:noescape
func quadsQ6_K(b []byte, qs []int8, out *[64]int32)

// kQuadsAsm reports whether a K-quant super-block of type t has an assembly quad-sum kernel on this CPU
// (quads_amd64.s, AVX2), bit for bit the Go sums (kQuadFormat.quads).
func kQuadsAsm(t quant.Type) bool {
	switch t {
	case quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.IQ4_XS:
		return useAVX2
	}
	return false
}

// quadsAsm calls type t's assembly quad-sum kernel (kQuadsAsm(t) must be true): directly, so that out does not
// escape.
func quadsAsm(t quant.Type, b []byte, qs []int8, out *[64]int32) {
	switch t {
	case quant.Q2_K:
		quadsQ2_K(b, qs, out)
	case quant.Q3_K:
		quadsQ3_K(b, qs, out)
	case quant.Q4_K:
		quadsQ4_K(b, qs, out)
	case quant.Q5_K:
		quadsQ5_K(b, qs, out)
	case quant.Q6_K:
		quadsQ6_K(b, qs, out)
	case quant.IQ4_XS:
		quadsIQ4_XS(b, qs, out)
	default:
		panic("kernels: no assembly quad sums for " + t.String())
	}
}
