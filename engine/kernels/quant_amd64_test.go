package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// TestIn4KernelsAgree: every In4 assembly kernel the package has (in use on CPUs without AVX-512 VNNI, whose
// K-quant products the rows kernels compute: rows.go) gives each of its four input rows the portable product, bit
// for bit.
func TestIn4KernelsAgree(t *testing.T) {
	type in4Func = func(b []byte, qs []int8, d []float32, bsums []int16, y *float32, ystride int)
	kernels := map[string]struct {
		typ quant.Type
		f   in4Func
	}{
		"Q4_K/AVX2": {quant.Q4_K, dotQ4_KIn4AVX2},
		"Q5_K/AVX2": {quant.Q5_K, dotQ5_KIn4AVX2},
		"Q6_K/AVX2": {quant.Q6_K, dotQ6_KIn4AVX2},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for name, k := range kernels {
		t.Run(name, func(t *testing.T) {
			if !useAVX2 {
				t.Skip("the CPU lacks the instructions")
			}
			const cols, ystride = 768, 5
			w := randomQuantMatrix(t, rng, k.typ, 3, cols)
			x := make([]float32, 4*cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			var a qAct
			a.quantize(actQ8_K, x, cols)
			for o := range w.Rows {
				y := make([]float32, 4*ystride)
				xr := a.rows(0, 4)
				k.f(w.Row(o), xr.qs, xr.d, xr.bsums, &y[0], ystride)
				for r := range 4 {
					want := portableKernels[k.typ].dot(w.Row(o), a.row(r))
					if got := y[r*ystride]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("row %d · input %d = %g, portable %g", o, r, got, want)
					}
				}
			}
		})
	}
}
