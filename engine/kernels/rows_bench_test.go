package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// BenchmarkLinearQuantRows times LinearQuant with 1 to 32 input rows on a Qwen2.5-1.5B MLP-shaped matrix
// [8960×1536], per block format of the real Q4_K_M file: the budget of a batch step or a draft's verification,
// where a k-row product should cost little more than a one-row one (the weights are read once).
func BenchmarkLinearQuantRows(b *testing.B) {
	const in, out = 1536, 8960
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K, quant.Q8_0, quant.Q4_0, quant.Q5_K} {
		w := randomQuantMatrix(b, rng, typ, out, in)
		for _, rows := range []int{1, 2, 4, 8, 16, 32} {
			b.Run(fmt.Sprintf("%s/rows=%d", typ, rows), func(b *testing.B) {
				x, y := make([]float32, rows*in), make([]float32, rows*out)
				for i := range x {
					x[i] = rng.Float32() - 0.5
				}
				b.SetBytes(int64(len(w.Data)))
				for b.Loop() {
					LinearQuant(y, x, w, nil)
				}
			})
		}
	}
}

// BenchmarkRowsPaths times each path of a k-row product in the tiled order (the rows kernels, the transposing
// tiled kernel, the tiled kernels) on 12 [8960×1536] matrices in turn (93 MB of Q4_K: the weights come from
// memory, as in a pass), reporting thread CPU time per matrix (cpu-ns/op, with GOMAXPROCS=1): what sets the
// crossovers of rowsAsm and tiledRowsAsm (docs/performance-log.md, issue 40).
func BenchmarkRowsPaths(b *testing.B) {
	const in, out, mats = 1536, 8960, 12
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range []quant.Type{quant.Q4_K, quant.Q6_K} {
		f := rowsKernels[typ]
		if f == nil {
			b.Skipf("%v: no rows kernels on this CPU", typ)
		}
		ws := make([]QuantMatrix, mats)
		for i := range ws {
			ws[i] = randomQuantMatrix(b, rng, typ, out, in)
		}
		rowsOnly := *f
		rowsOnly.trans, rowsOnly.tiledFrom = transKernel{}, rowsMost+1
		paths := map[string]func(y, x []float32, w QuantMatrix){
			"rows":  func(y, x []float32, w QuantMatrix) { linearQuantRows(y, x, w, nil, &rowsOnly) },
			"tiled": func(y, x []float32, w QuantMatrix) { linearTiled(y, x, w, nil, f.tiled, f.tiled.asmKernel) },
		}
		if f.trans.kernels[0] != nil {
			paths["trans"] = func(y, x []float32, w QuantMatrix) { linearTiledRows(y, x, w, nil, f) }
		}
		for _, rows := range []int{1, 2, 3, 4, 5, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 48, 64, 128} {
			x, y := make([]float32, rows*in), make([]float32, rows*out)
			for i := range x {
				x[i] = rng.Float32() - 0.5
			}
			for _, name := range []string{"rows", "trans", "tiled"} {
				run := paths[name]
				if run == nil || (name == "rows" && (rows > rowsMost || f.rows == nil)) {
					continue
				}
				b.Run(fmt.Sprintf("%v/%s/rows=%d", typ, name, rows), func(b *testing.B) {
					n := 0
					benchThreadCPU(b, func() {
						run(y, x, ws[n%mats])
						n++
					})
				})
			}
		}
	}
}
