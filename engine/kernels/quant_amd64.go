package kernels

import "github.com/layerstream/layerstream/quant"

// The AVX2 quantized dot products (quant_amd64.s) also need F16C (VCVTPH2PS), which every CPU with AVX2 and FMA
// has.

//go:noescape
func dotQ8_0AVX2(x []float32, b []byte) float32

//go:noescape
func dotQ8_0x3AVX2(x []float32, n, triples int, b []byte, y []float32, stride int)

//go:noescape
func dotQ4_0AVX2(x []float32, b []byte) float32

//go:noescape
func dotQ4_0x3AVX2(x []float32, n, triples int, b []byte, y []float32, stride int)

//go:noescape
func dotQ4_1AVX2(x []float32, b []byte) float32

//go:noescape
func dotQ4_1x3AVX2(x []float32, n, triples int, b []byte, y []float32, stride int)

//go:noescape
func dotQ4_KAVX2(x []float32, b []byte) float32

//go:noescape
func dotQ4_Kx3AVX2(x []float32, n, triples int, b []byte, y []float32, stride int)

// asmQuantKernels are the formats with assembly kernels.
var asmQuantKernels = map[quant.Type]*quantKernel{
	quant.Q8_0: {dot1: dotQ8_0AVX2, dot3: dotQ8_0x3AVX2},
	quant.Q4_0: {dot1: dotQ4_0AVX2, dot3: dotQ4_0x3AVX2},
	quant.Q4_1: {dot1: dotQ4_1AVX2, dot3: dotQ4_1x3AVX2},
	quant.Q4_K: {dot1: dotQ4_KAVX2, dot3: dotQ4_Kx3AVX2},
}

// quantKernelAsm returns t's assembly kernels, or nil where the CPU or the format has none.
func quantKernelAsm(t quant.Type) *quantKernel {
	if !useAVX2 {
		return nil
	}
	return asmQuantKernels[t]
}
