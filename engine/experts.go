package engine

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/profiler"
	"github.com/layerstream/layerstream/shards"
)

// Routed-only streaming of mixture-of-experts layers. The split lays out each routed expert's tensors together in
// its layer's shard (shards.TensorInfo.Expert); on the host kernels' path the stream reads a streamed sparse
// layer's other tensors only (attention, norms, router, shared expert: shards.Set.LoadPart with NoExpert), and
// once the router chose (hostOps.Route), the experts the pass's rows were routed to are read, one read each, in
// the order the layer computes them and ahead of the stream's read-ahead of later layers (readGate), while the
// first of them computes (hostOps.Rows waits for its expert). A layer's experts are read once per pass
// whatever the number of groups routed to them, kept in an expert cache under a byte budget (LRU or LFU), and the
// next layer's experts are predicted by its router applied to this layer's output and read ahead (prefetch). The
// graphs (Logits, GraphDecode) read whole layers, as every expert computes on every row there.

// ExpertPolicy is how the expert cache chooses what to evict.
type ExpertPolicy string

// The expert cache's policies: least recently used, or least frequently used (ties to the least recent). LRU is
// the default: on the routing of the synthetic Qwen3-30B-A3B shape (8 layers, 48 new tokens after a 32-token
// prompt) it hit 49.9% and 87.8% of the experts asked for with caches of 256 and 512 MB, LFU 31.4% and 81.9%
// (docs/performance-log.md; no trained mixture of experts was at hand to record a real routing).
const (
	ExpertLRU ExpertPolicy = "lru"
	ExpertLFU ExpertPolicy = "lfu"
)

// ParseExpertPolicy validates a --expert-cache-policy value.
func ParseExpertPolicy(s string) (ExpertPolicy, error) {
	switch p := ExpertPolicy(s); p {
	case ExpertLRU, ExpertLFU:
		return p, nil
	}
	return "", fmt.Errorf("unknown expert cache policy %q (known: lru, lfu)", s)
}

// expertKey names one expert of one layer.
type expertKey struct{ layer, expert int }

// expertEntry is one expert's weights read from its layer's shard: in the cache, or being read.
type expertEntry struct {
	key  expertKey
	done chan struct{} // closed when the read ended (err, or values set)
	err  error
	buf  *shards.Buffer
	// values are the expert's tensors as the host kernels read them, per spec of experts.specs[key.expert].
	values []model.Value
	bytes  int64 // what it holds in memory (its buffer)
	pins   int   // layers computing with it; a pinned entry is never evicted
	last   int64 // the cache's clock at its last use (LRU)
	uses   int64 // its uses (LFU)
}

// expertStore reads routed experts and keeps the cache of them.
type expertStore struct {
	s *weightStore
	// specs are, per expert, the indices in model.Plan.Weights of its tensors (model.WeightSpec.Expert).
	specs  [][]int
	budget int64
	policy ExpertPolicy
	// inFlight bounds the expert reads in flight (expertReadsFor); gate holds the stream's reads of whole units
	// back while expert reads are queued or in flight.
	inFlight int
	gate     readGate

	// pred predicts the next layer's experts (nil: no prediction; predict.go).
	pred *predictor

	mu      sync.Mutex
	entries map[expertKey]*expertEntry
	ahead   map[int][]*expertEntry // by layer: experts read ahead on a prediction, pinned until the layer computed
	held    int64                  // bytes of the entries
	clock   int64
	free    []*shards.Buffer // buffers of evicted entries, reused
	queue   []*expertEntry   // entries whose read has not started, in the order they were asked for
	readers int              // goroutines reading the queue (readQueue), at most inFlight

	hits, misses atomic.Int64 // experts asked for by a pass: found (or being read), or read then
	// predicted and predictedOK count the experts predicted for a layer and those of them its rows were then
	// routed to (predict.go), whether read ahead or not; readAhead the experts read on a prediction.
	predicted, predictedOK, readAhead atomic.Int64
}

// expertReads is the most expert reads in flight at once, and expertReadBytes the bytes they are sized to keep in
// flight (expertReadsFor): a layer's routed experts are read in the order the layer computes them, the first ones
// computing while the next ones read. On the synthetic Qwen3-30B-A3B shape (q4 experts of 2.6 MB, O_DIRECT, the
// 2-core VM under a load average near 20) 8 reads in flight gave 0.157 and 0.137 s/token against 0.180 and
// 0.212 with 2; on the gpt-oss-120b shape (MXFP4 experts of 13.2 MB, 4 a token) 2 at a time gave the shortest
// layers of 1, 2, 3 and 4, by a margin within the noise of the shared disk (docs/performance-log.md "Issue 34:
// gpt-oss read pattern").
const (
	expertReads     = 8
	expertReadBytes = 32 << 20
)

