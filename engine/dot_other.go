//go:build !amd64

package engine

import "github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"

// dotF32 is the dot product of two equally long float32 vectors.
func dotF32(a, b []float32) float32 { return dotF32Go(a, b) }

// dotBF16 is the dot product of a float32 vector with a bfloat16 one, widened exactly on the fly.
func dotBF16(a []float32, b []bfloat16.BFloat16) float32 { return dotBF16Go(a, b) }

// dotBF16x3 is dotBF16 of a0, a1 and a2 with the same b.
func dotBF16x3(a0, a1, a2 []float32, b []bfloat16.BFloat16) [3]float32 {
	return [3]float32{dotBF16Go(a0, b), dotBF16Go(a1, b), dotBF16Go(a2, b)}
}

// dotF32x3 is dotF32 of a0, a1 and a2 with the same b.
func dotF32x3(a0, a1, a2, b []float32) [3]float32 {
	return [3]float32{dotF32Go(a0, b), dotF32Go(a1, b), dotF32Go(a2, b)}
}

// axpyF32 adds a·x to y (len(x) ≥ len(y)).
func axpyF32(y []float32, a float32, x []float32) { axpyF32Go(y, a, x) }
