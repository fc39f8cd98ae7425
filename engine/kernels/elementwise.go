package kernels

import "math"

// Elementwise host ops on all cores, with AVX-512 where the CPU has it (same results as the portable loops but
// for RMSNorm's sum of squares, summed in another order, in float64 both ways).

// elemChunk is the elements of a chunk ParallelFor hands out: below 64 chunks (256 Ki elements) one core does
// all, as a second one costs more to start than it saves.
const elemChunk = 4096

// Add sets y[i] = a[i] + b[i] for i < len(y).
func Add(y, a, b []float32) {
	elementwise2(y, a, b, addAVX512, func(u, v float32) float32 { return u + v })
}

// Mul sets y[i] = a[i]·b[i] for i < len(y).
func Mul(y, a, b []float32) {
	elementwise2(y, a, b, mulAVX512, func(u, v float32) float32 { return u * v })
}

func elementwise2(y, a, b []float32, asm func(y, x, b *float32, n int), f func(u, v float32) float32) {
	n := len(y)
	a, b = a[:n], b[:n]
	ParallelFor((n+elemChunk-1)/elemChunk, func(lo, hi int) {
		lo, hi = lo*elemChunk, min(hi*elemChunk, n)
		if useAVX512 {
			if hi > lo {
				asm(&y[lo], &a[lo], &b[lo], hi-lo)
			}
			return
		}
		for i := lo; i < hi; i++ {
			y[i] = f(a[i], b[i])
		}
	})
}

// SoftCap sets y[i] = c·tanh(x[i]/c) for i < len(x) (Gemma's soft-capping).
func SoftCap(y, x []float32, c float32) {
	n := len(x)
	ParallelFor((n+elemChunk-1)/elemChunk, func(lo, hi int) {
		lo, hi = lo*elemChunk, min(hi*elemChunk, n)
		if useAVX512 {
			if hi > lo {
				softCapAVX512(&y[lo], &x[lo], hi-lo, c)
			}
			return
		}
		for i, v := range x[lo:hi] {
			y[lo+i] = float32(math.Tanh(float64(v/c))) * c
		}
	})
}

// RMSNorm sets each row r (len(w) elements) of y to x_r / √(mean(x_r²) + eps) · (offset + w): the mean in
// float64, the scale rounded to float32, then (x·scale)·(offset + w) in float32. Rows go to every core.
func RMSNorm(y, x, w []float32, eps float64, offset float32) {
	h := len(w)
	rows := len(x) / h
	workers := 0
	if rows*h < 64*elemChunk {
		workers = 1
	}
	parallelFor(rows, workers, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := x[r*h:(r+1)*h], y[r*h:(r+1)*h]
			var ss float64
			if useAVX512 {
				ss = sumSquaresAVX512(&xr[0], h)
			} else {
				for _, v := range xr {
					ss += float64(v) * float64(v)
				}
			}
			scale := float32(1 / math.Sqrt(ss/float64(h)+eps))
			if useAVX512 {
				scaleRowAVX512(&yr[0], &xr[0], &w[0], h, scale, offset)
				continue
			}
			for i, v := range xr {
				yr[i] = v * scale * (offset + w[i])
			}
		}
	})
}

// LogSumExp returns ln Σ exp(x[i]), computed in float64 after subtracting the largest value (so no term
// overflows): the normalizer of softmax(x), for log-probabilities ln p(i) = x[i] - LogSumExp(x).
func LogSumExp(x []float32) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, float64(v))
	}
	sum := 0.0
	for _, v := range x {
		sum += math.Exp(float64(v) - m)
	}
	return m + math.Log(sum)
}
