package engine

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"golang.org/x/sys/cpu"
)

// useAVX2 selects the AVX2/FMA dot products (dot_amd64.s). BenchmarkLinear on the 2-core VM, [2048×2048]
// weights, portable Go → AVX2: f32 1 row 4.5 → 9.8 GFLOP/s, 16 rows 3.4 → 32, 128 rows 3.0 → 42; bf16 1 row
// 2.0 → 27. The three-row kernels (a weight row loaded, and widened, once for three input rows) took 16 rows
// to 51 GFLOP/s for f32 (from 32) and 47 for bf16 (from 29). Every host kernel sums each row exactly as the
// one-row dot product does, so a sequence computes the same values alone and in a batch (the sums are ordered
// differently from the portable loops, within float32 rounding of them).
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dotF32AVX2(a, b []float32) float32

//go:noescape
func dotBF16AVX2(a []float32, b []bfloat16.BFloat16) float32

// dotF32 is the dot product of two equally long float32 vectors.
func dotF32(a, b []float32) float32 {
	if useAVX2 {
		return dotF32AVX2(a, b[:len(a)])
	}
	return dotF32Go(a, b)
}

// dotBF16 is the dot product of a float32 vector with a bfloat16 one, widened exactly on the fly.
func dotBF16(a []float32, b []bfloat16.BFloat16) float32 {
	if useAVX2 {
		return dotBF16AVX2(a, b[:len(a)])
	}
	return dotBF16Go(a, b)
}

//go:noescape
func dotBF16x3AVX2(a0, a1, a2 []float32, b []bfloat16.BFloat16, out *[3]float32)

// dotBF16x3 is dotBF16 of a0, a1 and a2 with the same b, bit for bit, loading and widening b once: the batched
// decode step's kernel (three sequences per pass over a weight row).
func dotBF16x3(a0, a1, a2 []float32, b []bfloat16.BFloat16) (y [3]float32) {
	if useAVX2 {
		n := len(a0)
		dotBF16x3AVX2(a0, a1[:n], a2[:n], b[:n], &y)
		return y
	}
	return [3]float32{dotBF16Go(a0, b), dotBF16Go(a1, b), dotBF16Go(a2, b)}
}

//go:noescape
func dotF32x3AVX2(a0, a1, a2, b []float32, out *[3]float32)

// dotF32x3 is dotF32 of a0, a1 and a2 with the same b, bit for bit, loading b once.
func dotF32x3(a0, a1, a2, b []float32) (y [3]float32) {
	if useAVX2 {
		n := len(a0)
		dotF32x3AVX2(a0, a1[:n], a2[:n], b[:n], &y)
		return y
	}
	return [3]float32{dotF32Go(a0, b), dotF32Go(a1, b), dotF32Go(a2, b)}
}

//go:noescape
func axpyF32AVX2(y []float32, a float32, x []float32)

// axpyF32 adds a·x to y (len(x) ≥ len(y)): attention's weighted sum of values.
func axpyF32(y []float32, a float32, x []float32) {
	if useAVX2 {
		axpyF32AVX2(y, a, x[:len(y)])
		return
	}
	axpyF32Go(y, a, x)
}
