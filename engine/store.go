package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/profiler"
	"github.com/layerstream/layerstream/shards"
)

// weightStore holds a model's weights for the forward passes: the shard set, the pools of buffers the stream
// fills, the units kept resident (the embedding, final norm and output projection unless Options.StreamAll;
// every decoder layer under Options.Resident), and the stream that reads the others (stream.go). A pass asks it
// for each unit in schedule order (unitSet, layerSet, headWeights) and releases it when done.
type weightStore struct {
	set     *shards.Set
	backend backends.Backend
	cfg     *checkpoint.Config
	plan    *model.Plan
	// opts are the engine's: the store reads Prefetch, MaxLayerBuffers, Resident, StreamAll, GraphDecode (the
	// graphs need device buffers filled; the host kernels read units in place), NoMap and DirectIO.
	opts Options
	prof *profiler.Profiler
	// step is the profiler's step label of the pass running (0 prefill, 1.. decode), set by the runner.
	step atomic.Int64

	dtype        dtypes.DType     // of weight matrices on the device
	computeDType checkpoint.DType // the dtype policy's choice (guard.ChooseDType)
	// ownQuantized: the shards were block-quantized by layerstream's split (their source record names a
	// quantizer), so their Q8_0 matrices take two-part inputs (kernels.QuantMatrix.TwoPart).
	ownQuantized bool
	// quantized: some weight matrix is block-quantized.
	quantized bool

	layerSpecs []tensorSpec
	headUnit   string // lm_head, or embed when the output projection is tied to the embeddings

	pools *pools // streamed units' buffers
	// resident holds the decoder layers kept loaded (nil entries stream): every one under Options.Resident,
	// else those the memory budget keeps (residency.go); keep says which, from allocate on.
	resident []*weightSet
	keep     []bool
	embed    *weightSet // resident head units (nil with StreamAll)
	norm     *weightSet
	head     *weightSet

	decodeBound decodeWatch // warns once when decoding encoded shards, not the disk, bounds the stream

	// experts reads the routed experts of streamed mixture-of-experts layers apart (nil: none; experts.go);
	// expertSpec is, per layer spec, the expert it belongs to (-1: none).
	experts    *expertStore
	expertSpec []int
	// readBytes counts the bytes read from shard files: units streamed and experts.
	readBytes atomic.Int64
}

// newWeightStore checks that set holds every unit and tensor the plan needs, and nothing it does not, and sizes
// the stream (Options.DeviceBudget). Buffers are allocated by allocate.
func newWeightStore(set *shards.Set, b backends.Backend, plan *model.Plan, opts Options, compute checkpoint.DType) (*weightStore, error) {
	s := &weightStore{set: set, backend: b, cfg: set.Config, plan: plan, opts: opts, prof: opts.Profiler,
		dtype: dtypes.Float32, computeDType: compute}
	if compute == checkpoint.BF16 {
		s.dtype = dtypes.BFloat16
	}
	s.ownQuantized = set.Source() != nil && set.Source().Quantizer != ""
	for _, u := range set.Units() {
		for _, t := range u.Tensors {
			s.quantized = s.quantized || t.DType.Quantized()
		}
	}
	if err := s.checkUnits(); err != nil {
		return nil, err
	}
	if err := s.checkTensors(); err != nil {
		return nil, err
	}
	for _, w := range plan.Weights {
		dt := dtypes.Float32
		if len(w.Shape) == 2 {
			dt = s.dtype
		}
		s.layerSpecs = append(s.layerSpecs, tensorSpec{suffix: w.Name, shape: w.Shape, dtype: dt})
		s.expertSpec = append(s.expertSpec, w.Expert())
	}
	if opts.DeviceBudget > 0 {
		layerBytes := s.layerBytes()
		n := opts.DeviceBudget / max(layerBytes, 1)
		if n < 1 {
			return nil, fmt.Errorf("device budget of %s is smaller than one decoder layer (%s)", bytesize.Format(opts.DeviceBudget), bytesize.Format(layerBytes))
		}
		s.opts.MaxLayerBuffers = int(min(n, int64(s.cfg.NumHiddenLayers)))
	}
	return s, nil
}

func (s *weightStore) hasUnit(name string) bool {
	_, ok := s.set.Unit(name)
	return ok
}

