package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
)

// BenchmarkLinear times Linear on a TinyLlama-sized [2048×2048] weight for 1 to 512 input rows: the decode
// kernel's weight GB/s, and how the cost grows with the batch and the prompt.
func BenchmarkLinear(b *testing.B) {
	benchmarkLinear(b, 2048, 2048)
}

// BenchmarkLinearShortRows is BenchmarkLinear for SmolLM2-135M's [1536×576] up-projection: short weight rows,
// where each kernel call's fixed cost weighs more.
func BenchmarkLinearShortRows(b *testing.B) {
	benchmarkLinear(b, 576, 1536)
}

// BenchmarkLinearShapes covers the other matrices of the two shapes the speed targets use (TinyLlama-1.1B's
// MLP [5632×2048] and [2048×5632], SmolLM2-135M's down projection [576×1536]) at decode, batch and prefill
// row counts.
func BenchmarkLinearShapes(b *testing.B) {
	for _, s := range [][2]int{{2048, 5632}, {5632, 2048}, {1536, 576}} {
		b.Run(fmt.Sprintf("%dx%d", s[1], s[0]), func(b *testing.B) { benchmarkLinear(b, s[0], s[1], 1, 16, 512) })
	}
}

func benchmarkLinear(b *testing.B, in, out int, rowCounts ...int) {
	if len(rowCounts) == 0 {
		rowCounts = []int{1, 4, 16, 128, 512}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	wf, wb := randomWeights(rng, in*out)
	for _, dt := range []struct {
		name  string
		flat  any
		bytes int
	}{{"f32", wf, 4}, {"bf16", wb, 2}} {
		for _, rows := range rowCounts {
			b.Run(fmt.Sprintf("%s/rows=%d", dt.name, rows), func(b *testing.B) {
				x, y := make([]float32, rows*in), make([]float32, rows*out)
				for i := range x {
					x[i] = rng.Float32() - 0.5
				}
				b.SetBytes(int64(in * out * dt.bytes))
				for b.Loop() {
					switch w := dt.flat.(type) {
					case []float32:
						Linear(y, x, w, nil, in)
					case []bfloat16.BFloat16:
						Linear(y, x, w, nil, in)
					}
				}
				b.ReportMetric(float64(2*in*out*rows)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// randomWeights returns n uniform weights in [-0.5, 0.5) as f32 and the same rounded to bf16.
func randomWeights(rng *rand.Rand, n int) ([]float32, []bfloat16.BFloat16) {
	wf := make([]float32, n)
	wb := make([]bfloat16.BFloat16, n)
	for i := range wf {
		wf[i] = rng.Float32() - 0.5
		wb[i] = bfloat16.FromFloat32(wf[i])
	}
	return wf, wb
}