// expertReadsFor is the number of expert reads in flight for experts of size bytes: as many as keep
// expertReadBytes in flight, from 1 to expertReads.
func expertReadsFor(size int64) int {
	return int(min(max(expertReadBytes/max(size, 1), 1), expertReads))
}

// newExpertStore returns the expert store of s, or nil when no streamed layer lays its experts out apart or the
// passes read whole layers (Options.WholeExperts, the graphs, Options.Arithmetic llama.cpp).
func newExpertStore(s *weightStore, budget int64) *expertStore {
	if s.opts.WholeExperts || s.opts.GraphDecode || s.opts.Arithmetic == ArithmeticLlamaCpp {
		return nil // llama.cpp's arithmetic lists a layer's expert matrices before it routes (llamaCppExperts)
	}
	var specs [][]int
	for i, w := range s.plan.Weights {
		if e := w.Expert(); e >= 0 {
			for len(specs) <= e {
				specs = append(specs, nil)
			}
			specs[e] = append(specs[e], i)
		}
	}
	if len(specs) == 0 {
		return nil
	}
	policy := s.opts.ExpertPolicy
	if policy == "" {
		policy = ExpertLRU
	}
	x := &expertStore{s: s, specs: specs, budget: max(budget, 0), policy: policy, inFlight: expertReads,
		entries: map[expertKey]*expertEntry{}, ahead: map[int][]*expertEntry{}}
	for _, u := range s.set.Units() {
		if x.routed(u.Name) {
			x.inFlight = expertReadsFor(u.PartBytes(0))
			break
		}
	}
	return x
}

// routed reports whether the stream reads unit's experts apart: a decoder layer whose shard lays out as many
// experts as the model routes among.
func (x *expertStore) routed(unit string) bool {
	if x == nil || layerIndex(unit) < 0 {
		return false
	}
	u, ok := x.s.set.Unit(unit)
	return ok && u.Experts() == len(x.specs)
}

// takeBudget sets the expert cache's budget (Options.ExpertCache; auto: half of budget, the memory budget) and
// returns what it took from budget.
func (x *expertStore) takeBudget(budget int64) int64 {
	if x == nil {
		return 0
	}
	switch c := x.s.opts.ExpertCache; {
	case c > 0:
		x.budget = c
	case c == 0:
		x.budget = budget / 2
	}
	x.describe()
	return min(x.budget, max(budget, 0))
}

// footprint is the memory the stream takes beside the memory budget where layers stream their routed experts:
// the host buffers of their tensors but their experts, counted three times over as residentBudget counts whole
// layers', a pass's experts of one layer (all of them, for a long prompt) twice over (read and computing), and
// the resident embedding and output projection, which the budget for whole layers leaves to its margin.
func (x *expertStore) footprint() int64 {
	s := x.s
	var part, head int64
	for _, u := range s.set.Units() {
		if u.Layer >= 0 {
			part = max(part, x.streamedSize(u))
		} else if !s.opts.StreamAll {
			head += u.BufferSize()
		}
	}
	return 3*int64(s.opts.Prefetch+1)*part + 2*s.layerBytes() + head
}

// streamedSize is the buffer the stream needs for unit u: on the host kernels, a layer whose experts are read
// apart is read without them (its tensors of no expert: a tenth of a Qwen3-30B-A3B layer).
func (x *expertStore) streamedSize(u shards.UnitInfo) int64 {
	if !x.routed(u.Name) {
		return u.BufferSize()
	}
	return u.PartBytes(shards.NoExpert) + u.DecodeSize
}

// acquire returns expert key's entry pinned, starting its read when it is neither cached nor being read; asked
// says whether a pass asks for it (counted as a hit or a miss), rather than a prediction.
func (x *expertStore) acquire(key expertKey, asked bool) *expertEntry {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.clock++
	e := x.entries[key]
	switch {
	case e != nil && asked:
		x.hits.Add(1)
	case e == nil:
		if asked {
			x.misses.Add(1)
		} else {
			x.readAhead.Add(1)
		}
		e = &expertEntry{key: key, done: make(chan struct{})}
		if n := len(x.free); n > 0 {
			e.buf, x.free = x.free[n-1], x.free[:n-1]
		} else {
			e.buf = shards.NewBuffer(0)
		}
		x.entries[key] = e
		x.enqueue(e)
	}
	e.pins++
	e.last = x.clock
	if asked {
		e.uses++
	}
	return e
}

// enqueue queues entry e's read, which starts once the reads queued before it have started and fewer than
// x.inFlight are in flight: a layer's experts are read in the order it asked for them, which is the order it
// computes them (goroutines started one per read would start in any order). The caller holds mu.
func (x *expertStore) enqueue(e *expertEntry) {
	x.gate.begin()
	x.queue = append(x.queue, e)
	if x.readers < x.inFlight {
		x.readers++
		go x.readQueue()
	}
}

