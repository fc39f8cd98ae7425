package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestElementwise: on every kernel path, Add and Mul are exact, SoftCap and RMSNorm within float32 rounding of
// their float64 formulas, at lengths around the 16 lanes and the parallel chunks.
func TestElementwise(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(51, 52))
		for _, n := range []int{0, 1, 15, 16, 17, 100, 4096, 70001} {
			a, b, y := make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range a {
				a[i], b[i] = float32(rng.NormFloat64()*10), float32(rng.NormFloat64())
			}
			Add(y, a, b)
			for i := range y {
				if y[i] != a[i]+b[i] {
					t.Fatalf("Add, length %d, element %d: %g, want %g", n, i, y[i], a[i]+b[i])
				}
			}
			Mul(y, a, b)
			for i := range y {
				if y[i] != a[i]*b[i] {
					t.Fatalf("Mul, length %d, element %d: %g, want %g", n, i, y[i], a[i]*b[i])
				}
			}
			SoftCap(y, a, 3)
			for i := range y {
				if want := 3 * math.Tanh(float64(a[i])/3); math.Abs(float64(y[i])-want) > 1e-6 {
					t.Fatalf("SoftCap, length %d, element %d (%g): %g, want %g", n, i, a[i], y[i], want)
				}
			}
		}
		for _, h := range []int{1, 16, 33, 576} {
			for _, rows := range []int{1, 3, 130} {
				x, w, y := make([]float32, rows*h), make([]float32, h), make([]float32, rows*h)
				for i := range x {
					x[i] = float32(rng.NormFloat64() * 3)
				}
				for i := range w {
					w[i] = float32(rng.NormFloat64())
				}
				RMSNorm(y, x, w, 1e-6, 1)
				for r := range rows {
					ss := 0.0
					for _, v := range x[r*h : (r+1)*h] {
						ss += float64(v) * float64(v)
					}
					scale := 1 / math.Sqrt(ss/float64(h)+1e-6)
					for i, v := range x[r*h : (r+1)*h] {
						want := float64(v) * scale * (1 + float64(w[i]))
						if got := float64(y[r*h+i]); math.Abs(got-want) > 3e-7*math.Abs(want)+1e-12 {
							t.Fatalf("RMSNorm, %d rows of %d, row %d element %d: %g, want %g", rows, h, r, i, got, want)
						}
					}
				}
			}
		}
	})
}

func TestLogSumExp(t *testing.T) {
	if got := LogSumExp([]float32{0, float32(math.Log(3))}); math.Abs(got-math.Log(4)) > 1e-6 {
		t.Errorf("LogSumExp = %v, want ln 4", got)
	}
	// Values whose exponentials overflow float64 alone: the largest is subtracted first.
	if got := LogSumExp([]float32{1000, 1000}); math.Abs(got-(1000+math.Ln2)) > 1e-9 {
		t.Errorf("LogSumExp(1000, 1000) = %v, want 1000 + ln 2", got)
	}
}
