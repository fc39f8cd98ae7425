package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/profiler"
	"github.com/layerstream/layerstream/shards"
)

// The streaming pipeline: four stages connected by channels.
//
//	prefetch: units i+1..i+k read from disk into a bounded pool of reused host buffers (k = Options.Prefetch),
//	          or, by default, mapped from the page cache (shards.Set.Map: no copy), the buffer holding the mapping
//	transfer: a loaded unit is converted into a free set of device buffers while the current layer computes;
//	          on the host-kernel path a decoder layer is instead read in place from its shard buffer (alias),
//	          which the set keeps until it is released
//	compute:  the forward pass takes the sets in schedule order (stream.next)
//	release:  the forward pass hands a set back (weightStore.releaseSet); its buffers take the next unit
//
// Every pool is a buffered channel, so the memory in flight is bounded by construction: at most k host
// buffers and at most Options.MaxLayerBuffers decoder-layer sets exist, whatever the speeds of the stages. On the
// host-kernel path a layer set in use also holds a host buffer, so the layers in flight are bounded by both.

// pools holds the reusable buffers of a streamed engine. They live as long as the weightStore.
type pools struct {
	host chan *shards.Buffer
	// sets holds the free device sets per kind ("layer", and the head units when they stream).
	sets map[string]chan *weightSet
	all  []*weightSet

	inUse, peakInUse atomic.Int64 // layer sets taken by transfer and not yet released
}

func (p *pools) free() {
	for _, w := range p.all {
		w.free()
	}
	p.all = nil
}

// loadResult is what prefetch hands to transfer.
type loadResult struct {
	unit   string
	loaded *shards.Loaded
	buf    *shards.Buffer
	err    error
}

// stream runs prefetch and transfer for a schedule of units, repeated for up to passes forward passes (without
// end when passes is negative: the batch loop's stream, stopped when the loop goes idle).
type stream struct {
	store    *weightStore
	schedule []string
	host     bool // the passes run on the host kernels: layers are aliased, not filled
	ctx      context.Context
	cancel   context.CancelFunc
	loaded   chan loadResult
	ready    chan *weightSet
	errc     chan error // the first stage error
	wg       sync.WaitGroup
}

// startStream starts the prefetch and transfer goroutines; host says whether the passes run on the host
// kernels. The caller must call stop.
func (ws *weightStore) startStream(ctx context.Context, schedule []string, passes int, host bool) *stream {
	ctx, cancel := context.WithCancel(ctx)
	s := &stream{
		store: ws, schedule: schedule, host: host, ctx: ctx, cancel: cancel,
		loaded: make(chan loadResult, ws.opts.Prefetch),
		ready:  make(chan *weightSet, 1),
		errc:   make(chan error, 2),
	}
	total := passes * len(schedule)
	if passes < 0 {
		total = -1
	}
	s.wg.Add(2)
	go s.prefetch(total)
	go s.transfer(total)
	return s
}

func (s *stream) fail(err error) {
	select {
	case s.errc <- err:
	default:
	}
	s.cancel()
}