// readQueue reads the queued entries, first in first out, until the queue is empty.
func (x *expertStore) readQueue() {
	for {
		x.mu.Lock()
		if len(x.queue) == 0 {
			x.readers--
			x.mu.Unlock()
			return
		}
		e := x.queue[0]
		x.queue = x.queue[1:]
		x.mu.Unlock()
		x.read(e)
	}
}

// read reads entry e's expert from its layer's shard and makes its host views (load); an entry no layer holds
// any more by then (a prediction dropped) is evicted as its release would have.
func (x *expertStore) read(e *expertEntry) {
	x.load(e)
	close(e.done)
	x.gate.end()
	x.mu.Lock()
	defer x.mu.Unlock()
	if e.pins == 0 {
		x.unpinned(e)
		x.evict()
	}
}

// load reads entry e's expert and makes its host views, or sets e.err.
func (x *expertStore) load(e *expertEntry) {
	s, unit := x.s, layerUnit(e.key.layer)
	start := time.Now()
	l, err := s.set.LoadPart(context.Background(), unit, e.key.expert, e.buf)
	if err != nil {
		e.err = fmt.Errorf("expert %d of %s: %w", e.key.expert, unit, err)
		return
	}
	step := int(s.step.Load())
	s.prof.Record(profiler.ExpertRead, step, e.key.layer, start, l.ReadTime, l.ReadBytes)
	s.readBytes.Add(l.ReadBytes)
	prefix := unitPrefix(unit)
	e.values = make([]model.Value, len(x.specs[e.key.expert]))
	for k, i := range x.specs[e.key.expert] {
		spec := s.layerSpecs[i]
		raw, ok := l.Tensors[prefix+spec.suffix]
		if !ok || !slices.Equal(int64s(spec.shape), raw.Shape) {
			e.err = fmt.Errorf("expert %d of %s: tensor %q missing or of another shape than %v", e.key.expert, unit, prefix+spec.suffix, spec.shape)
			return
		}
		v, _, err := s.hostView(spec, raw, prefix+spec.suffix, func() (*deviceTensor, error) { return hostTensor(spec), nil })
		if err != nil {
			e.err = fmt.Errorf("expert %d of %s: %w", e.key.expert, unit, err)
			return
		}
		e.values[k] = v
	}
	e.bytes = int64(e.buf.Cap())
}

// release unpins entries and evicts what the budget does not hold.
func (x *expertStore) release(entries []*expertEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, e := range entries {
		e.pins--
		if e.pins == 0 && isDone(e) {
			x.unpinned(e)
		}
	}
	x.evict()
}

// unpinned drops entry e, read and held by no layer, when its read failed: the next pass reads it again. The
// caller holds mu.
func (x *expertStore) unpinned(e *expertEntry) {
	if e.err != nil && x.entries[e.key] == e {
		delete(x.entries, e.key)
	}
}

// evict drops unpinned entries that have been read, by the policy, until what they hold fits the budget; the
// caller holds mu.
func (x *expertStore) evict() {
	x.held = 0
	var victims []*expertEntry
	for _, e := range x.entries {
		if !isDone(e) {
			continue // still being read: its bytes are not known yet (nor safe to read)
		}
		x.held += e.bytes
		if e.pins == 0 {
			victims = append(victims, e)
		}
	}
	if x.held <= x.budget {
		return
	}
	slices.SortFunc(victims, func(a, b *expertEntry) int {
		if x.policy == ExpertLFU && a.uses != b.uses {
			return int(a.uses - b.uses)
		}
		return int(a.last - b.last)
	})
	for _, e := range victims {
		if x.held <= x.budget {
			break
		}
		delete(x.entries, e.key)
		x.held -= e.bytes
		e.values = nil
		x.free = append(x.free, e.buf) // the host views alias it: only a later read reuses it
	}
	// Keep a few buffers for the next reads; let the rest go.
	if n := len(x.free); n > 2*expertReads+len(x.specs) {
		x.free = x.free[n-2*expertReads-len(x.specs):]
	}
}

func isDone(e *expertEntry) bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// cached returns the bytes the cache holds.
func (x *expertStore) cached() int64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	var n int64
	for _, e := range x.entries {
		if isDone(e) {
			n += e.bytes
		}
	}
	return n
}

// dropAhead releases the experts read ahead for layers no pass took them for (the stream stopped).
func (x *expertStore) dropAhead() {
	if x == nil {
		return
	}
	x.mu.Lock()
	var entries []*expertEntry
	for l, ahead := range x.ahead {
		entries = append(entries, ahead...)
		delete(x.ahead, l)
	}
	x.mu.Unlock()
	x.release(entries)
}

