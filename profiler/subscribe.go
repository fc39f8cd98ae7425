package profiler

import (
	"sync/atomic"
	"time"
)

// Subscription receives a profiler's events as they are recorded (Profiler.Subscribe).
type Subscription struct {
	// C receives the events, Start relative to the run start. It is closed by Close.
	C <-chan Event

	p       *Profiler
	ch      chan Event
	dropped atomic.Int64
}

// Subscribe returns a subscription to every event recorded from now on, for a live view of the pipeline. Its
// channel holds up to buffer events: when the subscriber falls behind, further events are dropped (counted by
// Dropped) rather than making the engine wait. Close ends it. Subscribing to a nil Profiler gives a
// subscription that never receives anything.
func (p *Profiler) Subscribe(buffer int) *Subscription {
	ch := make(chan Event, max(buffer, 1))
	s := &Subscription{C: ch, p: p, ch: ch}
	if p == nil {
		return s
	}
	p.mu.Lock()
	p.subs = append(p.subs, s)
	p.nsubs.Store(int32(len(p.subs)))
	p.mu.Unlock()
	return s
}

// Dropped is the number of events this subscription missed because its channel was full.
func (s *Subscription) Dropped() int64 { return s.dropped.Load() }

// Close ends the subscription and closes C. Calling it again does nothing.
func (s *Subscription) Close() {
	if s.p == nil {
		return
	}
	p := s.p
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, t := range p.subs {
		if t == s {
			p.subs = append(p.subs[:i], p.subs[i+1:]...)
			p.nsubs.Store(int32(len(p.subs)))
			close(s.ch)
			return
		}
	}
}

// publish hands ev to every subscriber without blocking; the caller holds p.mu (Close closes channels under
// it, so no send can meet a closed channel).
func (p *Profiler) publish(ev Event) {
	for _, s := range p.subs {
		select {
		case s.ch <- ev:
		default:
			s.dropped.Add(1)
		}
	}
}

// NewLive returns a profiler that keeps no events: what it records goes only to its subscribers (Subscribe),
// and while it has none, recording costs a clock reading and an atomic load. A server creates one to show its
// pipeline live without the memory a kept trace grows to.
func NewLive() *Profiler {
	p := New()
	p.live = true
	return p
}

// quiet reports whether an event would go nowhere: a live profiler without subscribers.
func (p *Profiler) quiet() bool { return p.live && p.nsubs.Load() == 0 }

// since is the time elapsed from the profiler's origin (events' clock).
func (p *Profiler) since(t time.Time) time.Duration { return t.Sub(p.origin) }
