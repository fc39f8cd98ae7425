package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/kvcache"
	"github.com/layerstream/layerstream/profiler"
)

// runner runs forward passes: new positions of some sequences of a key/value cache through every decoder layer
// and the output head, one load of each unit (from the weightStore) serving them all. A pass runs on the host
// kernels (hostPass: hostOps) or as compiled GoMLX graphs (graphPass: graphOps); both are driven by the one
// per-layer loop (layers).
type runner struct {
	cfg     *checkpoint.Config
	plan    *model.Plan
	arch    model.Architecture
	backend backends.Backend
	store   *weightStore
	prof    *profiler.Profiler

	// computeDType is the dtype the policy chose (guard.ChooseDType), whose range the activations are checked
	// against.
	computeDType checkpoint.DType
	// bf16Products: the host kernels multiply bf16 weight matrices by activations rounded to bf16
	// (kernels.LinearBF16) instead of exactly (kernels.Linear).
	bf16Products bool
	// llama, under Options.Arithmetic llama.cpp, is the llama.cpp graph the host ops reproduce (llamacpp.go).
	llama       *llamaCppGraph
	observe     func(tensor string, x []float32, cols int) // Options.ObserveInputs
	graphDecode bool                                       // Options.GraphDecode
	kvHalf      bool                                       // Options.KVCache f16, for the host kernels' caches

	layerExecs map[model.LayerKind]*graph.Exec // one compiled layer per kind of layer, built when first needed
	headExec   *graph.Exec

	// health is what the last forward pass saw of each of its rows' residual stream: health[i][l] is the largest
	// |x| after decoder layer l over row i's new positions (guard.MaxAbs: NaN or Inf when a value was), for the
	// sequences' monitors (guard.Monitor.CheckActivations).
	health      [][]float32
	kv          *kvcache.Store // Logits' cache, reused while the capacity fits
	clampWarned atomic.Bool    // warnClamped has warned
	// journal is what the last host pass verifying drafts keeps to restore its rows' recurrent states
	// (recurrent_draft.go).
	journal stateJournal
	// arena holds the host passes' arrays from one pass to the next (hostArena.endPass), for the pass holding
	// arenaMu (a pass that finds it held, which the pass lock leaves to none, uses an arena of its own).
	arena   hostArena
	arenaMu sync.Mutex
	// logits is the host head's output of the last pass (nil when a graph computed it), and spare one its caller
	// handed back (handBack) for the next head to write into.
	logits, spare *hostArray
}

// handBack tells the runner that the caller of the last forward pass is done with its logits: the next pass's
// head may write over them (the batch loop and PassTime do, once each sequence has chosen; other callers keep
// their logits, and the head writes fresh ones). A 152k vocabulary's logits of an 8-row verification are
// 4.9 MB, whose page faults on fresh memory cost ~4% of the pass.
func (r *runner) handBack() {
	r.spare, r.logits = r.logits, nil
}

// newRunner makes the runner of arch over the store's weights, refusing under Options.Arithmetic llama.cpp what
// that arithmetic does not reproduce.
func newRunner(arch model.Architecture, store *weightStore, opts Options, compute checkpoint.DType) (*runner, error) {
	c := store.cfg
	r := &runner{cfg: c, plan: arch.Plan(), arch: arch, backend: store.backend, store: store, prof: opts.Profiler,
		computeDType: compute, observe: opts.ObserveInputs, graphDecode: opts.GraphDecode, kvHalf: opts.KVCache == KVCacheF16}
	// The host kernels compute bf16 products where asked to (bf16) or, by default, where the CPU has the bf16
	// dot-product instruction: twice the rate of exact products, at the rounding of the activations llama.cpp
	// and PyTorch's bf16 products make too. --dtype f32 keeps them exact.
	req := DType(strings.ToLower(strings.TrimSpace(string(opts.DType))))
	r.bf16Products = compute == checkpoint.BF16 || (req == DTypeAuto && kernels.NativeBF16())
	if r.bf16Products && strings.Contains(strings.ToLower(c.TorchDType), "bfloat16") && opts.Device == DeviceCPU {
		slog.Debug("host matrix products: bf16 weights times activations rounded to bf16, summed in f32 (--dtype f32: exact)", "avx512_bf16", kernels.NativeBF16())
	}
	if opts.Arithmetic == ArithmeticLlamaCpp {
		if err := checkLlamaCpp(store); err != nil {
			return nil, llamaCppRefusal(err)
		}
		if len(c.Architectures) > 0 {
			r.llama = llamaCppGraphs[c.Architectures[0]]
		}
	}
	if err := r.buildExecs(); err != nil {
		return nil, err
	}
	return r, nil
}

