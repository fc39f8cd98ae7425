package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// TestAttentionHalf: runs of float16 keys and values give, bit for bit, what runs of the same values in float32
// give, on both kernel paths, for head sizes that take the AVX-512 tiles and one that does not.
func TestAttentionHalf(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, d := range []int{64, 24} {
		for _, tq := range []int{1, 5, 70} {
			c := newAttnCase(rng, 3, tq, 150, d)
			half := func(x []float32) []uint16 {
				h := make([]uint16, len(x))
				quant.HalvesClamped(h, x)
				quant.RoundHalfClamped(x)
				return h
			}
			pk, pv, k, v := half(c.pastK), half(c.pastV), half(c.k), half(c.v)
			p := AttentionParams{Scale: 1 / float32(math.Sqrt(float64(d)))}
			want := make([]float32, c.t*c.heads*d)
			Attention(p, d, []AttentionJob{c.job(want)})
			got := make([]float32, len(want))
			job := c.job(got)
			job.Runs = []KeyRun{{K16: pk, V16: pv, Pos: 0, N: c.past}, {K16: k, V16: v, Pos: c.pos0, N: c.t}}
			Attention(p, d, []AttentionJob{job})
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("d=%d t=%d: output %d is %g from float16 runs, %g from the same values in float32", d, tq, i, got[i], want[i])
				}
			}
		}
	}
}

// BenchmarkAttentionDecode is one decode step's attention over 4096 cached positions of 32 caches (as many
// layers' key/value heads: 64 MB of float32, more than the caches hold), 3 query heads per key/value head (as
// SmolLM2's groups), head size 64, from float32 and from float16 runs.
func BenchmarkAttentionDecode(b *testing.B) {
	const d, past, heads, caches = 64, 4096, 3, 32
	rng := rand.New(rand.NewPCG(1, 2))
	p := AttentionParams{Scale: 0.125}
	var f32, f16 []AttentionJob
	for range caches {
		c := newAttnCase(rng, heads, 1, past, d)
		pk, pv := make([]uint16, len(c.pastK)), make([]uint16, len(c.pastV))
		quant.HalvesClamped(pk, c.pastK)
		quant.HalvesClamped(pv, c.pastV)
		out := make([]float32, heads*d)
		f32 = append(f32, c.job(out))
		job := c.job(out)
		job.Runs[0] = KeyRun{K16: pk, V16: pv, Pos: 0, N: past}
		f16 = append(f16, job)
	}
	for _, bc := range []struct {
		name string
		jobs []AttentionJob
	}{{"f32", f32}, {"f16", f16}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				for i := range bc.jobs {
					Attention(p, d, bc.jobs[i:i+1]) // one layer's head at a time, as decoding runs them
				}
			}
		})
	}
}
