package engine

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"

	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/engine/kernels/ggml"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/kvcache"
)

// hostOps implements Ops directly on host arrays with hand-written kernels. Decode steps (one new position)
// use it: there the time goes into matrix-vector products over the weights, which a plain Go loop over the
// shared device buffers runs several times faster than simplego's DotGeneral, and no graph is executed at all.
//
// Activations are *hostArray; weights are the *deviceTensor buffers the transfer stage filled (f32 or bf16,
// widened on the fly). The cache is the graph path's, laid out the same way; attention has no mask array but
// positions: row i's queries are at past[i], past[i]+1, …, its cache slots hold the runs of positions the view
// gives (kvcache.View.Runs), and kernels.Attention applies causality and the window from those.
type hostOps struct {
	// observe, when set, is called with the input rows of every product and its weight's name
	// (Options.ObserveInputs).
	observe  func(tensor string, x []float32, cols int)
	cos, sin []float32 // [B, T, rotary dims]
	past     []int     // [B]: positions each row has in the cache (its first query's position)
	pos      [][]int   // [B][T]: each query's position (past[b]+t, but a draft tree's leaves at their depths)
	// tree, for a group that verifies a draft tree (one row): its leaves attend to their ancestors and to
	// themselves, and only the last token and the chain are written to the cache.
	tree   *draftTree
	window int           // the layer's sliding window (0: none)
	chunk  int           // the layer's attention chunk (0: none)
	kv     *kvcache.View // the layer's cache: Slot.K/V, or K16/V16 ([B, kvHeads, S = kv.Slots(), headDim])
	// rows maps the activations' batch index to the cache's (the sequences still decoding); nil is the identity.
	rows []int
	// arena, when set, supplies the arrays the ops return (else they are fresh).
	arena *hostArena
	// err receives the first error writing the cache (Attention), which the Ops methods cannot return.
	err *error
	// bf16Products: bf16 weight matrices multiply activations rounded to bf16 (runner.bf16Products).
	bf16Products bool
	// tiled: the rows are passes of prompts of kernels.PromptTileRows new tokens or more (each chunk of one,
	// however short) or feeds of that many positions (forward), so block-quantized products take
	// kernels.LinearQuantPrompt, whose tiled products round in their own order; shorter prompts, decode steps and
	// the head take LinearQuant. Chosen per sequence, never by the batch, so a sequence gets the same bits alone
	// and batched.
	tiled bool
	// llamaCpp, when set, computes every op as llama.cpp does (Options.Arithmetic; llamacpp.go), each sequence
	// as llama.cpp evaluates it alone with batch tokens at once (llama.cpp multiplies a float32 matrix by one row
	// with ggml_vec_dot_f32 and by more with tinyBLAS).
	llamaCpp *llamaCppGraph
	batch    int
	// rowByRow are the weights llama.cpp multiplies by each row alone whatever the batch (llamaCppOutputRows).
	rowByRow []model.Value
	// experts, with llamaCpp, are the layer's routed experts, which llama.cpp multiplies with mul_mat_id
	// (llamaCppExperts).
	experts *llamaCppExperts
	// qscale is the layer's query scale (LayerKind.QueryScale).
	qscale model.QueryScale
	// routed, for a streamed sparse layer whose experts are read when routed to, reads them (Route) and binds
	// them into weights, the layer's (Rows).
	routed  *routedLayer
	weights *model.LayerWeights
	// shared: the layer attends with an earlier layer's keys and values (kv is that layer's view), which it does
	// not write. deferWrite: the layer's keys and values are attended with by later layers, so that a pass too
	// long to write them ahead leaves them to hostPass.writeDeferred rather than overwriting the ring before those
	// layers attend.
	shared, deferWrite bool
	// journal, for a recurrent layer (number layer) of a group verifying drafts, receives what restores its
	// states to those after any of the pass's positions (recurrent_draft.go).
	journal *stateJournal
	layer   int
}

