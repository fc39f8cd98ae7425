package kernels

import "math"

// GELUTanh sets y[i] to the tanh approximation of GELU of x[i] (PyTorch's gelu(approximate="tanh"), Hugging
// Face's gelu_pytorch_tanh): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), formed in float64, or where the CPU
// has AVX-512 as x·sigmoid(2·√(2/π)·(x + 0.044715·x³)) (the same function) with a vectorized exp.
func GELUTanh(y, x []float32) {
	n := len(x)
	ParallelFor((n+255)/256, func(lo, hi int) { // chunks of 256 elements, as SiLU
		lo, hi = lo*256, min(hi*256, n)
		if useAVX512 {
			if hi > lo {
				geluTanhAVX512(&y[lo], &x[lo], hi-lo)
			}
			return
		}
		for i, v := range x[lo:hi] {
			f := float64(v)
			y[lo+i] = float32(0.5 * f * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(f+0.044715*f*f*f))))
		}
	})
}

// GELU sets y[i] = x[i]·Φ(x[i]) with the exact normal CDF: 0.5·x·(1 + erf(x/√2)), formed in float64.
func GELU(y, x []float32) {
	n := len(x)
	ParallelFor((n+255)/256, func(lo, hi int) {
		lo, hi = lo*256, min(hi*256, n)
		for i, v := range x[lo:hi] {
			f := float64(v)
			y[lo+i] = float32(0.5 * f * (1 + math.Erf(f/math.Sqrt2)))
		}
	})
}
