package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/bits"
	"slices"
	"sort"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/kvcache"
	"github.com/layerstream/layerstream/profiler"
)

// maskedOut is added to the attention score of a key a query must not see.
const maskedOut = -1e30

// buildExecs creates the output head's executable; the decoder layers' are made when a kind of layer first
// runs (layerExec). Graphs are compiled per distinct input shape: new-position counts are bucketed to powers of
// two, and the cache capacity is fixed per Store, so a handful of graphs serve all prompts.
func (e *Engine) buildExecs() error {
	e.layerExecs = map[model.LayerKind]*graph.Exec{}
	headFn := func(x, norm, w *graph.Node) *graph.Node { return node(e.arch.Head(graphOps{}, x, norm, w)) }
	var err error
	if e.headExec, err = graph.NewExec(e.backend, headFn); err != nil {
		return fmt.Errorf("head graph: %w", err)
	}
	e.headExec.SetMaxCache(-1)
	return nil
}

// layerExec returns the executable of a kind of decoder layer, serving every layer of that kind. Its inputs are
// x, cos and sin (only for a layer with rotary embeddings), mask, pastK, pastV, then the weights in Plan order.
func (e *Engine) layerExec(kind model.LayerKind) (*graph.Exec, error) {
	if x, ok := e.layerExecs[kind]; ok {
		return x, nil
	}
	specs := e.plan.Weights
	layerFn := func(ins []*graph.Node) []*graph.Node {
		var ops graphOps
		x, rest := ins[0], ins[1:]
		if kind.Rope != model.NoRope {
			ops.cos, ops.sin, rest = rest[0], rest[1], rest[2:]
		}
		ops.mask, ops.pastK, ops.pastV, rest = rest[0], rest[1], rest[2], rest[3:]
		in := model.LayerInputs{Kind: kind, X: x, W: make(map[string]model.Value, len(specs))}
		for i, s := range specs {
			in.W[s.Name] = rest[i]
		}
		out := e.arch.Layer(ops, in)
		return []*graph.Node{node(out.X), node(out.K), node(out.V)}
	}
	x, err := graph.NewExec(e.backend, layerFn)
	if err != nil {
		return nil, fmt.Errorf("layer graph: %w", err)
	}
	x.SetMaxCache(-1)
	e.layerExecs[kind] = x
	return x, nil
}

// exec runs an executable, turning a panic inside GoMLX into an error.
func exec(x *graph.Exec, what string, args ...any) (outs []*tensors.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: %v", what, r)
		}
	}()
	outs, err = x.Exec(args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return outs, nil
}

