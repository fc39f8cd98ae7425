package kernels

import "github.com/layerstream/layerstream/quant"

//go:noescape
func quadsQ2_K(b []byte, qs []int8, out *[64]int32)

//go:noescape
func quadsIQ4_XS(b []byte, qs []int8, out *[64]int32)

//go:noescape
func quadsQ4_K(b []byte, qs []int8, out *[64]int32)

//go:noescape
func quadsQ5_K(b []byte, qs []int8, out *[64]int32)

//go:noescape
func quadsQ6_K(b []byte, qs []int8, out *[64]int32)

// kQuadsAsm are the assembly quad-sum kernels (quads_amd64.s, AVX2), bit for bit kQuadFormat's portable ones.
func kQuadsAsm() map[quant.Type]func(b []byte, qs []int8, out *[64]int32) {
	if !useAVX2 {
		return nil
	}
	return map[quant.Type]func(b []byte, qs []int8, out *[64]int32){quant.Q2_K: quadsQ2_K, quant.Q4_K: quadsQ4_K,
		quant.Q5_K: quadsQ5_K, quant.Q6_K: quadsQ6_K, quant.IQ4_XS: quadsIQ4_XS}
}