// describe logs the expert cache's budget and policy.
func (x *expertStore) describe() {
	slog.Info(fmt.Sprintf("mixture of experts: streamed layers read only their routed experts; expert cache %s (%s)", bytesize.Format(x.budget), x.policy),
		"experts", len(x.specs))
}

// routedLayer is a streamed sparse layer's experts during one pass: those its rows were routed to, read on
// demand and bound into the layer's weights as each is needed.
type routedLayer struct {
	x     *expertStore
	layer int
	taken map[int]*expertEntry // by expert: pinned until release
	ahead []*expertEntry       // read ahead for the layer (a prediction): pinned until release
}

// newRoutedLayer returns layer's routed experts for a pass.
func (x *expertStore) newRoutedLayer(layer int) *routedLayer {
	return &routedLayer{x: x, layer: layer, taken: map[int]*expertEntry{}}
}

// adopt takes the experts read ahead for layer (the stream makes a layer's routedLayer as it reads the layer,
// which may be before the layer before it computed and predicted: the prediction is taken when routing).
func (x *expertStore) adopt(layer int) []*expertEntry {
	x.mu.Lock()
	defer x.mu.Unlock()
	ahead := x.ahead[layer]
	delete(x.ahead, layer)
	return ahead
}

// prefetch reads ahead experts of layer (a prediction), pinned until layer's next routedLayer is released; a
// prediction for a layer replaces the one before it.
func (x *expertStore) prefetch(layer int, experts []int) {
	var entries []*expertEntry
	for _, e := range experts {
		entries = append(entries, x.acquire(expertKey{layer, e}, false))
	}
	x.mu.Lock()
	old := x.ahead[layer]
	x.ahead[layer] = entries
	x.mu.Unlock()
	if old != nil {
		x.release(old)
	}
}

// want starts reading the experts that any row was routed to (byE[e] not empty), in expert order.
func (r *routedLayer) want(byE [][]int, k int) {
	if p := r.x.pred; p != nil {
		p.k.Store(int64(k))
	}
	if len(r.taken) == 0 {
		r.ahead = append(r.ahead, r.x.adopt(r.layer)...)
	}
	for e, rows := range byE {
		if len(rows) > 0 && r.taken[e] == nil {
			r.taken[e] = r.x.acquire(expertKey{r.layer, e}, true)
		}
	}
}

// slots makes room in w for every expert (bound by bind when routed to): the model ranges over w.Experts.
func (r *routedLayer) slots(w *model.LayerWeights) {
	for _, specs := range r.x.specs {
		for _, i := range specs {
			r.x.s.plan.Weights[i].Field(w)
		}
	}
}

// bind waits for expert e's read and binds its tensors into w.Experts[e].
func (r *routedLayer) bind(e int, w *model.LayerWeights) error {
	en := r.taken[e]
	if en == nil {
		return fmt.Errorf("expert %d of %s was not asked for", e, layerUnit(r.layer))
	}
	s := r.x.s
	span := s.prof.Begin(profiler.ExpertWait, int(s.step.Load()), r.layer)
	<-en.done
	span.End(0)
	if en.err != nil {
		return en.err
	}
	for k, i := range r.x.specs[e] {
		*s.plan.Weights[i].Field(w) = en.values[k]
	}
	return nil
}

// release unpins the layer's experts (and those read ahead for it), which the cache may then evict, and scores
// the prediction made for the layer against the experts its rows were routed to.
func (r *routedLayer) release() {
	if p := r.x.pred; p != nil {
		p.score(r.layer, r.taken)
	}
	entries := slices.Collect(func(yield func(*expertEntry) bool) {
		for _, e := range r.taken {
			if !yield(e) {
				return
			}
		}
	})
	r.x.release(append(entries, r.ahead...))
	r.taken, r.ahead = nil, nil
}

// readGate gives a streamed sparse layer's expert reads, which the computing layer waits for, the disk before the
// stream's read-ahead of later units (shards.LoadTrace.Yield): a unit's read waits, before each of its pieces,
// until no expert read is queued or in flight. Expert reads never wait for the stream, so the wait ends.
type readGate struct {
	mu     sync.Mutex
	urgent int           // expert reads queued or in flight
	idle   chan struct{} // closed while urgent is 0; nil before the first expert read
}

// begin counts an urgent read.
func (g *readGate) begin() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.urgent == 0 {
		g.idle = make(chan struct{})
	}
	g.urgent++
}

// end counts an urgent read done.
func (g *readGate) end() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.urgent--; g.urgent == 0 {
		close(g.idle)
	}
}

// wait returns once no urgent read is queued or in flight, or with ctx's error.
func (g *readGate) wait(ctx context.Context) error {
	g.mu.Lock()
	idle := g.idle
	g.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// yield is the stream's shards.LoadTrace.Yield: nil where there is no expert store.
func (x *expertStore) yield() func(context.Context) error {
	if x == nil {
		return nil
	}
	return x.gate.wait
}