// checkUnits makes sure every unit the model needs exists before any work starts, and finds the output head.
func (s *weightStore) checkUnits() error {
	c := s.cfg
	if !s.hasUnit(unitEmbed) {
		return fmt.Errorf("missing unit embed (tensor %s)", embedWeight)
	}
	if !s.hasUnit(unitNorm) {
		return fmt.Errorf("missing unit norm (tensor %s)", normWeight)
	}
	for i := range c.NumHiddenLayers {
		if !s.hasUnit(layerUnit(i)) {
			return fmt.Errorf("missing unit %s (tensors model.layers.%d.*; config.json num_hidden_layers is %d)", layerUnit(i), i, c.NumHiddenLayers)
		}
	}
	switch {
	case s.hasUnit(unitLMHead):
		s.headUnit = unitLMHead
	case c.TieWordEmbeddings:
		s.headUnit = unitEmbed
	default:
		return fmt.Errorf("no output projection: tensor %s is missing and config.json has tie_word_embeddings false (a tied model sets it true to reuse %s)", lmHeadWeight, embedWeight)
	}
	return nil
}

// checkTensors makes sure every tensor of every unit is one the model reads, or one known to be unused
// (model.SkippedLayerTensors): a checkpoint holding weights the configuration does not account for (an o_proj.bias
// without attention_bias, q_norm weights for a family without q/k norms) is refused by name rather than run
// without them. A tensor the model reads must have the shape the configuration implies (from the manifest, so
// that a config.json disagreeing with the weights is refused now rather than when generation reaches the layer).
func (s *weightStore) checkTensors() error {
	layers := map[model.LayerKind]map[string][]int{} // by kind of layer: the tensors it holds
	for _, k := range s.plan.Layers {
		if layers[k] != nil {
			continue
		}
		layer := map[string][]int{}
		for i, w := range s.plan.Weights {
			if s.plan.Holds(k, i) {
				layer[w.Name] = w.Shape
			}
		}
		for _, name := range model.SkippedLayerTensors {
			layer[name] = nil
		}
		layers[k] = layer
	}
	for _, u := range s.set.Units() {
		for _, t := range u.Tensors {
			var shape []int
			var used bool
			if u.Layer >= 0 && u.Layer < len(s.plan.Layers) {
				shape, used = layers[s.plan.Layers[u.Layer]][strings.TrimPrefix(t.Name, unitPrefix(u.Name))]
			} else if u.Layer >= 0 {
				used = false
			} else {
				for _, spec := range s.headSpecs(u.Name) {
					if spec.suffix == t.Name {
						shape, used = spec.shape, true
					}
				}
			}
			if !used {
				return fmt.Errorf("tensor %q (unit %s) is not used by %s with this config.json: refusing to run without it (a config key that enables it may be missing, e.g. attention_bias or mlp_bias; see TROUBLESHOOTING.md %q)", t.Name, u.Name, s.cfg.Arch.Name, sections.UnusedTensor)
			}
			if shape != nil && !slices.Equal(int64s(shape), t.Shape) {
				return fmt.Errorf("unit %s: tensor %q has shape %v, the config implies %v (config.json disagrees with the weights)", u.Name, t.Name, t.Shape, shape)
			}
		}
	}
	return nil
}

// layerBytes is the memory the largest decoder layer takes while the engine holds it (guard.HeldBytes): its
// block-quantized matrices as their blocks and bf16 matrices as bf16 on the host kernels' path, which multiplies
// them in place (alias), and converted to the compute dtype for the graphs.
func (s *weightStore) layerBytes() int64 {
	var most int64
	for _, u := range s.set.Units() {
		if u.Layer < 0 {
			continue
		}
		var n int64
		for _, t := range u.Tensors {
			n += guard.HeldBytes(t.DType, t.Shape, t.Length, s.computeDType, !s.opts.GraphDecode)
		}
		most = max(most, n)
	}
	return most
}

// headSpecs are the tensors of the non-layer units.
func (s *weightStore) headSpecs(unit string) []tensorSpec {
	c := s.cfg
	switch unit {
	case unitEmbed: // and the per-layer inputs' tensors (model.Plan.PerLayerTensors)
		specs := []tensorSpec{{suffix: embedWeight, shape: []int{c.VocabSize, c.HiddenSize}, dtype: s.dtype}}
		for _, w := range s.plan.PerLayerTensors {
			dt := dtypes.Float32
			if len(w.Shape) == 2 {
				dt = s.dtype
			}
			specs = append(specs, tensorSpec{suffix: w.Name, shape: w.Shape, dtype: dt})
		}
		return specs
	case unitNorm:
		return []tensorSpec{{suffix: normWeight, shape: []int{c.HiddenSize}, dtype: dtypes.Float32}}
	default:
		return []tensorSpec{{suffix: lmHeadWeight, shape: []int{c.VocabSize, c.HiddenSize}, dtype: s.dtype}}
	}
}