// prefetch loads total units of the schedule in order (without end when total is negative). Each load runs on
// its own goroutine, which starts once a host buffer is free and the previous load has read its file: one
// read at a time, front to back, and the next read starts while the previous unit's encoded tensors still
// decode (shards.LoadTrace), so that the disk does not wait for decoding. Where layers stream their routed
// experts apart, a read yields to the expert reads the computing layer waits for (shards.LoadTrace.Yield,
// readGate). The loads are handed to transfer in schedule order.
func (s *stream) prefetch(total int) {
	defer s.wg.Done()
	defer close(s.loaded)
	p := s.store.pools
	pending := make(chan chan loadResult, cap(p.host)) // the loads in flight, in schedule order
	handed := make(chan struct{})
	go func() {
		defer close(handed)
		for res := range pending {
			r := <-res
			if r.err != nil {
				p.host <- r.buf
				if s.ctx.Err() == nil {
					s.fail(r.err)
				}
				continue
			}
			select {
			case s.loaded <- r:
			case <-s.ctx.Done():
				p.host <- r.buf
			}
		}
	}()
	defer func() { <-handed }()
	defer close(pending)
	readTurn := make(chan struct{}, 1)
	readTurn <- struct{}{}
	for i := 0; total < 0 || i < total; i++ {
		unit := s.schedule[i%len(s.schedule)]
		var buf *shards.Buffer
		select {
		case buf = <-p.host:
		case <-s.ctx.Done():
			return
		}
		select {
		case <-readTurn:
		case <-s.ctx.Done():
			p.host <- buf
			return
		}
		res := make(chan loadResult, 1)
		pending <- res // never blocks: a load holds a host buffer
		go func() {
			res <- s.load(unit, buf, func() {
				readTurn <- struct{}{}
				// Let the next load start its read now: this goroutine goes on to decode beside the workers,
				// and the cores would not be free for it before the decoding ends (measured: the disk idle
				// 0.5-0.9 ms between SmolLM2-135M layers without this).
				runtime.Gosched()
			})
		}()
	}
}

// load loads unit into buf and calls readDone, once, as soon as its file is read.
func (s *stream) load(unit string, buf *shards.Buffer, readDone func()) loadResult {
	readDone = sync.OnceFunc(readDone)
	defer readDone()
	start := time.Now()
	load := s.store.set.Load
	switch {
	case s.host && s.store.experts.routed(unit):
		// The layer's tensors but its routed experts, which are read when routed to (experts.go).
		load = func(ctx context.Context, unit string, buf *shards.Buffer) (*shards.Loaded, error) {
			return s.store.set.LoadPart(ctx, unit, shards.NoExpert, buf)
		}
	case s.store.mapShards():
		load = s.store.set.Map
	}
	l, err := load(shards.WithLoadTrace(s.ctx, &shards.LoadTrace{ReadDone: readDone, Yield: s.store.experts.yield()}), unit, buf)
	if err != nil {
		var f *shards.MappingFault
		if errors.As(err, &f) { // the shard was truncated while mapped: say so as compute's faults do
			err = &mappedFault{unit: unit, addr: f.Addr}
		}
		return loadResult{unit: unit, buf: buf, err: fmt.Errorf("prefetch %s: %w", unit, err)}
	}
	s.store.readBytes.Add(l.ReadBytes)
	step, layer := int(s.store.step.Load()), layerIndex(unit)
	s.store.prof.Record(profiler.DiskRead, step, layer, start, l.ReadTime, l.ReadBytes)
	s.store.prof.Record(profiler.Decode, step, layer, start.Add(l.ReadTime), l.DecodeTime, l.Unit.Bytes())
	s.store.decodeBound.add(l)
	return loadResult{unit: unit, loaded: l, buf: buf}
}

func (s *stream) transfer(total int) {
	defer s.wg.Done()
	defer close(s.ready)
	p := s.store.pools
	for i := 0; total < 0 || i < total; i++ {
		var r loadResult
		var ok bool
		select {
		case r, ok = <-s.loaded:
			if !ok {
				return
			}
		case <-s.ctx.Done():
			return
		}
		kind := unitKind(r.unit)
		var w *weightSet
		select {
		case w = <-p.sets[kind]:
		case <-s.ctx.Done():
			p.host <- r.buf
			return
		}
		if kind == kindLayer {
			n := p.inUse.Add(1)
			for {
				peak := p.peakInUse.Load()
				if n <= peak || p.peakInUse.CompareAndSwap(peak, n) {
					break
				}
			}
		}
		var err error
		// Both read the shard's bytes (alias converts the norm weights), which may be mapped: see guardMapped.
		if s.host && kind == kindLayer {
			w.buf = r.buf // handed back by releaseSet, after the layer computed
			if s.store.experts.routed(r.unit) {
				w.routed = s.store.experts.newRoutedLayer(layerIndex(r.unit))
			}
			err = s.store.guardMapped(func() error { return s.store.alias(w, r.loaded) })
		} else {
			err = s.store.guardMapped(func() error { return s.store.fill(w, r.loaded) })
			p.host <- r.buf
		}
		if err != nil {
			s.store.releaseSet(w)
			s.fail(fmt.Errorf("transfer %s: %w", r.unit, err))
			return
		}
		select {
		case s.ready <- w:
		case <-s.ctx.Done():
			s.store.releaseSet(w)
			return
		}
	}
}

