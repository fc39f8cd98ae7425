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

// ClampedSwiGLU sets y[i] to gpt-oss's gated activation of gate[i] and up[i] (GptOssExperts._apply_gate): with
// g = min(gate, limit) and u = clamp(up, −limit, limit), (u + 1)·g·σ(alpha·g), in float32 as transformers
// computes it (the sigmoid formed in float64 and rounded).
func ClampedSwiGLU(y, gate, up []float32, alpha, limit float32) {
	for i, g := range gate {
		g = min(g, limit)
		u := max(min(up[i], limit), -limit)
		s := float32(1 / (1 + math.Exp(-float64(g*alpha))))
		y[i] = (u + 1) * (g * s)
	}
}