// free frees the runner's key/value cache.
func (r *runner) free() {
	freeKVStore(r.kv)
	r.kv = nil
}

// stepLabel is the profiler's step label of the pass running (0 prefill, 1.. decode).
func (r *runner) stepLabel() int { return int(r.store.step.Load()) }

// setStep sets the profiler's step label for the passes that follow.
func (r *runner) setStep(step int) { r.store.step.Store(int64(step)) }

// maskedOut is added to the attention score of a key a query must not see.
const maskedOut = -1e30

// pass is one forward pass's computation, driven by runner.layers: its decoder layers one at a time, then the
// output head. hostPass computes on the host kernels, graphPass as compiled graphs.
type pass interface {
	// prepare readies decoder layer i's inputs beside its weights w (outside the profiled compute).
	prepare(i int, w *weightSet) error
	// compute runs decoder layer i with its weights w, writing its keys and values to the cache.
	compute(i int, w *weightSet) error
	// head commits the new positions to the cache and returns the logits: for each of forward's rows of its
	// last new position, or with all (one sequence) of every new position.
	head(st *stream) ([][]float32, error)
	// free releases what the pass holds.
	free()
}

// feed is what one sequence brings to a forward pass.
type feed struct {
	row int   // its row of the cache
	ids []int // its new tokens, continuing the row at its positions kv.Len(row)..
	// tiled: its quantized products are tiled (kernels.LinearQuantPrompt), as they are anyway when it brings
	// kernels.PromptTileRows positions or more: a chunk of a prompt that long.
	tiled bool
	// every: the logits of every new position, not only of the last (a draft's verification; host kernels). Its
	// positions are computed as decode steps compute them, bit for bit (never tiled).
	every bool
	// tree, for a verification whose draft has leaves: ids are the last token then tree.ids; the last token and
	// the chain are committed to the cache, each leaf attends to its ancestors and itself (hostOps.Attention).
	tree *draftTree
}

// commit is how many of the feed's new positions the pass writes to the cache: all but a draft tree's leaves.
func (f feed) commit() int { return f.tree.written(len(f.ids)) }

// positions are the positions of the feed's new tokens after pos0 new ones: consecutive, but for a draft tree's
// leaves, each at its depth.
func (f feed) positions(pos0 int) []int {
	p := make([]int, len(f.ids))
	for i := range p {
		p[i] = pos0 + i
		if f.tree != nil && i > 0 {
			p[i] = pos0 + f.tree.depth(i-1)
		}
	}
	return p
}

// forward runs new tokens of some sequences of kv through the model, one load of each unit serving them all,
// and commits them to the cache. It returns, for each feed, the logits of its last new position ([vocab]), or of
// every new position with feed.every ([t·vocab], position after position); with all (Logits: one feed), the
// logits of every new position, one slice each.
//
// Passes run on the host kernels (hostPass) over just the given rows, unless Options.GraphDecode or all (onHost):
// the rows bringing the same number of new tokens are computed together, with no padding (hostGroups), so a
// prompt joining the batch is prefilled in the same pass as the other sequences' decode tokens at the cost of its
// own tokens only. Otherwise the compiled graphs (graphPass) run over every row of the store, padded to the
// longest input's bucket: a row without new tokens is computed but neither written nor returned.
func (r *runner) forward(ctx context.Context, st *stream, kv *kvcache.Store, feeds []feed, all bool) ([][]float32, error) {
	for _, f := range feeds {
		if err := kv.CheckRoom(f.row, f.commit()); err != nil {
			return nil, err
		}
	}
	r.resetHealth(len(feeds))
	r.logits = nil // a graph pass's logits are not the head's to reuse
	p, err := r.newPass(st, kv, feeds, all)
	if err != nil {
		return nil, err
	}
	defer p.free()
	if err := r.layers(ctx, st, p); err != nil {
		return nil, err
	}
	return p.head(st)
}

