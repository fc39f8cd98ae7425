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
