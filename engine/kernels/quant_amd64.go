package kernels

import "github.com/layerstream/layerstream/quant"

// The assembly kernels (quant_amd64.s) need AVX2 and F16C (every CPU with AVX2 and FMA has F16C).

//go:noescape
func dotQ8_0AVX2(b []byte, qs []int8, d []float32) float32

//go:noescape
func dotQ4_0AVX2(b []byte, qs []int8, d []float32) float32

//go:noescape
func dotQ4_1AVX2(b []byte, qs []int8, d, s []float32) float32

//go:noescape
func dotQ4_KAVX2(b []byte, qs []int8, d []float32, bsums []int16) float32

//go:noescape
func dotQ6_KAVX2(b []byte, qs []int8, d []float32) float32

// asmKernels returns the assembly kernels the CPU can run. Each reads len(x.d) blocks; the callers guarantee
// that the row holds that many (NewQuantMatrix checked the sizes).
func asmKernels() map[quant.Type]*quantKernel {
	if !useAVX2 {
		return nil
	}
	return map[quant.Type]*quantKernel{
		quant.Q8_0: {actQ8_0, func(w []byte, x qActRow) float32 { return dotQ8_0AVX2(w, x.qs, x.d) }},
		quant.Q4_0: {actQ8_0, func(w []byte, x qActRow) float32 { return dotQ4_0AVX2(w, x.qs, x.d) }},
		quant.Q4_1: {actQ8_1, func(w []byte, x qActRow) float32 { return dotQ4_1AVX2(w, x.qs, x.d, x.s) }},
		quant.Q4_K: {actQ8_K, func(w []byte, x qActRow) float32 { return dotQ4_KAVX2(w, x.qs, x.d, x.bsums) }},
		quant.Q6_K: {actQ8_K, func(w []byte, x qActRow) float32 { return dotQ6_KAVX2(w, x.qs, x.d) }},
	}
}
