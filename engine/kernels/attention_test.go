package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// attnCase is one sequence's queries sharing a key/value head: heads × t queries from position pos0, over a
// cache of past keys (positions 0 … past−1) and the t new keys.
type attnCase struct {
	heads, t, pos0, past, d int
	q, pastK, pastV, k, v   []float32
	sinks                   []float32 // nil: none
}

func newAttnCase(rng *rand.Rand, heads, t, past, d int) *attnCase {
	c := &attnCase{heads: heads, t: t, pos0: past, past: past, d: d}
	rnd := func(n int, s float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * s)
		}
		return x
	}
	c.q, c.k, c.v = rnd(heads*t*d, 1), rnd(t*d, 1), rnd(t*d, 1)
	c.pastK, c.pastV = rnd(past*d, 1), rnd(past*d, 1)
	return c
}

// job lays the case out as the engine does: q [heads, t, d], out [t, heads·d].
func (c *attnCase) job(out []float32) AttentionJob {
	return AttentionJob{
		Q: c.q, QHead: c.t * c.d, QPos: c.d,
		Out: out, OutHead: c.d, OutPos: c.heads * c.d,
		Heads: c.heads, T: c.t, Pos0: c.pos0,
		Runs:  []KeyRun{{K: c.pastK, V: c.pastV, Pos: 0, N: c.past}, {K: c.k, V: c.v, Pos: c.pos0, N: c.t}},
		Sinks: c.sinks,
	}
}

// reference is attention in float64, from the definition.
func (c *attnCase) reference(p AttentionParams) []float64 {
	d := c.d
	out := make([]float64, c.t*c.heads*d)
	for h := range c.heads {
		for t := range c.t {
			qp := c.pos0 + t
			q := c.q[(h*c.t+t)*d:][:d]
			type kv struct{ k, v []float32 }
			var keys []kv
			for j := range c.past + c.t {
				kp, k, v := j, c.pastK, c.pastV
				row := j
				if j >= c.past {
					kp, k, v, row = c.pos0+j-c.past, c.k, c.v, j-c.past
				}
				if kp > qp || (p.Window > 0 && kp <= qp-p.Window) || (p.Chunk > 0 && kp/p.Chunk != qp/p.Chunk) {
					continue
				}
				keys = append(keys, kv{k[row*d:][:d], v[row*d:][:d]})
			}
			s := make([]float64, len(keys))
			top := math.Inf(-1)
			for j, kv := range keys {
				for i := range d {
					s[j] += float64(q[i]) * float64(kv.k[i])
				}
				s[j] *= float64(p.Scale)
				if p.SoftCap > 0 {
					s[j] = float64(p.SoftCap) * math.Tanh(s[j]/float64(p.SoftCap))
				}
				top = max(top, s[j])
			}
			if c.sinks != nil {
				top = max(top, float64(c.sinks[h]))
			}
			sum := 0.0
			for j := range s {
				s[j] = math.Exp(s[j] - top)
				sum += s[j]
			}
			if c.sinks != nil {
				sum += math.Exp(float64(c.sinks[h]) - top)
			}
			o := out[t*c.heads*d+h*d:][:d]
			for j, kv := range keys {
				for i := range d {
					o[i] += s[j] / sum * float64(kv.v[i])
				}
			}
		}
	}
	return out
}