// layers is the per-layer loop of every forward pass: each decoder layer's weights from the store (resident, or
// the next from the stream), computed by the pass, then released for the next unit.
func (r *runner) layers(ctx context.Context, st *stream, p pass) error {
	for i := range r.cfg.NumHiddenLayers {
		if err := ctx.Err(); err != nil {
			return err
		}
		w, release, err := r.store.layerSet(st, i)
		if err != nil {
			return err
		}
		err = p.prepare(i, w)
		if err == nil {
			span := r.prof.Begin(profiler.Forward, r.stepLabel(), i)
			err = p.compute(i, w)
			span.End(w.bytes)
		}
		release()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	return nil
}

// newPass embeds the new tokens (a lookup on the host, from the embedding resident or streamed first) and
// makes the pass that computes them.
func (r *runner) newPass(st *stream, kv *kvcache.Store, feeds []feed, all bool) (pass, error) {
	ew, release, err := r.store.embedSet(st)
	if err != nil {
		return nil, err
	}
	defer release()
	em := embedding{token: r.embedder(ew), perLayer: func(x *hostArray, ids [][]int) (*hostArray, error) { return r.perLayerInputs(ew, x, ids) }}
	var p pass
	err = r.store.guardMapped(func() (err error) { // the embedding may be read from a mapped shard
		if r.onHost(all) {
			p, err = r.newHostPass(kv, feeds, em, all)
		} else {
			p, err = r.newGraphPass(kv, feeds, em, all)
		}
		return err
	})
	return p, err
}

// embedding is what a pass embeds its tokens with: token writes the (scaled) embedding of token id at position
// pos into dst; perLayer computes the per-layer inputs of embedded tokens (runner.perLayerInputs).
type embedding struct {
	token    func(dst []float32, id, pos int) error
	perLayer func(x *hostArray, ids [][]int) (*hostArray, error)
}

// embedder returns the function writing the (scaled) embedding of token id, at position pos, into dst.
func (r *runner) embedder(ew *weightSet) func(dst []float32, id, pos int) error {
	c := r.cfg
	scale := float32(r.plan.EmbedScale)
	return func(dst []float32, id, pos int) error {
		if id < 0 || id >= c.VocabSize {
			return fmt.Errorf("token id %d at position %d is outside the vocabulary (vocab_size %d)", id, pos, c.VocabSize)
		}
		embedRow(dst, ew.hostTensors()[0].flat, r.embedID(id), c.HiddenSize)
		if scale != 1 {
			for i := range dst {
				dst[i] *= scale
			}
		}
		return nil
	}
}

// perLayerInputs computes on the host the per-layer inputs (model.PerLayerInputs) of the embedded tokens x
// [B, T, hidden] whose ids are ids[b][t] (-1 at padding, whose inputs are zero), from the embedding unit's
// per-layer tensors: [B, layers, T, Plan.PerLayerInput]; nil when the model has none.
func (r *runner) perLayerInputs(ew *weightSet, x *hostArray, ids [][]int) (*hostArray, error) {
	p := r.plan
	if p.PerLayerInput == 0 {
		return nil, nil
	}
	pl, ok := r.arch.(model.PerLayerInputs)
	if !ok {
		return nil, fmt.Errorf("the model's layers take per-layer inputs, which its architecture does not compute")
	}
	ts := ew.hostTensors()
	n, rows := len(p.Layers)*p.PerLayerInput, p.PerLayerTensors[0].Shape[0]
	b, t := x.dims[0], x.dims[1]
	tok := newHostArray(b, t, n)
	for bi, row := range ids {
		for ti, id := range row {
			if id >= 0 {
				id = r.embedID(id)
			}
			if id >= rows {
				return nil, fmt.Errorf("token id %d has no row in %s (%d rows)", id, p.PerLayerTensors[0].Name, rows)
			}
			if id >= 0 {
				embedRow(tok.data[(bi*t+ti)*n:(bi*t+ti+1)*n], ts[1].flat, id, n)
			}
		}
	}
	ws := make([]model.Value, len(ts)-2)
	for i := range ws {
		ws[i] = ts[i+2]
	}
	return arr(pl.PerLayerInputs(hostOps{bf16Products: r.bf16Products, batch: 1}, x, tok, ws)), nil
}

// embedID is the token whose embedding token id takes (model.Plan.EmbedAs).
func (r *runner) embedID(id int) int {
	if to, ok := r.plan.EmbedAs[id]; ok {
		return to
	}
	return id
}

// layerInput is layer l's slice [B, T, P] of per-layer inputs pli [B, layers, T, P] (nil: nil), into an array of
// the arena.
func layerInput(arena *hostArena, pli *hostArray, l int) model.Value {
	if pli == nil {
		return nil
	}
	b, layers, t, n := pli.dims[0], pli.dims[1], pli.dims[2], pli.dims[3]
	y := arena.array(b, t, n)
	for bi := range b {
		copy(y.data[bi*t*n:(bi+1)*t*n], pli.data[(bi*layers+l)*t*n:])
	}
	return y
}

// kvSources are the layers whose keys and values a later layer attends with (model.Plan.KVSource).
func kvSources(p *model.Plan) map[int]bool {
	src := map[int]bool{}
	for i, j := range p.KVSource {
		if j != i {
			src[j] = true
		}
	}
	return src
}

// onHost reports whether a forward pass runs on the host kernels rather than as graphs: always on cpu unless
// Options.GraphDecode, except a pass that wants every position's logits (Logits), which runs as graphs unless
// the model has block-quantized matrices (whose products only the host kernels compute as generation does),
// the arithmetic is llama.cpp's (Options.Arithmetic), which only the host kernels reproduce, or the inputs of the
// products are observed (Options.ObserveInputs).
func (r *runner) onHost(all bool) bool {
	return !r.graphDecode && (!all || r.store.quantized || r.llama != nil || r.observe != nil)
}

// pass runs ids for sequence 0 of a one-sequence store (forward with a single sequence).
func (r *runner) pass(ctx context.Context, st *stream, kv *kvcache.Store, ids []int, all bool) ([][]float32, error) {
	return r.forward(ctx, st, kv, []feed{{row: 0, ids: ids}}, all)
}

// resetHealth makes r.health n rows of one value per decoder layer, reusing its arrays.
func (r *runner) resetHealth(n int) {
	if cap(r.health) < n {
		old := r.health[:cap(r.health)]
		r.health = make([][]float32, n)
		copy(r.health, old)
	}
	r.health = r.health[:n]
	for i, h := range r.health {
		if h == nil {
			r.health[i] = make([]float32, r.cfg.NumHiddenLayers)
		}
	}
}

// ringSlack is the positions a host pass writes into a sliding layer's ring before attending (kvcache.Config.RingSlack):
// decode steps, draft verifications and prompt chunks up to this long write ahead, so that a position's attention
// is the same in each (hostOps.Attention).
const ringSlack = 64

// bucket rounds n up to a power of two, so that few graph shapes serve every length.
func bucket(n int) int {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(n-1))
}

