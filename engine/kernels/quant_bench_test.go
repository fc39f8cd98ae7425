package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkLinearQuant times LinearQuant on a TinyLlama-sized [2048×2048] weight per block format (compare
// BenchmarkLinear's bf16): the weight bytes/s of decode (1 row) and the FLOP rate of batches.
func BenchmarkLinearQuant(b *testing.B) {
	const in, out = 2048, 2048
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range quantTypes {
		w := randomQuantMatrix(b, rng, typ, out, in)
		for _, rows := range []int{1, 16, 128} {
			b.Run(fmt.Sprintf("%s/rows=%d", typ, rows), func(b *testing.B) {
				x, y := make([]float32, rows*in), make([]float32, rows*out)
				for i := range x {
					x[i] = rng.Float32() - 0.5
				}
				b.SetBytes(int64(len(w.Data)))
				for b.Loop() {
					LinearQuant(y, x, w, nil)
				}
				b.ReportMetric(float64(2*in*out*rows)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// BenchmarkLinearMXFP4 times LinearQuant of an MXFP4 matrix the size of one gpt-oss expert's down projection
// ([2880×2880]) on the assembly kernels and the Go ones: the weight bytes/s of decode and the FLOP rate of batches.
func BenchmarkLinearMXFP4(b *testing.B) {
	const in, out = 2880, 2880
	rng := rand.New(rand.NewPCG(1, 2))
	w := randomMXFP4(b, rng, out, in)
	for _, k := range []struct {
		name string
		k    mxfp4Kernels
	}{{"best", mxfp4Best()}, {"go", mxfp4Go}} {
		for _, rows := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("%s/rows=%d", k.name, rows), func(b *testing.B) {
				x, y := make([]float32, rows*in), make([]float32, rows*out)
				for i := range x {
					x[i] = rng.Float32() - 0.5
				}
				b.SetBytes(int64(len(w.Data)))
				for b.Loop() {
					linearMXFP4(y, x, w, nil, k.k)
				}
				b.ReportMetric(float64(2*in*out*rows)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}
