package profiler

import (
	"testing"
	"time"
)

// TestSubscribe: a subscriber receives the events recorded while subscribed, a full channel drops events
// instead of blocking, a live profiler keeps nothing, and Close closes the channel.
func TestSubscribe(t *testing.T) {
	for _, live := range []bool{false, true} {
		p := New()
		if live {
			p = NewLive()
		}
		p.Record(Forward, 0, 0, time.Time{}, time.Millisecond, 0) // before subscribing: not received
		s := p.Subscribe(2)
		p.Begin(DiskRead, 1, 3).End(100)
		p.Record(Forward, 1, 3, time.Time{}, time.Millisecond, 0)
		p.Record(Sample, 1, -1, time.Time{}, time.Millisecond, 0) // the channel is full: dropped
		if ev := <-s.C; ev.Category != DiskRead || ev.Step != 1 || ev.Layer != 3 || ev.Bytes != 100 {
			t.Errorf("live %v: first event %+v", live, ev)
		}
		if ev := <-s.C; ev.Category != Forward {
			t.Errorf("live %v: second event %+v", live, ev)
		}
		if s.Dropped() != 1 {
			t.Errorf("live %v: dropped %d, want 1", live, s.Dropped())
		}
		if n := len(p.Events()); (live && n != 0) || (!live && n != 4) {
			t.Errorf("live %v: %d events kept", live, n)
		}
		s.Close()
		s.Close()
		if _, ok := <-s.C; ok {
			t.Errorf("live %v: channel not closed", live)
		}
		p.Record(Forward, 2, 0, time.Time{}, time.Millisecond, 0) // no subscriber: nothing to block on
	}
	var nilp *Profiler
	s := nilp.Subscribe(1)
	nilp.Record(Forward, 0, 0, time.Time{}, 0, 0)
	s.Close()
	select {
	case <-s.C:
		t.Error("a nil profiler's subscription received an event")
	default:
	}
}
