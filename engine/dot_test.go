package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
)

// TestDotKernels: the dot products the host kernels use agree with a float64 sum at every length, tails
// included, and bf16 elements are widened exactly.
func TestDotKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 3, 7, 8, 9, 31, 32, 33, 40, 63, 64, 100, 2048, 2051} {
		a := make([]float32, n)
		b := make([]float32, n+5) // longer than a: only len(a) elements count
		bb := make([]bfloat16.BFloat16, n+5)
		for i := range b {
			b[i] = rng.Float32()*2 - 1
			bb[i] = bfloat16.FromFloat32(b[i])
		}
		for i := range a {
			a[i] = rng.Float32()*2 - 1
		}
		var want, wantBF, mag float64
		for i := range a {
			want += float64(a[i]) * float64(b[i])
			wantBF += float64(a[i]) * float64(bb[i].Float32())
			mag += math.Abs(float64(a[i]) * float64(b[i]))
		}
		tol := 1e-6 * (mag + 1)
		for _, k := range []struct {
			name      string
			got, want float64
		}{
			{"dotF32", float64(dotF32(a, b)), want},
			{"dotF32Go", float64(dotF32Go(a, b)), want},
			{"dotBF16", float64(dotBF16(a, bb)), wantBF},
			{"dotBF16Go", float64(dotBF16Go(a, bb)), wantBF},
		} {
			if math.Abs(k.got-k.want) > tol {
				t.Errorf("%s, length %d: %g, want %g (±%g)", k.name, n, k.got, k.want, tol)
			}
		}
		// The three-row kernel gives each row exactly what dotBF16 gives it alone (a sequence decodes the
		// same alone and in a batch).
		a1, a2 := make([]float32, n+3), make([]float32, n+3) // longer than a: only len(a) elements count
		for i := range a1 {
			a1[i], a2[i] = rng.Float32()*2-1, rng.Float32()*200-100
		}
		y, yf := dotBF16x3(a, a1, a2, bb), dotF32x3(a, a1, a2, b)
		for r, x := range [][]float32{a, a1[:n], a2[:n]} {
			if want := dotBF16(x, bb); math.Float32bits(y[r]) != math.Float32bits(want) {
				t.Errorf("dotBF16x3 row %d, length %d: %g, dotBF16 gives %g", r, n, y[r], want)
			}
			if want := dotF32(x, b); math.Float32bits(yf[r]) != math.Float32bits(want) {
				t.Errorf("dotF32x3 row %d, length %d: %g, dotF32 gives %g", r, n, yf[r], want)
			}
		}
	}
}