// kvStore returns a one-sequence Store with room for capacity positions (kvStoreBatch).
// host says whether the host kernels will use it (runner.onHost), for which it follows Options.KVCache.
func (r *runner) kvStore(capacity int, host bool) (*kvcache.Store, error) {
	return r.kvStoreBatch(1, capacity, host)
}

// kvStoreBatch returns a Store for batch sequences of up to capacity positions each, reusing the last one when
// its sizes match.
func (r *runner) kvStoreBatch(batch, capacity int, host bool) (*kvcache.Store, error) {
	cfg := r.kvConfig(batch, capacity, host)
	if r.kv != nil && r.kv.Config().Equal(cfg) {
		r.kv.Reset()
		return r.kv, nil
	}
	freeKVStore(r.kv)
	r.kv = nil
	kv, err := r.newKV(cfg)
	if err != nil {
		return nil, err
	}
	r.kv = kv
	return kv, nil
}

// kvConfig sizes a Store for batch sequences of up to capacity positions: a sliding layer keeps a ring of its
// window's positions. A store the host kernels use (host) holds float16 under Options.KVCache f16.
func (r *runner) kvConfig(batch, capacity int, host bool) kvcache.Config {
	p := r.plan
	cfg := kvcache.Config{Layers: len(p.Layers), Batch: batch, KVHeads: p.KVHeads, Capacity: capacity, HeadDim: p.HeadDim,
		Half: host && r.kvHalf, RingSlack: ringSlack, Latent: latentLayers(p)}
	cfg.Dims, cfg.Share = cacheLayout(p)
	for i, l := range p.Layers {
		if l.Recurrent {
			if cfg.State == nil {
				cfg.State = make([]kvcache.State, len(p.Layers))
			}
			cfg.State[i] = kvcache.State{K: p.State.Conv, V: p.State.Delta}
			continue
		}
		if reach := l.Reach(); reach > 0 { // a sliding window, or a chunk: kept as a window of its size
			if cfg.Ring == nil {
				cfg.Ring = make([]int, len(p.Layers))
			}
			cfg.Ring[i] = reach
		}
	}
	return cfg
}