// hostArray is a float32 array on the host.
type hostArray struct {
	data []float32
	dims []int
	pass uint64 // the last pass of its arena (hostArena.pass) that handed it out
}

func newHostArray(dims ...int) *hostArray {
	return &hostArray{data: make([]float32, elems(dims)), dims: dims}
}

// elems is the number of elements of an array of the given dims.
func elems(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

func arr(v model.Value) *hostArray { return v.(*hostArray) }

// hostArena recycles activations from one layer to the next: every decoder layer computes arrays of the same
// sizes, so a layer reuses those of the layer before it instead of asking the Go heap for fresh memory. Without
// it a 512-token TinyLlama prefill allocated about 36 MB per layer, and the garbage piled up to 600 MB before a
// collection (the Go heap grows to twice its live size, and the engine's buffers are live).
//
// A runner's passes share one arena (runner.arena), which keeps the arrays of the last pass for the next:
// fresh memory costs a page fault per 4 KiB on first touch, ~5% of an 8-row verification pass of
// Qwen2.5-Coder-1.5B (docs/performance-log.md, issue 40).
type hostArena struct {
	used []*hostArray         // handed out since the last recycle
	free map[int][]*hostArray // reusable, by length
	pass uint64               // the pass being computed (endPass counts them)
}

// arenaKeepBytes bounds what an arena keeps between passes (endPass): a decode step's or a verification's
// arrays, not a long prompt's, which would sit idle after it.
const arenaKeepBytes = 64 << 20

// array returns an array of the given dims, reused when one of its length is free: its contents are undefined
// (every op writes each element of the array it returns; clearing them took 4% of a prefill).
func (a *hostArena) array(dims ...int) *hostArray {
	if a == nil {
		return newHostArray(dims...)
	}
	n := elems(dims)
	var y *hostArray
	if l := a.free[n]; len(l) > 0 {
		y, a.free[n] = l[len(l)-1], l[:len(l)-1]
		y.dims = dims
	} else {
		y = newHostArray(dims...)
	}
	y.pass = a.pass
	a.used = append(a.used, y)
	return y
}

// endPass ends a pass: every array becomes reusable by the next one, but those this pass did not use, and all
// of them when they hold more than arenaKeepBytes.
func (a *hostArena) endPass() {
	a.recycle()
	kept := 0
	for n, l := range a.free {
		l = slices.DeleteFunc(l, func(y *hostArray) bool { return y.pass != a.pass })
		a.free[n] = l
		kept += 4 * n * len(l)
	}
	if kept > arenaKeepBytes {
		clear(a.free)
	}
	maps.DeleteFunc(a.free, func(_ int, l []*hostArray) bool { return len(l) == 0 })
	a.pass++
}

// recycle makes every array handed out since the last recycle reusable, except those in keep (still in use:
// they are recycled the next time).
func (a *hostArena) recycle(keep ...*hostArray) {
	if a.free == nil {
		a.free = map[int][]*hostArray{}
	}
	used := a.used
	a.used = nil
	for _, y := range used {
		if slices.Contains(keep, y) {
			a.used = append(a.used, y)
			continue
		}
		a.free[len(y.data)] = append(a.free[len(y.data)], y)
	}
}

// weightData returns a weight's elements: []float32, []bfloat16.BFloat16 or a block-quantized
// kernels.QuantMatrix.
func weightData(v model.Value) any { return v.(*deviceTensor).flat }

func (o hostOps) Linear(x, w, b model.Value) model.Value {
	if o.observe != nil {
		if t := w.(*deviceTensor); t.name != "" {
			xa := arr(x)
			o.observe(t.name, xa.data, xa.dims[len(xa.dims)-1])
		}
	}
	var bias []float32
	if b != nil {
		bias = weightData(b).([]float32)
	}
	if o.llamaCpp != nil {
		return o.llamaCppLinear(arr(x), w, bias)
	}
	switch f := weightData(w).(type) {
	case []float32:
		return linearHost(o.arena, arr(x), f, bias, kernels.Linear)
	case []bfloat16.BFloat16:
		if o.bf16Products {
			return linearHost(o.arena, arr(x), f, bias, kernels.LinearBF16)
		}
		return linearHost(o.arena, arr(x), f, bias, kernels.Linear)
	case kernels.QuantMatrix:
		xa := arr(x)
		y := o.arena.array(append(slices.Clone(xa.dims[:len(xa.dims)-1]), f.Rows)...)
		if o.tiled {
			kernels.LinearQuantPrompt(y.data, xa.data, f, bias)
		} else {
			kernels.LinearQuant(y.data, xa.data, f, bias)
		}
		return y
	}
	panic(fmt.Sprintf("engine: Linear of a %T weight", weightData(w)))
}

// linearHost is x·wᵀ (+ bias) for x [..., in] and w [out, in] in its stored dtype, giving [..., out], computed
// by linear (kernels.Linear or kernels.LinearBF16).
func linearHost[W kernels.Weight](arena *hostArena, x *hostArray, w []W, bias []float32, linear func(y, x []float32, w []W, bias []float32, in int)) *hostArray {
	in := x.dims[len(x.dims)-1]
	y := arena.array(append(slices.Clone(x.dims[:len(x.dims)-1]), len(w)/in)...)
	linear(y.data, x.data, w, bias, in)
	return y
}

func (o hostOps) RMSNorm(x, w model.Value, eps, offset float64) model.Value {
	xa := arr(x)
	y := o.arena.array(xa.dims...)
	if o.llamaCpp != nil {
		if offset != 0 {
			panic("engine: arithmetic llama.cpp: (1 + w) norms are not reproduced") // checkLlamaCpp admits none
		}
		ggml.RMSNorm(y.data, xa.data, weightData(w).([]float32), float32(eps))
		return y
	}
	kernels.RMSNorm(y.data, xa.data, normValues(w, xa.dims[len(xa.dims)-1]), eps, float32(offset)) // Gemma's (1 + w), formed in float32
	return y
}

// normValues is a norm's weight as the kernels take it: w's values, or n ones for a norm without weight (w nil).
func normValues(w model.Value, n int) []float32 {
	if w != nil {
		return weightData(w).([]float32)
	}
	if ones, ok := onesOf.Load(n); ok {
		return ones.([]float32)
	}
	ones := make([]float32, n)
	for i := range ones {
		ones[i] = 1
	}
	onesOf.Store(n, ones)
	return ones
}

// onesOf holds the weights of the norms without weight, by width: n ones, made once.
var onesOf sync.Map

// ScaleBy multiplies x by the one value of the weight s.
func (o hostOps) ScaleBy(x, s model.Value) model.Value {
	f := weightData(s).([]float32)[0]
	return o.each(x, func(v float32) float32 { return v * f })
}

func (o hostOps) Heads(x model.Value, heads, d int) model.Value {
	xa := arr(x)
	b, t := xa.dims[0], xa.dims[1]
	y := o.arena.array(b, heads, t, d)
	for bi := range b {
		for ti := range t {
			src := xa.data[(bi*t+ti)*heads*d:]
			for h := range heads {
				copy(y.data[((bi*heads+h)*t+ti)*d:][:d], src[h*d:(h+1)*d])
			}
		}
	}
	return y
}

func (o hostOps) Rotary(x model.Value) model.Value {
	xa := arr(x)
	b, heads, t, d := xa.dims[0], xa.dims[1], xa.dims[2], xa.dims[3]
	r := len(o.cos) / (b * t) // rotated dimensions: d, or fewer (partial rotary)
	half := r / 2
	y := o.arena.array(xa.dims...)
	for bi := range b {
		for h := range heads {
			for ti := range t {
				v := xa.data[((bi*heads+h)*t+ti)*d:][:d]
				out := y.data[((bi*heads+h)*t+ti)*d:][:d]
				c := o.cos[(bi*t+ti)*r:][:r]
				s := o.sin[(bi*t+ti)*r:][:r]
				if o.llamaCpp != nil {
					for j := range half {
						out[j], out[j+half] = ggml.Rotate(v[j], v[j+half], c[j], s[j])
					}
				} else {
					for j := range half {
						out[j] = v[j]*c[j] - v[j+half]*s[j]
						out[j+half] = v[j+half]*c[j+half] + v[j]*s[j+half]
					}
				}
				copy(out[r:], v[r:])
			}
		}
	}
	return y
}

// Attention attends every row's new queries to its cached positions and its new keys, and commits the new keys
// and values to the layer's cache (the host kernels' layers leave the cache written: hostPass does not write
// it again). A pass short enough for the layer (a full layer, or a ring's slack: kvcache.View.WritesAhead)
// writes them first and attends to the cache alone, so that a position's attention sums the same blocks in the
// same order whether it comes in a decode step, a draft's verification or a prompt chunk; a longer prompt on a
// ring attends to them beside the cache and writes them after. A draft tree's leaves, never written, attend in
// the job of their row's last token and chain (one job per row and key/value head: each block of the cache read
// once for all its queries), to their ancestors there and then to themselves (leaves).
func (o hostOps) Attention(q, k, v model.Value, opts model.AttentionOptions) model.Value {
	qa, ka, va := arr(q), arr(k), arr(v)
	if o.llamaCpp != nil {
		y := o.llamaCppAttention(qa, ka, va, opts)
		o.commit(ka, va)
		return y
	}
	b, heads, t, d := qa.dims[0], qa.dims[1], qa.dims[2], qa.dims[3]
	ahead := o.kv.WritesAhead(t)
	if ahead {
		if !o.shared {
			o.commit(ka, va)
		}
	} else {
		// The new keys and values as the cache will give them back (float16 in a float16 cache), so that a
		// prompt sees its own positions alike computed in one pass or a token at a time.
		o.kv.Round(ka.data)
		o.kv.Round(va.data)
	}
	y := o.arena.array(b, t, heads*d)
	kvHeads := ka.dims[1]
	var sinks []float32
	if opts.Sinks != nil {
		sinks = weightData(opts.Sinks).([]float32)
	}
	jobs := make([]kernels.AttentionJob, 0, b*kvHeads)
	for bi := range b {
		n := o.tree.written(t) // the queries attending to the cache and, not written ahead, to the new keys: all but a tree's leaves
		held := o.past[bi]
		if ahead {
			held += n
		}
		cached := o.kv.Runs(o.row(bi), held)
		for g := range kvHeads {
			runs := o.cacheRuns(cached, bi, g, kvHeads, d)
			if !ahead {
				nw := (bi*kvHeads + g) * t * d // this head's new keys in k
				runs = append(runs, kernels.KeyRun{K: ka.data[nw : nw+n*d], V: va.data[nw : nw+n*d], Pos: o.past[bi], N: n})
			}
			job := o.job(qa, y, bi, g, kvHeads, 0, n, runs, sinks)
			job.Leaves = o.leaves(ka, va, bi, g, kvHeads, n) // a tree's: its ancestors among the runs, then themselves
			jobs = append(jobs, job)
		}
	}
	kernels.Attention(kernels.AttentionParams{Scale: float32(opts.Scale), SoftCap: float32(opts.SoftCap), Window: o.window, Chunk: o.chunk}, d, jobs)
	if !ahead && !o.shared && !o.deferWrite {
		o.commit(ka, va)
	}
	return y
}

// leaves are the draft tree leaves of row bi (its queries past the n written ones) for key/value head g (of
// kvHeads): each at its position, with its own key and value in k, v rounded as the cache would give them back,
// had they been written. They attend in the job of the last token and the chain (kernels.TreeLeaf), which reads
// the cache once for all of them.
func (o hostOps) leaves(k, v *hostArray, bi, g, kvHeads, n int) []kernels.TreeLeaf {
	t, d := k.dims[2], k.dims[3]
	if n == t {
		return nil
	}
	leaves := make([]kernels.TreeLeaf, 0, t-n)
	for leaf := n; leaf < t; leaf++ {
		nw := ((bi*kvHeads+g)*t + leaf) * d
		own := kernels.TreeLeaf{Pos: o.pos[bi][leaf], K: k.data[nw : nw+d], V: v.data[nw : nw+d]}
		o.kv.Round(own.K)
		o.kv.Round(own.V)
		leaves = append(leaves, own)
	}
	return leaves
}

// cacheRuns are key/value head g's (of kvHeads, d elements each) keys and values in the runs cached of row bi's
// cache slots (kvcache.View.Runs), with room for one run more.
func (o hostOps) cacheRuns(cached []kvcache.Run, bi, g, kvHeads, d int) []kernels.KeyRun {
	slot, _ := o.kv.Layer(0)
	past := (o.row(bi)*kvHeads + g) * o.kv.Slots() * d // this head's slots in the cache
	runs := make([]kernels.KeyRun, 0, len(cached)+1)
	for _, c := range cached {
		lo, hi := past+c.Slot*d, past+(c.Slot+c.N)*d
		if slot.K16 != nil {
			runs = append(runs, kernels.KeyRun{K16: slot.K16[lo:hi], V16: slot.V16[lo:hi], Pos: c.Pos, N: c.N})
		} else {
			runs = append(runs, kernels.KeyRun{K: slot.K[lo:hi], V: slot.V[lo:hi], Pos: c.Pos, N: c.N})
		}
	}
	return runs
}

// job is the attention of row bi's queries t0 … t0+n−1 of the query heads sharing key/value head g, over runs,
// writing into y; sinks are every query head's attention sinks (nil: none).
func (o hostOps) job(q, y *hostArray, bi, g, kvHeads, t0, n int, runs []kernels.KeyRun, sinks []float32) kernels.AttentionJob {
	heads, t, d := q.dims[1], q.dims[2], q.dims[3]
	group := heads / kvHeads
	j := kernels.AttentionJob{
		Q: q.data[(bi*heads+g*group)*t*d+t0*d:], QHead: t * d, QPos: d,
		Out: y.data[bi*t*heads*d+g*group*d+t0*heads*d:], OutHead: d, OutPos: heads * d,
		Heads: group, T: n, Pos0: o.pos[bi][t0], Runs: runs,
	}
	if sinks != nil {
		j.Sinks = sinks[g*group : (g+1)*group]
	}
	return j
}

// row is the cache row of the activations' batch index bi.
func (o hostOps) row(bi int) int {
	if o.rows != nil {
		return o.rows[bi]
	}
	return bi
}

// commit writes the new keys and values k, v ([B, kvHeads, t, headDim]) of every row to the layer's cache at
// its positions past[bi].. (committed by the pass's kvcache.Store.Advance), keeping the first error in o.err.
func (o hostOps) commit(k, v *hostArray) {
	b, t := k.dims[0], k.dims[2]
	n := o.tree.written(t)
	size := len(k.data) / b
	for bi := range b {
		err := o.kv.Write(o.row(bi), n, t, k.data[bi*size:(bi+1)*size], v.data[bi*size:(bi+1)*size])
		switch {
		case err != nil && o.err == nil:
			panic(fmt.Sprintf("engine: key/value cache: %v", err)) // every pass's hostOps has err (hostPass.layer)
		case err != nil && *o.err == nil:
			*o.err = err
		}
	}
}

func (o hostOps) Act(x model.Value, f model.Activation) model.Value {
	xa := arr(x)
	y := o.arena.array(xa.dims...)
	switch {
	case o.llamaCpp != nil && f == model.SiLU:
		ggml.Silus(y.data, xa.data)
	case o.llamaCpp != nil && f == model.Sigmoid:
		// The one sigmoid of the architectures Arithmetic llama.cpp covers, Qwen2-MoE's shared-expert gate, which
		// llama.cpp's qwen2moe graph computes as silu(x)/x over rows of one value (ggml_silu_f32: the C library's
		// expf).
		for i, v := range xa.data {
			y.data[i] = v / (1 + ggml.LibcExpf(-v)) / v
		}
	case o.llamaCpp != nil:
		panic(fmt.Sprintf("engine: arithmetic llama.cpp: activation %d", f)) // checkLlamaCpp admits SiLU only
	case f == model.SiLU:
		kernels.SiLU(y.data, xa.data)
	case f == model.GELUTanh:
		kernels.GELUTanh(y.data, xa.data)
	case f == model.GELU:
		kernels.GELU(y.data, xa.data)
	case f == model.Sigmoid:
		sigmoid(y.data, xa.data)
	default:
		panic(fmt.Sprintf("engine: activation %d", f))
	}
	return y
}

func (o hostOps) ClampedSwiGLU(gate, up model.Value, alpha, limit float64) model.Value {
	ga, ua := arr(gate), arr(up)
	y := o.arena.array(ga.dims...)
	kernels.ClampedSwiGLU(y.data, ga.data, ua.data, float32(alpha), float32(limit))
	return y
}

func (o hostOps) Split(x model.Value, sizes ...int) []model.Value {
	xa := arr(x)
	last := xa.dims[len(xa.dims)-1]
	rows := len(xa.data) / last
	out := make([]model.Value, len(sizes))
	from := 0
	for i, sz := range sizes {
		y := o.arena.array(append(slices.Clone(xa.dims[:len(xa.dims)-1]), sz)...)
		for r := range rows {
			copy(y.data[r*sz:(r+1)*sz], xa.data[r*last+from:r*last+from+sz])
		}
		out[i] = y
		from += sz
	}
	return out
}

func (o hostOps) Scale(x model.Value, s float64) model.Value {
	f := float32(s)
	return o.each(x, func(v float32) float32 { return v * f })
}

func (o hostOps) SoftCap(x model.Value, c float64) model.Value {
	xa := arr(x)
	y := o.arena.array(xa.dims...)
	kernels.SoftCap(y.data, xa.data, float32(c))
	return y
}

// each applies f to every element of x.
func (o hostOps) each(x model.Value, f func(float32) float32) model.Value {
	xa := arr(x)
	y := o.arena.array(xa.dims...)
	for i, v := range xa.data {
		y.data[i] = f(v)
	}
	return y
}

func (o hostOps) Add(a, b model.Value) model.Value {
	aa, ba := arr(a), arr(b)
	y := o.arena.array(aa.dims...)
	kernels.Add(y.data, aa.data, ba.data)
	return y
}

func (o hostOps) Mul(a, b model.Value) model.Value {
	aa, ba := arr(a), arr(b)
	y := o.arena.array(aa.dims...)
	kernels.Mul(y.data, aa.data, ba.data)
	return y
}

// ScaleQueries multiplies each row's queries at its new positions past[bi].. by the layer's query scale.
func (o hostOps) ScaleQueries(q model.Value) model.Value {
	qa := arr(q)
	b, heads, t, d := qa.dims[0], qa.dims[1], qa.dims[2], qa.dims[3]
	y := o.arena.array(qa.dims...)
	for bi := range b {
		for ti := range t {
			f := o.qscale.At(o.pos[bi][ti])
			for h := range heads {
				at := ((bi*heads+h)*t + ti) * d
				for j, v := range qa.data[at : at+d] {
					y.data[at+j] = v * f
				}
			}
		}
	}
	return y
}
