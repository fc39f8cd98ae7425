package kernels

import "github.com/layerstream/layerstream/quant"

// widenHalf widens float16 bits to float32 (exactly): dst[i] = src[i] for len(src) elements. The attention tiles
// widen a float16 cache as they load it; this serves the Go path (no AVX-512, or a head size not a multiple of
// 16).
func widenHalf(dst []float32, src []uint16) {
	for i, h := range src {
		dst[i] = quant.HalfToFloat32(h)
	}
}