// cacheLayout are the per-layer key/value dims of a plan whose layers differ in them, and the layers each reads
// (Plan.KVSource); nil where every layer has the plan's and its own.
func cacheLayout(p *model.Plan) (dims []kvcache.Dims, share []int) {
	for i, l := range p.Layers {
		if l.HeadDim == 0 && l.KVHeads == 0 {
			continue
		}
		if dims == nil {
			dims = make([]kvcache.Dims, len(p.Layers))
		}
		dims[i] = kvcache.Dims{KVHeads: l.KVHeads, HeadDim: l.HeadDim}
	}
	return dims, p.KVSource
}

// latentLayers is kvcache.Config.Latent for p: which layers' values are their keys (LayerKind.Latent); nil for
// none.
func latentLayers(p *model.Plan) []bool {
	var l []bool
	for i, k := range p.Layers {
		if k.Latent {
			if l == nil {
				l = make([]bool, len(p.Layers))
			}
			l[i] = true
		}
	}
	return l
}

// newKV allocates a Store in device buffers (shared with the host where the backend has them).
func (r *runner) newKV(cfg kvcache.Config) (*kvcache.Store, error) {
	alloc := func(dims []int) ([]float32, any, error) {
		d, err := newDeviceTensor(r.backend, dtypes.Float32, dims...)
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
		if kv.Config().Shared(i) { // its source's, freed there
			continue
		}
		s, _ := kv.View(i).Layer(0)
		if d, ok := s.KHandle.(*deviceTensor); ok {
			d.free()
		}
		if d, ok := s.VHandle.(*deviceTensor); ok {
			d.free()
		}
	}
}

// passTables are the per-kind inputs of one forward pass over some rows of the store, each bringing t new
// positions (padding included): a rotary table per rope of the plan, and for the graphs an additive attention
// mask per window and chunk (the host kernels mask by positions: hostOps.Attention).
type passTables struct {
	cos, sin [][]float32 // by Plan.Ropes index: [rows, t, rope dims]
	masks    map[maskKind][]float32
	slots    map[maskKind]int // the cache slots of the layers of a window and chunk (S)
	// qscales are the graphs' query scales by LayerKind.QueryScale (Beta ≠ 0): [rows, t].
	qscales map[model.QueryScale][]float32
}

