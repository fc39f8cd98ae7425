package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/quant"
)

// treeCase is one sequence's draft tree verified in a pass, for one key/value head of heads query heads: the last
// token at position past, a chain of chain tokens after it, and leaves, leaf i the child of chain token
// parents[i] (−1: of the last token). The cache holds keys and values of every position before the leaves',
// written ahead (past + 1 + chain of them) in a ring of slots slots (0: a full cache, one slot per position);
// the leaves' own keys are beside it.
type treeCase struct {
	heads, d, past, chain, slots int
	parents                      []int
	half                         bool
	q                            []float32 // [heads, 1+chain+leaves, d]
	k, v                         []float32 // [positions, d]: the cache's keys and values by position
	k16, v16                     []uint16  // the same as float16 (half)
	ownK, ownV                   []float32 // [leaves, d]: the leaves' own keys and values
	sinks                        []float32
}

// newTreeCase draws a case's queries, keys and values; with half they are rounded to float16 as a float16
// cache (and hostOps, for the leaves' own keys) would give them back.
func newTreeCase(rng *rand.Rand, heads, d, past, chain, slots int, parents []int, half bool) *treeCase {
	c := &treeCase{heads: heads, d: d, past: past, chain: chain, slots: slots, parents: parents, half: half}
	rnd := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			if half {
				x[i] = quant.HalfToFloat32(quant.Float32ToHalf(x[i]))
			}
		}
		return x
	}
	held := c.held()
	c.q, c.k, c.v = rnd(heads*c.queries()*d), rnd(held*d), rnd(held*d)
	c.ownK, c.ownV = rnd(len(parents)*d), rnd(len(parents)*d)
	if half {
		c.k16, c.v16 = make([]uint16, len(c.k)), make([]uint16, len(c.v))
		for i := range c.k {
			c.k16[i], c.v16[i] = quant.Float32ToHalf(c.k[i]), quant.Float32ToHalf(c.v[i])
		}
	}
	return c
}

func (c *treeCase) held() int    { return c.past + 1 + c.chain }
func (c *treeCase) queries() int { return 1 + c.chain + len(c.parents) }

// leafPos is leaf i's position: one past its parent's.
func (c *treeCase) leafPos(i int) int { return c.past + c.parents[i] + 2 }

// runs are the cache's runs of the positions a query before position length may see, as kvcache.View.Runs gives
// them: every position before it in a full cache, the last slots of them in a ring (in two runs where the ring
// wraps). Each run's keys are in slot order, so a ring's runs are views of it as the cache's would be.
func (c *treeCase) runs(length int) []KeyRun {
	d := c.d
	run := func(lo, n int) KeyRun {
		if c.half {
			return KeyRun{K16: c.k16[lo*d : (lo+n)*d], V16: c.v16[lo*d : (lo+n)*d], Pos: lo, N: n}
		}
		return KeyRun{K: c.k[lo*d : (lo+n)*d], V: c.v[lo*d : (lo+n)*d], Pos: lo, N: n}
	}
	if c.slots == 0 || length <= c.slots {
		return []KeyRun{run(0, length)}
	}
	lo := length - c.slots
	wrap := (length - 1) / c.slots * c.slots // the newest lap's position in slot 0
	if wrap == lo {
		return []KeyRun{run(lo, c.slots)}
	}
	return []KeyRun{run(lo, wrap-lo), run(wrap, length-wrap)}
}

// jobs returns the case's attention as one job for the chain and the leaves together (shared), or as hostOps
// laid it out before: a job for the last token and the chain, and one per leaf over the cache up to its parent
// then its own key as a run of one.
func (c *treeCase) jobs(out []float32, shared bool) []AttentionJob {
	d, t := c.d, c.queries()
	job := func(t0, n, pos0 int, runs []KeyRun) AttentionJob {
		return AttentionJob{Q: c.q[t0*d:], QHead: t * d, QPos: d, Out: out[t0*c.heads*d:], OutHead: d, OutPos: c.heads * d,
			Heads: c.heads, T: n, Pos0: pos0, Runs: runs, Sinks: c.sinks}
	}
	chain := job(0, 1+c.chain, c.past, c.runs(c.held()))
	if shared {
		for i := range c.parents {
			chain.Leaves = append(chain.Leaves, TreeLeaf{Pos: c.leafPos(i), K: c.ownK[i*d : (i+1)*d], V: c.ownV[i*d : (i+1)*d]})
		}
		return []AttentionJob{chain}
	}
	jobs := []AttentionJob{chain}
	for i := range c.parents {
		at := c.leafPos(i)
		own := KeyRun{K: c.ownK[i*d : (i+1)*d], V: c.ownV[i*d : (i+1)*d], Pos: at, N: 1}
		jobs = append(jobs, job(1+c.chain+i, 1, at, append(c.runs(at), own)))
	}
	return jobs
}

// randomParents draws leaves leaves' parents among the last token and a chain of chain tokens.
func randomParents(rng *rand.Rand, chain, leaves int) []int {
	p := make([]int, leaves)
	for i := range p {
		p[i] = rng.IntN(chain+1) - 1
	}
	return p
}