// TestAttention: on every kernel path, Attention agrees with a float64 computation from the definition, with
// and without a cache, a sliding window, chunks, soft-capping and attention sinks, across head sizes (the portable fallback included
// where the head is not a multiple of 16) and lengths around the tile and block sizes.
func TestAttention(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(21, 22))
		for _, tc := range []struct {
			heads, t, past, d int
			p                 AttentionParams
			sinks             bool
		}{
			{1, 1, 0, 64, AttentionParams{}, false},
			{3, 7, 0, 64, AttentionParams{}, false},
			{8, 1, 130, 64, AttentionParams{}, false},
			{3, 70, 0, 64, AttentionParams{}, false},
			{8, 40, 100, 64, AttentionParams{Window: 50}, false},
			{2, 30, 200, 128, AttentionParams{SoftCap: 5}, false},
			{4, 9, 17, 80, AttentionParams{Window: 10, SoftCap: 2}, false},
			{2, 5, 3, 8, AttentionParams{}, false},
			{1, 3, 70, 96, AttentionParams{Window: 1}, false},
			{4, 90, 40, 64, AttentionParams{Chunk: 16}, false},   // chunks restarting within a tile and a block
			{2, 1, 150, 64, AttentionParams{Chunk: 64}, false},   // a decode step, its chunk begun at 128
			{2, 3, 127, 64, AttentionParams{Chunk: 64}, false},   // a chunk's last query, then the next chunk's first two
			{3, 20, 100, 80, AttentionParams{Chunk: 100}, false}, // a chunk starting with the pass: no cached key seen
			{4, 20, 0, 64, AttentionParams{}, true},
			{2, 1, 130, 64, AttentionParams{Window: 8}, true},
			{3, 9, 17, 80, AttentionParams{Window: 10}, true},
		} {
			c := newAttnCase(rng, tc.heads, tc.t, tc.past, tc.d)
			if tc.sinks { // some far above the scores, some far below, some among them
				c.sinks = make([]float32, tc.heads)
				for h := range c.sinks {
					c.sinks[h] = float32(rng.NormFloat64() * 3)
				}
			}
			p := tc.p
			p.Scale = float32(1 / math.Sqrt(float64(tc.d)))
			if p.SoftCap > 0 {
				p.Scale *= 8 // scores large enough for the cap to matter
			}
			out := make([]float32, tc.t*tc.heads*tc.d)
			Attention(p, tc.d, []AttentionJob{c.job(out)})
			want := c.reference(p)
			for i, w := range want {
				if math.Abs(float64(out[i])-w) > 2e-5*(1+math.Abs(w)) {
					t.Fatalf("%+v, element %d: %g, want %g", tc, i, out[i], w)
				}
			}
		}
	})
}

// TestAttentionIndependent: a sequence's attention outputs are bit-identical whether it runs alone or beside
// other sequences, and when it is padded with later positions (a batch padded to its longest prompt).
func TestAttentionIndependent(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(23, 24))
		const heads, d = 3, 64
		p := AttentionParams{Scale: 0.125}
		c := newAttnCase(rng, heads, 37, 20, d)
		alone := make([]float32, c.t*heads*d)
		Attention(p, d, []AttentionJob{c.job(alone)})

		// Padded: 13 more positions after the real ones (their queries and keys are garbage).
		pad := newAttnCase(rng, heads, 50, 20, d)
		pad.pastK, pad.pastV = c.pastK, c.pastV
		copy(pad.k, c.k)
		copy(pad.v, c.v)
		for h := range heads {
			copy(pad.q[h*50*d:], c.q[h*37*d:(h+1)*37*d])
		}
		other := newAttnCase(rng, heads, 5, 90, d)
		padded, otherOut := make([]float32, 50*heads*d), make([]float32, 5*heads*d)
		Attention(p, d, []AttentionJob{other.job(otherOut), pad.job(padded)})
		for i := range alone {
			if math.Float32bits(alone[i]) != math.Float32bits(padded[i]) {
				t.Fatalf("element %d: %g alone, %g padded in a batch", i, alone[i], padded[i])
			}
		}
	})
}

// TestSoftmaxRow: the AVX-512 row kernel (vectorized exp and tanh) agrees with the Go one to float32 rounding,
// at lengths around its 16 lanes, with and without soft-capping, for weights spanning e^−100 … 1.
func TestSoftmaxRow(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	rng := rand.New(rand.NewPCG(25, 26))
	for _, n := range []int{1, 5, 16, 17, 64, 100} {
		for _, capv := range []float32{0, 3} {
			s := make([]float32, n)
			for i := range s {
				s[i] = float32(rng.Float64()*120 - 100)
			}
			a, b := append([]float32(nil), s...), append([]float32(nil), s...)
			ma, sa := softmaxRowAVX512(&a[0], n, 0.9, capv, -50)
			mb, sb := softmaxRowGo(b, 0.9, capv, -50)
			name := fmt.Sprintf("n %d, cap %g", n, capv)
			if math.Abs(float64(ma-mb)) > 1e-6*(1+math.Abs(float64(mb))) || math.Abs(float64(sa-sb)) > 1e-6*float64(sb) {
				t.Fatalf("%s: max %g sum %g, Go %g %g", name, ma, sa, mb, sb)
			}
			tol := 3e-7 // exp: a few ulps
			if capv > 0 {
				tol = 2e-6 // tanh's absolute error, times the cap, moves the exponent
			}
			for i := range a {
				if math.Abs(float64(a[i]-b[i])) > tol*float64(b[i])+1e-38 {
					t.Fatalf("%s, element %d: %g, Go %g", name, i, a[i], b[i])
				}
			}
		}
	}
}