// passTables builds the tables of a pass: row i is cache row rows[i], whose lens[i] new positions (then padding
// up to t) start at kv.Len(rows[i]). masks asks for the graphs' masks.
func (r *runner) passTables(kv *kvcache.Store, rows, lens []int, t int, masks bool) passTables {
	p := r.plan
	pt := passTables{cos: make([][]float32, len(p.Ropes)), sin: make([][]float32, len(p.Ropes)), masks: map[maskKind][]float32{}, slots: map[maskKind]int{}}
	for ri, rope := range p.Ropes {
		for i, row := range rows {
			pos0 := kv.Len(row)
			var cs, sn []float32
			if r.llama != nil {
				cs, sn = llamaCppRotaryTable(rope, pos0, t)
			} else {
				cs, sn = rotaryTable(rope, pos0, t, pos0+lens[i])
			}
			pt.cos[ri], pt.sin[ri] = append(pt.cos[ri], cs...), append(pt.sin[ri], sn...)
		}
	}
	for l, kind := range p.Layers {
		if masks {
			pt.addQueryScale(kv, kind.QueryScale, rows, t)
		}
		mk := maskOf(kind)
		if _, ok := pt.slots[mk]; ok || kind.Recurrent { // a recurrent layer attends to nothing
			continue
		}
		view := kv.View(l)
		pt.slots[mk] = view.Slots()
		if !masks {
			continue
		}
		for _, row := range rows {
			pt.masks[mk] = append(pt.masks[mk], attentionMask(view, row, t, kind)...)
		}
	}
	return pt
}

// addQueryScale adds the query scale s of the pass's rows and t new positions to the tables, once per scale.
func (pt *passTables) addQueryScale(kv *kvcache.Store, s model.QueryScale, rows []int, t int) {
	if _, ok := pt.qscales[s]; ok || s.Beta == 0 {
		return
	}
	if pt.qscales == nil {
		pt.qscales = map[model.QueryScale][]float32{}
	}
	f := make([]float32, 0, len(rows)*t)
	for _, row := range rows {
		for i := range t {
			f = append(f, s.At(kv.Len(row)+i))
		}
	}
	pt.qscales[s] = f
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

// decodeTables are the rotary tables of a verification's rows: each position's as a decode step at it builds
// them (rotaryTable with that position's own sequence length, which dynamic NTK scaling depends on).
func (r *runner) decodeTables(pos [][]int) passTables {
	p := r.plan
	pt := passTables{cos: make([][]float32, len(p.Ropes)), sin: make([][]float32, len(p.Ropes))}
	for ri, rope := range p.Ropes {
		for _, row := range pos {
			for _, at := range row {
				cs, sn := rotaryTable(rope, at, 1, at+1)
				pt.cos[ri], pt.sin[ri] = append(pt.cos[ri], cs...), append(pt.sin[ri], sn...)
			}
		}
	}
	return pt
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

// maskKind is what decides a layer's attention mask: its window and chunk.
type maskKind struct{ window, chunk int }

func maskOf(k model.LayerKind) maskKind { return maskKind{k.Window, k.Chunk} }

// attentionMask is the additive attention mask [1, tb, S+tb] of cache row row of a layer's view (S = its
// slots) for a layer of kind: query t, at position Len(row)+t, sees the cached positions and the new positions
// up to itself, from the start of its window or chunk on (model.LayerKind.First). The first S columns are the
// cache slots, the position each holds given by the view (a ring holds the latest positions), the last tb the
// new positions.
func attentionMask(view *kvcache.View, row, tb int, kind model.LayerKind) []float32 {
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
		first := kind.First(q)
		for j, p := range held {
			if p < first { // a free slot holds -1
				out[j] = maskedOut
			}
		}
		for i := range tb {
			if i > t || pos0+i < first {
				out[s+i] = maskedOut
			}
		}
	}
	return m
}

// warnClamped warns, once per engine, when a float16 cache clamped keys or values to float16's range.
func (r *runner) warnClamped(kv *kvcache.Store) {
	if n := kv.TakeClamped(); n > 0 && r.clampWarned.CompareAndSwap(false, true) {
		msg := fmt.Sprintf("the float16 key/value cache clamped %d keys or values beyond ±65504 to that bound: the text may degrade; run with --kv-cache f32 (see %s)",
			n, sections.Anchor(sections.DType))
		if r.llama != nil {
			msg += "; llama.cpp stores them as ±Inf, so from here on --arithmetic llama.cpp no longer gives llama.cpp's logits"
		}
		slog.Warn(msg)
	}
}
