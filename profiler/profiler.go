// Package profiler records where a streamed generation spends its time: reading shards from disk, decoding them,
// copying them to the device, running each layer's forward pass, waiting for prefetched data, sampling and
// tokenizing. Each measurement is an Event tagged with a Category, the token step (0 = prefill, 1.. = decode steps)
// and the layer (-1 for units that are not decoder layers: embed, norm, lm_head, sampling).
//
// A nil *Profiler is valid and records nothing, at the cost of a nil check, so the engine can call it
// unconditionally. A non-nil Profiler is safe for concurrent use by the prefetch, transfer and compute goroutines.
//
// The recorded events are reported as a table (WriteTable), a Parquet trace with one row per event
// (WriteParquet, schema in docs/profiling.md) and an SVG timeline with one lane per category (WriteTimelineSVG).
// Subscribe streams them live as they are recorded, dropping rather than blocking when a subscriber is slow;
// NewLive is a profiler that only streams (the server's live pipeline view).
package profiler

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Category names what a span of time was spent on.
type Category string

// The categories the engine records. Order matters only for display: it follows the pipeline.
const (
	Tokenize     Category = "tokenize"      // text → ids, and ids → text
	DiskRead     Category = "disk_read"     // reading shard bytes from storage
	Decode       Category = "decode"        // checksum, decompression, dtype conversion of a loaded shard
	H2D          Category = "h2d"           // host → device copy of weights or activations
	PrefetchWait Category = "prefetch_wait" // compute waiting for the next unit's data
	ExpertRead   Category = "expert_read"   // reading one routed expert of a mixture-of-experts layer
	ExpertWait   Category = "expert_wait"   // compute waiting for a routed expert's read
	Forward      Category = "forward"       // one unit's forward pass (per layer, or embed/norm/lm_head with layer -1)
	Sample       Category = "sample"        // logits → next token
)

// Categories lists the known categories in pipeline order.
func Categories() []Category {
	return []Category{Tokenize, DiskRead, ExpertRead, Decode, H2D, PrefetchWait, ExpertWait, Forward, Sample}
}

// isIO reports whether bytes per second is meaningful for c.
func isIO(c Category) bool { return c == DiskRead || c == ExpertRead || c == Decode || c == H2D }

// Event is one measured span.
type Event struct {
	Step     int           // 0 = prefill, 1.. = decode steps
	Layer    int           // decoder layer index, or -1 for embed/norm/lm_head/sampling
	Category Category      // what the time was spent on
	Start    time.Duration // start relative to the run start (Profiler.Start); negative if before it
	Dur      time.Duration // length of the span
	Bytes    int64         // bytes moved or processed, 0 when not applicable
}

// End is the event's end relative to the run start.
func (e Event) End() time.Duration { return e.Start + e.Dur }

// Profiler collects events. Create one with New; the zero value is not usable, a nil pointer is (as a no-op).
type Profiler struct {
	mu      sync.Mutex
	origin  time.Time // set by New; events are stored relative to it, using the monotonic clock
	started time.Duration
	stopped time.Duration
	hasStop bool // Stop was called
	events  []Event

	live  bool            // NewLive: keep no events, only publish them
	subs  []*Subscription // Subscribe
	nsubs atomic.Int32    // len(subs), read without the lock
}

// New returns an empty profiler whose run window starts now (call Start to move it).
func New() *Profiler {
	return &Profiler{origin: time.Now(), events: make([]Event, 0, 1024)}
}

// Enabled reports whether p records anything (p is not nil). Use it to skip work done only for the profile.
func (p *Profiler) Enabled() bool { return p != nil }

// Start marks the beginning of the run's wall-clock window; event times are reported relative to it. Calling it
// again moves the window start (bench calls it before the run it profiles).
func (p *Profiler) Start() {
	if p == nil {
		return
	}
	now := time.Since(p.origin)
	p.mu.Lock()
	p.started, p.hasStop = now, false
	p.mu.Unlock()
}

// Reset drops the events recorded so far and starts a new run window now, so one profiler passed to an engine
// at Open can profile only the last of several runs (bench does this).
func (p *Profiler) Reset() {
	if p == nil {
		return
	}
	now := time.Since(p.origin)
	p.mu.Lock()
	p.events = p.events[:0]
	p.started, p.hasStop = now, false
	p.mu.Unlock()
}

// Stop marks the end of the run's wall-clock window. Without Stop, the window ends at the last event's end.
func (p *Profiler) Stop() {
	if p == nil {
		return
	}
	now := time.Since(p.origin)
	p.mu.Lock()
	p.stopped, p.hasStop = now, true
	p.mu.Unlock()
}

// Span is a measurement in progress, returned by Begin. The zero Span (from a nil Profiler) does nothing on End.
type Span struct {
	p     *Profiler
	c     Category
	step  int
	layer int
	start time.Time
}

// Begin starts measuring a span of category c for the given step and layer (-1 for non-layer units).
func (p *Profiler) Begin(c Category, step, layer int) Span {
	if p == nil {
		return Span{}
	}
	return Span{p: p, c: c, step: step, layer: layer, start: time.Now()}
}

// End finishes the span, recording bytes (0 when not applicable).
func (s Span) End(bytes int64) {
	if s.p != nil { // kept small so the nil case inlines to a compare
		s.p.end(&s, bytes)
	}
}

func (p *Profiler) end(s *Span, bytes int64) {
	p.add(s.c, s.step, s.layer, s.start, time.Since(s.start), bytes)
}

// Record adds an event measured elsewhere (e.g. shards.Loaded.ReadTime): it started at start and lasted dur.
// A zero start means the span ended just now.
func (p *Profiler) Record(c Category, step, layer int, start time.Time, dur time.Duration, bytes int64) {
	if p == nil {
		return
	}
	if start.IsZero() {
		start = time.Now().Add(-dur)
	}
	p.add(c, step, layer, start, dur, bytes)
}

func (p *Profiler) add(c Category, step, layer int, start time.Time, dur time.Duration, bytes int64) {
	if p.quiet() {
		return
	}
	ev := Event{Step: step, Layer: layer, Category: c, Start: p.since(start), Dur: dur, Bytes: bytes}
	p.mu.Lock()
	if !p.live {
		p.events = append(p.events, ev)
	}
	if len(p.subs) > 0 {
		ev.Start -= p.started
		p.publish(ev)
	}
	p.mu.Unlock()
}

// Events returns a copy of the recorded events, sorted by start time, with Start relative to the run start.
func (p *Profiler) Events() []Event {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	evs := slices.Clone(p.events)
	started := p.started
	p.mu.Unlock()
	for i := range evs {
		evs[i].Start -= started
	}
	sortEvents(evs)
	return evs
}

// window returns the run's wall-clock length: Stop − Start, or up to the last event's end when Stop was not
// called.
func (p *Profiler) window() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hasStop {
		return p.stopped - p.started
	}
	var end time.Duration
	for _, e := range p.events {
		end = max(end, e.Start+e.Dur-p.started)
	}
	return end
}

func sortEvents(evs []Event) {
	slices.SortStableFunc(evs, func(a, b Event) int {
		if a.Start != b.Start {
			if a.Start < b.Start {
				return -1
			}
			return 1
		}
		return 0
	})
}