// TestAttentionTreeLeaves: on every kernel path, a draft tree's leaves attending in their chain's job
// (AttentionJob.Leaves) give every output bit for bit as the per-leaf jobs did (the cache up to the parent, then
// the own key as a run): random trees over caches ending around the 64-key block boundaries (a leaf's own key
// alone in its block, or after the chain's), float32 and float16 caches, full and ring caches (a wrap among the
// runs), query groups of 1 to 7 heads, head sizes on and off the AVX-512 tiles, sliding windows, chunks, soft
// caps and attention sinks; several sequences' jobs in one call.
func TestAttentionTreeLeaves(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(40, 41))
		params := []AttentionParams{{}, {Window: 5}, {Window: 70}, {SoftCap: 3}, {Chunk: 64}, {Chunk: 16, SoftCap: 2}}
		for i := range 120 {
			heads := []int{1, 2, 6, 7}[i%4]
			d := []int{64, 128, 80, 16}[i/4%4]
			half, sinks := i%2 == 1, i%3 == 2
			p := params[i%len(params)]
			p.Scale = float32(1 / math.Sqrt(float64(d)))
			if p.SoftCap > 0 {
				p.Scale *= 8
			}
			var cases []*treeCase
			for range 1 + i%3 { // sequences, one job each (or one per leaf) in one call
				past := []int{0, 40, 54, 55, 62, 63, 64, 100, 118, 126, 127, 190, 250}[rng.IntN(13)]
				chain := 1 + rng.IntN(12)
				slots := 0
				if p.Window > 0 && i%4 < 2 {
					slots = p.Window + 64 // a ring: the window and the slack
				}
				c := newTreeCase(rng, heads, d, past, chain, slots, randomParents(rng, chain, 1+rng.IntN(20)), half)
				if sinks {
					c.sinks = make([]float32, heads)
					for h := range c.sinks {
						c.sinks[h] = float32(rng.NormFloat64() * 3)
					}
				}
				cases = append(cases, c)
			}
			name := fmt.Sprintf("case %d (heads %d, d %d, half %v, sinks %v, %+v)", i, heads, d, half, sinks, p)
			checkTreeJobs(t, name, p, cases)
		}
	})
}

// checkTreeJobs runs cases' attention as shared and as per-leaf jobs and compares every output bit for bit.
func checkTreeJobs(t *testing.T, name string, p AttentionParams, cases []*treeCase) {
	t.Helper()
	var shared, perLeaf []AttentionJob
	var got, want [][]float32
	for _, c := range cases {
		n := c.queries() * c.heads * c.d
		got, want = append(got, make([]float32, n)), append(want, make([]float32, n))
		shared = append(shared, c.jobs(got[len(got)-1], true)...)
		perLeaf = append(perLeaf, c.jobs(want[len(want)-1], false)...)
	}
	Attention(p, cases[0].d, shared)
	Attention(p, cases[0].d, perLeaf)
	for s, c := range cases {
		for i := range want[s] {
			if math.Float32bits(got[s][i]) != math.Float32bits(want[s][i]) {
				q := i / (c.heads * c.d)
				t.Fatalf("%s, sequence %d (past %d, chain %d, parents %v), query %d, element %d: %v, per-leaf jobs %v",
					name, s, c.past, c.chain, c.parents, q, i%(c.heads*c.d), got[s][i], want[s][i])
			}
		}
	}
}

// BenchmarkTreeAttention times one layer's attention of a draft tree's verification on Qwen2.5-Coder-1.5B's
// shapes (two key/value heads of 128, six query heads each, a float16 cache): a chain of 8 and 24 leaves (three
// beside each of the first eight positions) after contexts of 256 to 32768 positions, the leaves in the
// chain's job (shared) or each in a job of its own (per-leaf, as before). With -cpu 1 it reports the thread's CPU
// time too (benchThreadCPU), steadier than wall time on a shared machine.
func BenchmarkTreeAttention(b *testing.B) {
	rng := rand.New(rand.NewPCG(42, 43))
	const kvHeads, heads, d = 2, 6, 128
	parents := make([]int, 24)
	for i := range parents {
		parents[i] = i%8 - 1
	}
	for _, past := range []int{256, 1024, 4096, 16384, 32768} {
		var cases []*treeCase
		for range kvHeads {
			cases = append(cases, newTreeCase(rng, heads, d, past, 8, 0, parents, true))
		}
		p := AttentionParams{Scale: float32(1 / math.Sqrt(d))}
		for _, shared := range []bool{false, true} {
			var jobs []AttentionJob
			for _, c := range cases {
				jobs = append(jobs, c.jobs(make([]float32, c.queries()*heads*d), shared)...)
			}
			form := map[bool]string{false: "per-leaf", true: "shared"}[shared]
			b.Run(fmt.Sprintf("context=%d/%s", past, form), func(b *testing.B) { benchThreadCPU(b, func() { Attention(p, d, jobs) }) })
		}
	}
}

// benchThreadCPU runs f b.N times on one locked thread and, when GOMAXPROCS is 1 (the kernels then run on the
// calling thread), reports its CPU time per run as cpu-ns/op beside the wall time.
func benchThreadCPU(b *testing.B, f func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := testutil.ThreadCPU()
	b.ResetTimer()
	for range b.N {
		f()
	}
	b.StopTimer()
	if end := testutil.ThreadCPU(); end > 0 && runtime.GOMAXPROCS(0) == 1 {
		b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
	}
}