// next returns the device set of the next unit of the schedule, which must be unit.
func (s *stream) next(unit string) (*weightSet, error) {
	select {
	case w, ok := <-s.ready:
		if ok {
			if w.unit != unit {
				s.store.releaseSet(w)
				return nil, fmt.Errorf("stream: got unit %s, expected %s", w.unit, unit)
			}
			return w, nil
		}
	case <-s.ctx.Done():
	}
	select {
	case err := <-s.errc:
		return nil, err
	default:
	}
	if err := s.ctx.Err(); err != nil {
		return nil, err
	}
	return nil, errors.New("stream: schedule exhausted")
}

// stop cancels the stages, waits for them and returns every buffer to its pool.
func (s *stream) stop() {
	s.cancel()
	s.wg.Wait()
	for r := range s.loaded {
		s.store.pools.host <- r.buf
	}
	for w := range s.ready {
		s.store.releaseSet(w)
	}
	s.store.experts.dropAhead()
}

const kindLayer = "layer"

func unitKind(unit string) string {
	if layerIndex(unit) >= 0 {
		return kindLayer
	}
	return unit
}

// layerIndex is N for "layer.N" and -1 for other units (the profiler's convention).
func layerIndex(unit string) int {
	var i int
	if _, err := fmt.Sscanf(unit, "layer.%d", &i); err == nil {
		return i
	}
	return -1
}

func unitPrefix(unit string) string {
	if i := layerIndex(unit); i >= 0 {
		return fmt.Sprintf("model.layers.%d.", i)
	}
	return ""
}

// decodeWatch sums, over the loads of units with encoded tensors, the time reading them and the time decoding
// them after the read ended, and warns once when the decoding reaches decodeBoundShare of the reading after
// decodeWatchLoads such loads. The next unit's read runs during that decoding (prefetch), but the decoding takes
// the cores the forward pass needs: at half the reading time, decoding and computing together come close to
// what the disk takes, and decoding, not the disk, bounds the stream (a mapped shard read from the page cache
// reads in no time, so any decoding bounds it).
type decodeWatch struct {
	mu           sync.Mutex
	loads        int
	read, decode time.Duration
	warned       bool
}

const (
	decodeWatchLoads = 8
	decodeBoundShare = 0.5
)

func (w *decodeWatch) add(l *shards.Loaded) {
	if l.Unit.DecodeSize == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.loads++
	w.read += l.ReadTime
	w.decode += l.DecodeTime
	if w.warned || w.loads < decodeWatchLoads || w.decode.Seconds() < decodeBoundShare*w.read.Seconds() {
		return
	}
	w.warned = true
	slog.Warn(fmt.Sprintf("decoding the shards' encoded tensors bounds the stream, not the disk: over %d loads, %s decoding after the reads ended against %s reading; split again with --encoding raw (shards that fit in memory stream fastest raw, from the page cache), or planes with --disk-rate auto for a model read from disk (see %s)",
		w.loads, w.decode.Round(time.Millisecond), w.read.Round(time.Millisecond), sections.Anchor(sections.SlowEncoding)),
		"encodings", encodingsOf(l.Unit))
}

// encodingsOf lists the encodings of a unit's tensors.
func encodingsOf(u shards.UnitInfo) string {
	var encs []string
	for _, t := range u.Tensors {
		if !slices.Contains(encs, string(t.Encoding)) {
			encs = append(encs, string(t.Encoding))
		}
	}
	return strings.Join(encs, ",")
}