// bucket rounds n up to a power of two, so that few graph shapes serve every length.
func bucket(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// kvStore returns a one-sequence Store with room for capacity positions (kvStoreBatch).
// host says whether the host kernels will use it (Engine.onHost), for which it follows Options.KVCache.
func (e *Engine) kvStore(capacity int, host bool) (*kvcache.Store, error) {
	return e.kvStoreBatch(1, capacity, host)
}

// kvStoreBatch returns a Store for batch sequences of up to capacity positions each, reusing the last one when
// its sizes match.
func (e *Engine) kvStoreBatch(batch, capacity int, host bool) (*kvcache.Store, error) {
	cfg := e.kvConfig(batch, capacity, host)
	if e.kv != nil && e.kv.Config().Equal(cfg) {
		e.kv.Reset()
		return e.kv, nil
	}
	freeKVStore(e.kv)
	e.kv = nil
	kv, err := e.newKV(cfg)
	if err != nil {
		return nil, err
	}
	e.kv = kv
	return kv, nil
}

// kvConfig sizes a Store for batch sequences of up to capacity positions: a sliding layer keeps a ring of its
// window's positions. A store the host kernels use (host) holds float16 under Options.KVCache f16.
func (e *Engine) kvConfig(batch, capacity int, host bool) kvcache.Config {
	p := e.plan
	cfg := kvcache.Config{Layers: len(p.Layers), Batch: batch, KVHeads: p.KVHeads, Capacity: capacity, HeadDim: p.HeadDim,
		Half: host && e.opts.KVCache == KVCacheF16}
	for i, l := range p.Layers {
		if l.Window > 0 {
			if cfg.Ring == nil {
				cfg.Ring = make([]int, len(p.Layers))
			}
			cfg.Ring[i] = l.Window
		}
	}
	return cfg
}

// newKV allocates a Store in device buffers (shared with the host where the backend has them).
func (e *Engine) newKV(cfg kvcache.Config) (*kvcache.Store, error) {
	alloc := func(dims []int) ([]float32, any, error) {
		d, err := newDeviceTensor(e.backend, dtypes.Float32, dims...)
		if err != nil {
			return nil, nil, err
		}
		return d.flat.([]float32), d, nil
	}
	return kvcache.New(cfg, alloc)
}

// freeKVStore frees the device buffers of a Store made by newKV (nil: nothing).
func freeKVStore(kv *kvcache.Store) {
	if kv == nil {
		return
	}
	for i := range kv.Config().Layers {
		s, _ := kv.View(i).Layer(0)
		if d, ok := s.KHandle.(*deviceTensor); ok {
			d.free()
		}
		if d, ok := s.VHandle.(*deviceTensor); ok {
			d.free()
		}
	}
}

// schedule is the order in which a forward pass consumes streamed units.
func (e *Engine) schedule() []string {
	var s []string
	if e.opts.StreamAll {
		s = append(s, unitEmbed)
	}
	for i := range e.cfg.NumHiddenLayers {
		s = append(s, layerUnit(i))
	}
	if e.opts.StreamAll {
		s = append(s, unitNorm, e.headUnit)
	}
	return s
}

// newStream starts the pipeline for up to passes forward passes (nil in resident mode); graph says whether
// they run as compiled graphs (Logits, GraphDecode) rather than on the host kernels.
func (e *Engine) newStream(ctx context.Context, passes int, graph bool) *stream {
	if e.opts.Resident {
		return nil
	}
	return e.startStream(ctx, e.schedule(), passes, !graph)
}

// unitSet returns the device weights of unit: resident, or the next one from the stream. release gives it back.
func (e *Engine) unitSet(st *stream, unit string, resident *weightSet) (w *weightSet, release func(), err error) {
	if resident != nil {
		return resident, func() {}, nil
	}
	if st == nil {
		return nil, nil, fmt.Errorf("unit %s is neither resident nor streamed", unit)
	}
	span := e.prof.Begin(profiler.PrefetchWait, int(e.step.Load()), layerIndex(unit))
	w, err = st.next(unit)
	span.End(0)
	if err != nil {
		return nil, nil, err
	}
	return w, func() { e.releaseSet(w) }, nil
}

// pass runs ids for sequence 0 of a one-sequence store (forward with a single sequence).
func (e *Engine) pass(ctx context.Context, st *stream, kv *kvcache.Store, ids []int, all bool) ([][]float32, error) {
	return e.forward(ctx, st, kv, []int{0}, [][]int{ids}, nil, all)
}

// forward runs new tokens of some sequences of kv through the model, one load of each unit serving them all:
// ids[i] continues the sequence in cache row rows[i] at its positions kv.Len(rows[i]).. and is committed to
// the cache. It returns, for each i, the logits of its last new position; with all (one sequence only), the
// logits of every new position. Row i's quantized products are tiled (kernels.LinearQuantPrompt) when it brings
// kernels.PromptTileRows positions or more, or when tiled[i] (a chunk of a prompt that long; tiled may be nil).
//
// Passes run on the host kernels (hostOps) over just the given rows, unless Options.GraphDecode or all: the rows
// bringing the same number of new tokens are computed together, with no padding (hostGroups), so a prompt
// joining the batch is prefilled in the same pass as the other sequences' decode tokens at the cost of its own
// tokens only. Otherwise the compiled graphs run over every row of the store, padded to the longest input's
// bucket: a row without new tokens is computed but neither written nor returned.
func (e *Engine) forward(ctx context.Context, st *stream, kv *kvcache.Store, rows []int, ids [][]int, tiled []bool, all bool) ([][]float32, error) {
	c := e.cfg
	h := c.HiddenSize
	e.resetHealth(len(rows))
	tmax := 0
	for i, r := range rows {
		if err := kv.CheckRoom(r, len(ids[i])); err != nil {
			return nil, err
		}
		tmax = max(tmax, len(ids[i]))
	}

	// Embedding lookup on the host: x is [len(rows), tmax, hidden] on the host kernels, else [batch, tb, hidden].
	ew, release, err := e.unitSet(st, unitEmbed, e.embed)
	if err != nil {
		return nil, err
	}
	defer func() { release() }() // unless released early below
	scale := float32(e.plan.EmbedScale)
	embed := func(dst []float32, id, pos int) error {
		if id < 0 || id >= c.VocabSize {
			return fmt.Errorf("token id %d at position %d is outside the vocabulary (vocab_size %d)", id, pos, c.VocabSize)
		}
		embedRow(dst, ew.hostTensors()[0].flat, id, h)
		if scale != 1 {
			for i := range dst {
				dst[i] *= scale
			}
		}
		return nil
	}
	if e.onHost(all) {
		var groups []*hostGroup
		err := e.guardMapped(func() (err error) { // the embedding may be read from a mapped shard
			groups, err = e.hostGroups(kv, rows, ids, tiled, embed)
			return err
		})
		if err != nil {
			return nil, err
		}
		release()
		release = func() {}
		return e.hostPass(ctx, st, kv, groups, len(rows), all)
	}

	b := kv.Config().Batch
	tb := bucket(tmax)
	lens := make([]int, b)
	x := make([]float32, b*tb*h)
	err = e.guardMapped(func() error { // the embedding may be read from a mapped shard
		for i, r := range rows {
			lens[r] = len(ids[i])
			for j, id := range ids[i] {
				if err := embed(x[(r*tb+j)*h:(r*tb+j+1)*h], id, kv.Len(r)+j); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	release()
	release = func() {}
	every := make([]int, b)
	for r := range every {
		every[r] = r
	}
	health := make([][]float32, b) // by row of the store
	for i, r := range rows {
		health[r] = e.health[i]
	}
	logits, err := e.graphPass(ctx, st, kv, lens, tb, x, e.passTables(kv, every, lens, tb, true), health, all)
	if err != nil || all {
		return logits, err
	}
	out := make([][]float32, len(rows))
	for i, r := range rows {
		out[i] = logits[r]
	}
	return out, nil
}

// passTables are the per-kind inputs of one forward pass over some rows of the store, each bringing t new
// positions (padding included): a rotary table per rope of the plan, and per window either an additive
// attention mask (graphs) or the runs of positions the cache slots of each row hold (host kernels, which mask
// by positions).
type passTables struct {
	cos, sin [][]float32 // by Plan.Ropes index: [rows, t, rope dims]
	masks    map[int][]float32
	runs     map[int][][]cacheRun // by window: each row's
	slots    map[int]int          // by window: the cache slots of its layers (S)
}

// passTables builds the tables of a pass: row i is cache row rows[i], whose lens[i] new positions (then padding
// up to t) start at kv.Len(rows[i]). masks asks for the graphs' masks, else the host kernels' runs are built.
func (e *Engine) passTables(kv *kvcache.Store, rows, lens []int, t int, masks bool) passTables {
	p := e.plan
	pt := passTables{cos: make([][]float32, len(p.Ropes)), sin: make([][]float32, len(p.Ropes)), masks: map[int][]float32{}, runs: map[int][][]cacheRun{}, slots: map[int]int{}}
	for ri, rope := range p.Ropes {
		for i, r := range rows {
			pos0 := kv.Len(r)
			var cs, sn []float32
			if e.llamaCpp() != nil {
				cs, sn = llamaCppRotaryTable(rope, pos0, t)
			} else {
				cs, sn = rotaryTable(rope, pos0, t, pos0+lens[i])
			}
			pt.cos[ri], pt.sin[ri] = append(pt.cos[ri], cs...), append(pt.sin[ri], sn...)
		}
	}
	for l, kind := range p.Layers {
		if _, ok := pt.slots[kind.Window]; ok {
			continue
		}
		view := kv.View(l)
		pt.slots[kind.Window] = view.Slots()
		for _, r := range rows {
			if masks {
				pt.masks[kind.Window] = append(pt.masks[kind.Window], attentionMask(view, r, t, kind.Window)...)
			} else {
				pt.runs[kind.Window] = append(pt.runs[kind.Window], cacheRuns(view, r))
			}
		}
	}
	return pt
}

// cacheRun is slots [slot, slot+n) of a cache row, holding positions pos, pos+1, … .
type cacheRun struct{ slot, pos, n int }

// cacheRuns returns the runs of consecutive positions the slots of cache row row hold, in slot order: one
// from slot 0 for a full layer, up to two for a ring (its newest positions from slot 0, then the oldest).
func cacheRuns(view *kvcache.View, row int) []cacheRun {
	var runs []cacheRun
	for j, s := 0, view.Slots(); j < s; {
		p := view.Position(row, j)
		if p < 0 { // empty slots come last
			break
		}
		n := sort.Search(s-j, func(k int) bool { return view.Position(row, j+k) != p+k })
		runs = append(runs, cacheRun{slot: j, pos: p, n: n})
		j += n
	}
	return runs
}

// layerSet returns decoder layer i's weights (resident, or next from the stream) and its release function.
func (e *Engine) layerSet(st *stream, i int) (*weightSet, func(), error) {
	var res *weightSet
	if e.opts.Resident {
		res = e.resident[i]
	}
	return e.unitSet(st, layerUnit(i), res)
}

// graphPass runs the layers and the head as compiled graphs over x [batch, tb, hidden]: row r of the store
// brings lens[r] new positions (0: a padding row, computed but not written). It returns the logits of each
// row's last new position (nil for padding rows), or with all (a one-sequence store) of every new position.
// health[r][l] receives the largest |x| of row r's new positions after layer l.
func (e *Engine) graphPass(ctx context.Context, st *stream, kv *kvcache.Store, lens []int, tb int, xHost []float32, pt passTables, health [][]float32, all bool) ([][]float32, error) {
	c := e.cfg
	b := len(lens)
	step := int(e.step.Load())
	x := tensors.FromFlatDataAndDimensions(xHost, b, tb, c.HiddenSize)
	var cos, sin []*tensors.Tensor
	for ri, r := range e.plan.Ropes {
		cos = append(cos, tensors.FromFlatDataAndDimensions(pt.cos[ri], b, tb, r.Dims))
		sin = append(sin, tensors.FromFlatDataAndDimensions(pt.sin[ri], b, tb, r.Dims))
	}
	masks := map[int]*tensors.Tensor{}
	for w, m := range pt.masks {
		masks[w] = tensors.FromFlatDataAndDimensions(m, b, tb, pt.slots[w]+tb)
	}
	defer func() {
		for _, t := range slices.Concat(cos, sin, slices.Collect(maps.Values(masks))) {
			t.FinalizeAll()
		}
	}()

	for i := range c.NumHiddenLayers {
		if err := ctx.Err(); err != nil {
			x.FinalizeAll()
			return nil, err
		}
		w, release, err := e.layerSet(st, i)
		if err != nil {
			x.FinalizeAll()
			return nil, err
		}
		if err := e.deviceReady(w); err != nil { // a resident layer the host kernels read in place
			release()
			x.FinalizeAll()
			return nil, err
		}
		slot, _ := kv.View(i).Layer(0)
		// Without shared buffers the cache is written on the host: copy it to the device for this layer.
		k, v := slot.KHandle.(*deviceTensor), slot.VHandle.(*deviceTensor)
		if err := errors.Join(k.upload(), v.upload()); err != nil {
			release()
			x.FinalizeAll()
			return nil, fmt.Errorf("layer %d: key/value cache: %w", i, err)
		}
		kind := e.plan.Layers[i]
		args := []any{x}
		if kind.Rope != model.NoRope {
			args = append(args, cos[kind.Rope], sin[kind.Rope])
		}
		args = append(append(args, masks[kind.Window], k.t, v.t), w.args()...)
		lx, err := e.layerExec(kind)
		if err != nil {
			release()
			x.FinalizeAll()
			return nil, err
		}
		span := e.prof.Begin(profiler.Forward, step, i)
		outs, err := exec(lx, fmt.Sprintf("layer %d", i), args...)
		span.End(w.bytes)
		release()
		x.FinalizeAll()
		if err != nil {
			return nil, err
		}
		x = outs[0]
		err = errors.Join(x.ConstFlatData(func(flat any) {
			f, h := flat.([]float32), c.HiddenSize
			for r, t := range lens {
				if t > 0 && health[r] != nil {
					health[r][i] = guard.MaxAbs(f[r*tb*h : (r*tb+t)*h])
				}
			}
		}), writeKV(kv.View(i), lens, tb, outs[1], outs[2]))
		outs[1].FinalizeAll()
		outs[2].FinalizeAll()
		if err != nil {
			x.FinalizeAll()
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
	}
	for r, t := range lens {
		if err := kv.Advance(r, t); err != nil {
			x.FinalizeAll()
			return nil, err
		}
	}
	return e.headLogits(st, x, lens, tb, all)
}

// resetHealth makes e.health n rows of one value per decoder layer, reusing its arrays.
func (e *Engine) resetHealth(n int) {
	if cap(e.health) < n {
		old := e.health[:cap(e.health)]
		e.health = make([][]float32, n)
		copy(e.health, old)
	}
	e.health = e.health[:n]
	for i, h := range e.health {
		if h == nil {
			e.health[i] = make([]float32, e.cfg.NumHiddenLayers)
		}
	}
}

// hostGroup is sequences a host pass computes together: each brings the same number t of new positions.
type hostGroup struct {
	rows   []int // the sequences' cache rows
	past   []int // their lengths in the cache: the positions of their first new tokens
	at     []int // their indices in forward's rows: where their logits go
	t      int
	tiled  bool        // the quantized products are tiled (forward)
	x      model.Value // [len(rows), t, hidden]
	tables passTables  // rotary tables and masks of the group's rows
}

// hostGroups embeds ids[i] (continuing cache row rows[i]) and groups the rows by their number of new positions
// and whether their products are tiled (forward), in order of first appearance: decode steps (one position each)
// share one group, a prompt forms its own unless another of the same length comes with it. Every row of a group
// is computed exactly as alone (the host kernels sum each row in the same order whatever the rows beside it), so
// grouping changes no result.
func (e *Engine) hostGroups(kv *kvcache.Store, rows []int, ids [][]int, tiled []bool, embed func(dst []float32, id, pos int) error) ([]*hostGroup, error) {
	h := e.cfg.HiddenSize
	type key struct {
		t     int
		tiled bool
	}
	var groups []*hostGroup
	byKey := map[key]*hostGroup{}
	for i, r := range rows {
		k := key{len(ids[i]), len(ids[i]) >= kernels.PromptTileRows || tiled != nil && tiled[i]}
		g := byKey[k]
		if g == nil {
			g = &hostGroup{t: k.t, tiled: k.tiled}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.rows, g.at = append(g.rows, r), append(g.at, i)
	}
	for _, g := range groups {
		x := newHostArray(len(g.rows), g.t, h)
		lens := make([]int, len(g.rows))
		g.past = make([]int, len(g.rows))
		for j, r := range g.rows {
			pos0 := kv.Len(r)
			g.past[j] = pos0
			lens[j] = g.t
			for k, id := range ids[g.at[j]] {
				if err := embed(x.data[(j*g.t+k)*h:(j*g.t+k+1)*h], id, pos0+k); err != nil {
					return nil, err
				}
			}
		}
		g.x, g.tables = x, e.passTables(kv, g.rows, lens, g.t, false)
	}
	return groups, nil
}

// onHost reports whether a forward pass runs on the host kernels rather than as graphs: always on cpu unless
// Options.GraphDecode, except a pass that wants every position's logits (Logits), which runs as graphs unless
// the model has block-quantized matrices (whose products only the host kernels compute as generation does),
// the arithmetic is llama.cpp's (Options.Arithmetic), which only the host kernels reproduce, or the inputs of the
// products are observed (Options.ObserveInputs).
func (e *Engine) onHost(all bool) bool {
	return !e.opts.GraphDecode && (!all || e.quantized || e.llamaCpp() != nil || e.opts.ObserveInputs != nil)
}

// hostPass runs the groups' new positions through the layers and the head with hostOps, every weight matrix
// loaded once for all of them (each group reads it in turn). It returns the logits of the last new position of
// each of forward's n rows, or with all (one sequence) of every new position.
func (e *Engine) hostPass(ctx context.Context, st *stream, kv *kvcache.Store, groups []*hostGroup, n int, all bool) ([][]float32, error) {
	c := e.cfg
	h := c.HiddenSize
	step := int(e.step.Load())
	arena := new(hostArena)
	keep := make([]*hostArray, len(groups))
	for i := range c.NumHiddenLayers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w, release, err := e.layerSet(st, i)
		if err != nil {
			return nil, err
		}
		view := kv.View(i)
		for j, g := range groups {
			keep[j] = arr(g.x)
		}
		arena.recycle(keep...) // the previous layer's arrays, but its outputs: this layer's inputs
		weights := make(map[string]model.Value, len(w.specs))
		for j, t := range w.hostTensors() {
			weights[w.specs[j].suffix] = t
		}
		span := e.prof.Begin(profiler.Forward, step, i)
		ferr := e.guardMapped(func() error {
			kind := e.plan.Layers[i]
			for _, g := range groups {
				ops := hostOps{past: g.past, cache: g.tables.runs[kind.Window], window: kind.Window, kv: view, rows: g.rows, arena: arena, bf16Products: e.bf16Products, tiled: g.tiled, llamaCpp: e.llamaCpp(), batch: g.t, observe: e.opts.ObserveInputs}
				if ops.llamaCpp != nil && i == c.NumHiddenLayers-1 && !all {
					ops.rowByRow = llamaCppOutputRows(weights)
				}
				if kind.Rope != model.NoRope {
					ops.cos, ops.sin = g.tables.cos[kind.Rope], g.tables.sin[kind.Rope]
				}
				out := e.arch.Layer(ops, model.LayerInputs{Kind: kind, X: g.x, W: weights})
				k, v := arr(out.K).data, arr(out.V).data // [rows, kvHeads, t, headDim]
				size := len(k) / len(g.rows)
				for j, r := range g.rows {
					if err := view.Write(r, g.t, g.t, k[j*size:(j+1)*size], v[j*size:(j+1)*size]); err != nil {
						return err
					}
				}
				g.x = out.X
				for j, at := range g.at {
					e.health[at][i] = guard.MaxAbs(arr(g.x).data[j*g.t*h : (j+1)*g.t*h])
				}
			}
			return nil
		})
		span.End(w.bytes)
		release()
		if ferr != nil {
			return nil, fmt.Errorf("layer %d: %w", i, ferr)
		}
	}
	// The head needs only each row's last new position, in forward's order (with all: every position).
	last := newHostArray(n, 1, h)
	for _, g := range groups {
		x := arr(g.x).data
		for j, r := range g.rows {
			if err := kv.Advance(r, g.t); err != nil {
				return nil, err
			}
			at := g.at[j]
			copy(last.data[at*h:(at+1)*h], x[(j*g.t+g.t-1)*h:(j*g.t+g.t)*h])
		}
		if all {
			last = &hostArray{data: slices.Clone(x[:g.t*h]), dims: []int{g.t, 1, h}}
			n = g.t
		}
	}
	e.warnClamped(kv)
	nw, hw, release, err := e.headWeights(st)
	if err != nil {
		return nil, err
	}
	defer release()
	span := e.prof.Begin(profiler.Forward, step, -1)
	ops := hostOps{bf16Products: e.bf16Products, llamaCpp: e.llamaCpp(), batch: 1, observe: e.opts.ObserveInputs}
	if all {
		ops.batch = n // llama.cpp computes the head over every position of the batch when it keeps all logits
	}
	var logits []float32
	herr := e.guardMapped(func() error {
		logits = arr(e.arch.Head(ops, last, nw.hostTensors()[0], hw.hostTensors()[0])).data
		return nil
	})
	span.End(hw.bytes)
	if herr != nil {
		return nil, herr
	}
	v := c.VocabSize
	out := make([][]float32, n)
	for j := range out {
		out[j] = logits[j*v : (j+1)*v : (j+1)*v]
	}
	return out, nil
}

// headWeights returns the final norm's and the output projection's weights, resident or the next ones from
// the stream, with one release for both.
func (e *Engine) headWeights(st *stream) (norm, head *weightSet, release func(), err error) {
	norm, releaseNorm, err := e.unitSet(st, unitNorm, e.norm)
	if err != nil {
		return nil, nil, nil, err
	}
	head, releaseHead, err := e.unitSet(st, e.headUnit, e.head)
	if err != nil {
		releaseNorm()
		return nil, nil, nil, err
	}
	return norm, head, func() { releaseHead(); releaseNorm() }, nil
}

// headLogits applies the final norm and the output projection to x [batch, tb, hidden] (consumed): to the
// last new position of each row r with lens[r] > 0 (the others get nil), or with all (batch 1) to the first
// lens[0] positions.
func (e *Engine) headLogits(st *stream, x *tensors.Tensor, lens []int, tb int, all bool) ([][]float32, error) {
	h, v := e.cfg.HiddenSize, e.cfg.VocabSize
	in := x
	rows := lens[0]
	var from []int // the rows of the store the head's input rows belong to
	if !all {
		// Only the last real position of each row: copy them out of the padded bucket.
		var last []float32
		err := x.ConstFlatData(func(flat any) {
			f := flat.([]float32)
			for r, t := range lens {
				if t > 0 {
					last = append(last, f[(r*tb+t-1)*h:(r*tb+t)*h]...)
					from = append(from, r)
				}
			}
		})
		x.FinalizeAll()
		if err != nil {
			return nil, fmt.Errorf("final hidden state: %w", err)
		}
		rows = len(from)
		in = tensors.FromFlatDataAndDimensions(last, 1, rows, h)
	}
	defer in.FinalizeAll()
	nw, hw, release, err := e.headWeights(st)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := errors.Join(e.deviceReady(nw), e.deviceReady(hw)); err != nil {
		return nil, err
	}
	span := e.prof.Begin(profiler.Forward, int(e.step.Load()), -1)
	outs, err := exec(e.headExec, "output head", in, nw.tensors[0].t, hw.tensors[0].t)
	span.End(hw.bytes)
	if err != nil {
		return nil, err
	}
	defer outs[0].FinalizeAll()
	logits := make([][]float32, rows)
	err = outs[0].ConstFlatData(func(flat any) {
		f := flat.([]float32)
		for r := range rows {
			logits[r] = append([]float32(nil), f[r*v:(r+1)*v]...)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("logits: %w", err)
	}
	if all {
		return logits, nil
	}
	byRow := make([][]float32, len(lens))
	for i, r := range from {
		byRow[r] = logits[i]
	}
	return byRow, nil
}

// embedRow writes the embedding of id (a row of the [vocab, hidden] matrix flat) into dst as float32.
func embedRow(dst []float32, flat any, id, h int) {
	switch f := flat.(type) {
	case []float32:
		copy(dst, f[id*h:(id+1)*h])
	case []bfloat16.BFloat16:
		for i, b := range f[id*h : (id+1)*h] {
			dst[i] = b.Float32()
		}
	case kernels.QuantMatrix:
		f.DequantizeRow(dst[:h], id)
	}
}

// writeKV stores the first lens[r] of tb new positions of every row r ([batch, kvHeads, tb, headDim] keys and
// values) in the layer's view.
func writeKV(view *kvcache.View, lens []int, tb int, k, v *tensors.Tensor) error {
	var werr error
	err := k.ConstFlatData(func(kf any) {
		err := v.ConstFlatData(func(vf any) {
			kAll, vAll := kf.([]float32), vf.([]float32)
			size := len(kAll) / len(lens)
			for r, t := range lens {
				if t == 0 {
					continue
				}
				if werr = view.Write(r, t, tb, kAll[r*size:(r+1)*size], vAll[r*size:(r+1)*size]); werr != nil {
					return
				}
			}
		})
		werr = errors.Join(werr, err)
	})
	return errors.Join(werr, err)
}

// rotaryTable returns cos and sin [1, tb, r.Dims] for positions pos0..pos0+tb-1 in Hugging Face's layout (the
// half-dimension table repeated twice), for a pass whose last real position is seqLen-1 (dynamic NTK scaling
// depends on it). Frequencies and angles are rounded to float32 as the reference implementations compute them,
// and cos and sin are multiplied by the rope's attention factor (YaRN) in float32, as transformers does.
func rotaryTable(r model.Rope, pos0, tb, seqLen int) (cos, sin []float32) {
	d := r.Dims
	half := d / 2
	inv, scale := r.Frequencies(seqLen)
	f := float32(scale)
	cos = make([]float32, tb*d)
	sin = make([]float32, tb*d)
	for j := range half {
		freq := float32(inv[j])
		for t := range tb {
			angle := float64(float32(pos0+t) * freq)
			c, s := float32(math.Cos(angle)), float32(math.Sin(angle))
			if scale != 1 {
				c, s = c*f, s*f
			}
			cos[t*d+j], cos[t*d+j+half] = c, c
			sin[t*d+j], sin[t*d+j+half] = s, s
		}
	}
	return cos, sin
}

// attentionMask is the additive attention mask [1, tb, S+tb] of cache row row of a layer's view (S = its
// slots): query t, at position Len(row)+t, sees the cached positions and the new positions up to itself, and
// with a window (> 0) only those less than window positions before it. The first S columns are the cache slots,
// the position each holds given by the view (a ring holds the latest positions), the last tb the new positions.
func attentionMask(view *kvcache.View, row, tb, window int) []float32 {
	s, pos0 := view.Slots(), view.Len(row)
	n := s + tb
	m := make([]float32, tb*n)
	held := make([]int, s)
	for j := range held {
		held[j] = view.Position(row, j)
	}
	for t := range tb {
		q := pos0 + t
		out := m[t*n : (t+1)*n]
		for j, p := range held {
			if p < 0 || (window > 0 && q-p >= window) {
				out[j] = maskedOut
			}
		}
		for i := range tb {
			if i > t || (window > 0 && t-i >= window) {
				out[s+i] = maskedOut
			}
		}
	}
	return m
}

// Logits runs one forward pass over ids (a whole sequence from position 0) and returns the logits of every
// position: [len(ids)][vocab_size]. While generations run, it runs between two steps of their batch loop, which
// waits for it (the loop's read-ahead is dropped and starts again after it).
func (e *Engine) Logits(ctx context.Context, ids []int) ([][]float32, error) {
	e.logitsWaiting.Add(1)
	e.mu.Lock()
	e.logitsWaiting.Add(-1)
	defer e.mu.Unlock()
	if e.closed {
		return nil, fmt.Errorf("engine: closed")
	}
	// The checks generate makes of a prompt (newSequence).
	if err := e.checkIDs(ids); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if len(ids) > e.plan.Context {
		return nil, fmt.Errorf("engine: %d tokens exceed %s", len(ids), e.contextName())
	}
	kv, err := e.kvStore(bucket(len(ids)), e.onHost(true))
	if err != nil {
		return nil, err
	}
	e.step.Store(0)
	st := e.newStream(ctx, 1, !e.onHost(true))
	if st != nil {
		defer st.stop()
	}
	return e.pass(ctx, st, kv, ids, true)
}

// warnClamped warns, once per engine, when a float16 cache clamped keys or values to float16's range.
func (e *Engine) warnClamped(kv *kvcache.Store) {
	if n := kv.TakeClamped(); n > 0 && e.clampWarned.CompareAndSwap(false, true) {
		msg := fmt.Sprintf("the float16 key/value cache clamped %d keys or values beyond ±65504 to that bound: the text may degrade; run with --kv-cache f32 (see %s)",
			n, sections.Anchor(sections.DType))
		if e.llamaCpp() != nil {
			msg += "; llama.cpp stores them as ±Inf, so from here on --arithmetic llama.cpp no longer gives llama.cpp's logits"
		}
		slog.Warn(msg)
	}
}
