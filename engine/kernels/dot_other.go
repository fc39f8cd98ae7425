//go:build !amd64

package kernels

import "github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"

// DotF32 is the dot product of two equally long float32 vectors.
func DotF32(a, b []float32) float32 { return dotF32Go(a, b) }

// DotBF16 is the dot product of a float32 vector with a bfloat16 one, widened exactly on the fly.
func DotBF16(a []float32, b []bfloat16.BFloat16) float32 { return dotBF16Go(a, b) }

// dotBF16x3 sets y[r·stride] = DotBF16(x[r·n:(r+1)·n], b) for the first 3·triples rows of x (n = len(b)).
func dotBF16x3(x []float32, b []bfloat16.BFloat16, y []float32, stride, triples int) {
	dotRowsGo(x, b, y, stride, 3*triples, dotBF16Go)
}

// dotF32x3 sets y[r·stride] = DotF32(x[r·n:(r+1)·n], b) for the first 3·triples rows of x (n = len(b)).
func dotF32x3(x, b, y []float32, stride, triples int) {
	dotRowsGo(x, b, y, stride, 3*triples, dotF32Go)
}

// AxpyF32 adds a·x to y (len(x) ≥ len(y)).
func AxpyF32(y []float32, a float32, x []float32) { axpyF32Go(y, a, x) }

var useAVX2 = false // for the tests' kernel paths
