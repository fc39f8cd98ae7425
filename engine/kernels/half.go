package kernels

import "github.com/layerstream/layerstream/quant"

// F32FromHalf widens float16 bits to float32 (exactly): dst[i] = src[i] for len(src) elements.
func F32FromHalf(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	n := 0
	if useAVX512 {
		n = len(src) &^ 15
		if n > 0 {
			halfToF32AVX512(&dst[0], &src[0], n)
		}
	}
	for i := n; i < len(src); i++ {
		dst[i] = quant.HalfToFloat32(src[i])
	}
}