// mapShards reports whether the stream maps shard files (shards.Set.Map) rather than reading them.
func (s *weightStore) mapShards() bool { return !s.opts.NoMap && s.opts.DirectIO != DirectIOOn }

// inPlace reports whether the passes read units in place on the host kernels rather than from device buffers.
func (s *weightStore) inPlace() bool { return !s.opts.GraphDecode }

// allocate creates the device buffers: the stream pools, and the resident units loaded once.
func (s *weightStore) allocate(ctx context.Context) error {
	s.keep = make([]bool, s.cfg.NumHiddenLayers)
	if s.opts.Resident {
		for i := range s.keep {
			s.keep[i] = true
		}
	} else {
		s.experts = s.routedExperts()
		budget := s.residentBudget()
		budget -= s.experts.takeBudget(budget)
		s.keep = s.residentLayers(budget)
		s.describeResidency(s.keep, budget)
		if s.experts != nil && !s.opts.NoExpertPrefetch {
			var err error
			if s.experts.pred, err = newPredictor(ctx, s.experts, s.keep); err != nil {
				return err
			}
		}
	}
	// The pooled buffers hold the streamed units: sized for the largest (Load grows a buffer for a bigger one).
	hostBuffers, hostSize := s.opts.Prefetch, 0
	for _, name := range s.schedule() {
		if u, ok := s.set.Unit(name); ok {
			hostSize = max(hostSize, int(s.experts.streamedSize(u)))
		}
	}
	if s.mapShards() {
		hostSize = 0 // the shards are mapped: the buffers only hold decode areas, grown when a unit needs one
	}
	if !s.opts.Resident && s.inPlace() {
		// The computing layer keeps its buffer (alias): without this one, one read fewer would be in flight
		// (O_DIRECT, 4-layer TinyLlama shape, 4 alternating runs: 0.217 s/token without it, 0.193 with it).
		hostBuffers++
	}
	s.pools = &pools{host: make(chan *shards.Buffer, hostBuffers), sets: map[string]chan *weightSet{}}
	for range hostBuffers {
		s.pools.host <- shards.NewBuffer(hostSize)
	}
	streamed := 0
	for i, keep := range s.keep {
		if !keep {
			streamed++
			continue
		}
		if s.resident == nil {
			s.resident = make([]*weightSet, s.cfg.NumHiddenLayers)
		}
		w, err := s.loadResident(ctx, kindLayer, layerUnit(i), s.layerSpecs)
		if err != nil {
			return err
		}
		s.resident[i] = w
	}
	if streamed > 0 {
		if err := s.addSets(kindLayer, min(s.opts.MaxLayerBuffers, streamed), s.layerSpecs); err != nil {
			return err
		}
	}
	if s.opts.StreamAll {
		for _, u := range []string{unitEmbed, unitNorm, s.headUnit} {
			if _, ok := s.pools.sets[u]; !ok {
				if err := s.addSets(u, 1, s.headSpecs(u)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return s.loadHead(ctx)
}

// routedExperts returns the expert store where a streamed layer lays its experts out apart (nil otherwise):
// routed-only streaming on the host kernels.
func (s *weightStore) routedExperts() *expertStore {
	x := newExpertStore(s, 0)
	if x == nil {
		return nil
	}
	for i := range s.cfg.NumHiddenLayers {
		if x.routed(layerUnit(i)) {
			return x
		}
	}
	return nil
}

// addSets adds a pool of n sets of kind for the stream.
func (s *weightStore) addSets(kind string, n int, specs []tensorSpec) error {
	ch := make(chan *weightSet, n)
	for range n {
		w, err := newWeightSet(s.backend, kind, specs, s.inPlace())
		if err != nil {
			return err
		}
		s.pools.all = append(s.pools.all, w)
		ch <- w
	}
	s.pools.sets[kind] = ch
	return nil
}

// loadHead loads the embedding, the final norm and the output projection, kept for the engine's life.
func (s *weightStore) loadHead(ctx context.Context) error {
	var err error
	if s.embed, err = s.loadResident(ctx, unitEmbed, unitEmbed, s.headSpecs(unitEmbed)); err != nil {
		return err
	}
	if s.norm, err = s.loadResident(ctx, unitNorm, unitNorm, s.headSpecs(unitNorm)); err != nil {
		return err
	}
	s.head = s.embed
	if s.headUnit == unitLMHead {
		s.head, err = s.loadResident(ctx, unitLMHead, unitLMHead, s.headSpecs(unitLMHead))
	}
	return err
}

// loadResident loads unit into a new set kept for the Engine's life.
//
// On the host-kernel path (no GraphDecode) the unit is kept as loaded, in a buffer of its own or, for the head
// units (embedding, final norm, output projection) with mapped shards, in the mapping the set keeps; the host
// kernels read it in place (alias) like a streamed layer's, in the same dtype: resident and streamed decoding run
// the same kernels over the same bytes, and the output projection reads bf16 weights, half the bytes of an f32
// copy. The device buffers serve the graphs (Logits) and are filled the first time one runs (deviceReady). With
// GraphDecode the unit goes through a pooled host buffer into the device buffers at once.
func (s *weightStore) loadResident(ctx context.Context, kind, unit string, specs []tensorSpec) (*weightSet, error) {
	w, err := newWeightSet(s.backend, kind, specs, s.inPlace())
	if err != nil {
		return nil, err
	}
	s.pools.all = append(s.pools.all, w)
	// With Resident, the output projection (untied) is read into a buffer of its own, like a decoder layer, where
	// the host kernels pack it in panels (packs): a mapping is read-only. Streaming, it stays mapped from the page
	// cache where the shards are, which already holds it: a copy of its own would double it.
	packs := !s.opts.NoPanels && (kind == kindLayer || kind == unitLMHead) && s.inPlace() && s.opts.Arithmetic != ArithmeticLlamaCpp
	mapped := kind != kindLayer && s.mapShards() && !(packs && s.opts.Resident && s.packable(unit))
	buf := shards.NewBuffer(0) // grown by Load to the unit's size; the view keeps it alive
	load := s.set.Load
	switch {
	case mapped:
		load = s.set.Map // the set keeps the mapping: the device buffers are filled from the page cache
	case !s.inPlace():
		buf = <-s.pools.host
		defer func() { s.pools.host <- buf }()
	}
	l, err := load(ctx, unit, buf)
	if err != nil {
		return nil, err
	}
	fill := func() error { return s.fill(w, l) }
	if s.inPlace() {
		// The host kernels read it in place; the device buffers (the graphs') are filled when first needed,
		// so an engine that never runs a graph (Logits) never holds the f32 copy of its layers, embedding and
		// lm_head.
		w.pending = l
		fill = func() error { return s.alias(w, l) }
	}
	if err := s.guardMapped(fill); err != nil {
		return nil, err
	}
	if packs && !mapped {
		s.packPanels(w)
	}
	return w, nil
}

// packable reports whether some matrix of unit is of a type the host kernels pack in panels.
func (s *weightStore) packable(unit string) bool {
	u, _ := s.set.Unit(unit)
	for _, t := range u.Tensors {
		if q, ok := t.DType.Quant(); ok && len(t.Shape) == 2 && kernels.Packs(q) {
			return true
		}
	}
	return false
}

// packPanels packs the block-quantized matrices of a resident decoder layer or output projection in panels for
// the host kernels (kernels.PackPanels), in place, in the buffer the unit was read into (its own, never a mapping):
// decode steps, batch steps and draft verifications then cost less, at the same bits (Options.NoPanels). Its
// device buffers are then never filled from it (deviceReady): on the host-kernel path a model with
// block-quantized matrices runs no graph (runner.onHost), and llama.cpp's arithmetic, whose kernels read rows,
// keeps them as stored.
func (s *weightStore) packPanels(w *weightSet) {
	for _, v := range w.view {
		if v == nil {
			continue
		}
		if q, ok := v.flat.(kernels.QuantMatrix); ok {
			if q = kernels.PackPanels(q); q.Panelled() {
				v.flat, w.panelled = q, true
			}
		}
	}
}

// deviceReady fills the device buffers of a set whose filling was deferred (weightSet.pending).
func (s *weightStore) deviceReady(w *weightSet) error {
	if w.pending == nil {
		return nil
	}
	if w.panelled {
		return fmt.Errorf("unit %s: its quantized matrices are packed for the host kernels (packPanels), which a graph cannot read", w.unit)
	}
	if err := s.guardMapped(func() error { return s.fill(w, w.pending) }); err != nil {
		return err
	}
	w.pending = nil
	return nil
}

// schedule is the order in which a forward pass consumes streamed units.
func (s *weightStore) schedule() []string {
	var units []string
	if s.opts.StreamAll {
		units = append(units, unitEmbed)
	}
	for i := range s.cfg.NumHiddenLayers {
		if s.keep == nil || !s.keep[i] {
			units = append(units, layerUnit(i))
		}
	}
	if s.opts.StreamAll {
		units = append(units, unitNorm, s.headUnit)
	}
	return units
}

// newStream starts the pipeline for up to passes forward passes (without end when negative; nil in resident
// mode); graph says whether they run as compiled graphs (Logits, GraphDecode) rather than on the host kernels.
func (s *weightStore) newStream(ctx context.Context, passes int, graph bool) *stream {
	schedule := s.schedule()
	if len(schedule) == 0 {
		return nil
	}
	return s.startStream(ctx, schedule, passes, !graph)
}

// unitSet returns the device weights of unit: resident, or the next one from the stream. release gives it back.
func (s *weightStore) unitSet(st *stream, unit string, resident *weightSet) (w *weightSet, release func(), err error) {
	if resident != nil {
		return resident, func() {}, nil
	}
	if st == nil {
		return nil, nil, fmt.Errorf("unit %s is neither resident nor streamed", unit)
	}
	span := s.prof.Begin(profiler.PrefetchWait, int(s.step.Load()), layerIndex(unit))
	w, err = st.next(unit)
	span.End(0)
	if err != nil {
		return nil, nil, err
	}
	return w, func() { s.releaseSet(w) }, nil
}

// embedSet returns the embedding's weights and their release.
func (s *weightStore) embedSet(st *stream) (*weightSet, func(), error) {
	return s.unitSet(st, unitEmbed, s.embed)
}

// layerSet returns decoder layer i's weights (resident, or next from the stream) and its release function.
func (s *weightStore) layerSet(st *stream, i int) (*weightSet, func(), error) {
	var res *weightSet
	if s.resident != nil {
		res = s.resident[i]
	}
	return s.unitSet(st, layerUnit(i), res)
}

// headWeights returns the final norm's and the output projection's weights, resident or the next ones from
// the stream, with one release for both.
func (s *weightStore) headWeights(st *stream) (norm, head *weightSet, release func(), err error) {
	norm, releaseNorm, err := s.unitSet(st, unitNorm, s.norm)
	if err != nil {
		return nil, nil, nil, err
	}
	head, releaseHead, err := s.unitSet(st, s.headUnit, s.head)
	if err != nil {
		releaseNorm()
		return nil, nil, nil, err
	}
	return norm, head, func() { releaseHead(); releaseNorm() }, nil
}

// releaseSet hands a device set back to its pool (the release stage), and the shard buffer an aliased set
// was reading back to the host pool.
func (s *weightStore) releaseSet(w *weightSet) {
	if w.routed != nil {
		w.routed.release()
		w.routed = nil
	}
	if w.buf != nil {
		s.pools.host <- w.buf
		w.buf, w.view, w.layer = nil, nil, nil
	}
	if w.kind == kindLayer {
		s.pools.inUse.Add(-1)
	}
	s.pools.sets[w.kind] <- w
}

// stats returns the device-buffer counters.
func (s *weightStore) stats() Stats {
	st := Stats{PeakLayerBuffersInUse: int(s.pools.peakInUse.Load()), LayerBuffers: cap(s.pools.sets[kindLayer])}
	st.ReadBytes = s.readBytes.Load()
	if x := s.experts; x != nil {
		st.Experts = ExpertStats{Hits: x.hits.Load(), Misses: x.misses.Load(), Predicted: x.predicted.Load(),
			PredictedUsed: x.predictedOK.Load(), ReadAhead: x.readAhead.Load(), CacheBytes: x.cached(), BudgetBytes: x.budget}
	}
	for i, keep := range s.keep {
		u, _ := s.set.Unit(layerUnit(i))
		st.LayerBytes += u.FileSize
		if keep {
			st.ResidentLayers++
			st.ResidentBytes += u.BufferSize()
		} else {
			st.StreamedBytes += u.BufferSize()
		}
	}
	st.LayerBuffers += st.ResidentLayers
	return st
}

// close frees the device buffers and unmaps the shards.
func (s *weightStore) close() {
	if s.pools != nil {
		s.pools.free()
	}
	if err := s.set.Close(); err != nil {
		slog.Error("engine: unmapping shards", "err", err)
	}
}
