package kernels

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// helperSpin is how long a helper of the pool keeps looking for the next range after finishing one (yielding
// its thread to any other goroutine meanwhile, runtime.Gosched) before it parks. A model's forward pass calls
// parallelFor a few hundred times a step with microseconds of one-core work between calls; a goroutine started
// per call, or a parked helper, costs a thread wake-up per call, which on a virtual machine takes tens of
// microseconds. Measured on the 2-core VM (docs/performance-log.md, "Helper pool"): 16 sequences on the TinyLlama
// shape 86.5 → 94.5 tok/s aggregate, the Q4_1 SmolLM2 GGUF's decode 123 → 193 tok/s.
const helperSpin = 50 * time.Microsecond

// pool holds the long-lived helper goroutines that run the ranges of parallelFor besides the calling one. One
// parallelFor uses it at a time (a concurrent or nested call starts goroutines as before).
var pool helperPool

type helperPool struct {
	mu      sync.Mutex // held by the parallelFor using the helpers
	once    sync.Once
	helpers []*helper

	// The job: fn, n and step are written before job is advanced, which publishes them to the helpers with a
	// range in it (the caller waits for those before it writes the next job).
	fn      func(lo, hi int)
	n, step int
	job     atomic.Uint64 // the job's number << 8 | its number of ranges
	pending atomic.Int64  // ranges given to helpers and not yet done
	panics  firstPanic
}

type helper struct {
	parked atomic.Bool
	wake   chan struct{}
}

// run runs fn over [0, n) in ranges of step, the first on the calling goroutine and range i on helper i-1.
// It reports false, running nothing, when the pool is in use or has too few helpers.
func (p *helperPool) run(n, step int, fn func(lo, hi int)) bool {
	ranges := (n + step - 1) / step
	if !p.mu.TryLock() {
		return false
	}
	defer p.mu.Unlock()
	p.once.Do(func() {
		for range runtime.GOMAXPROCS(0) - 1 {
			h := &helper{wake: make(chan struct{}, 1)}
			p.helpers = append(p.helpers, h)
			go p.loop(len(p.helpers)-1, h)
		}
	})
	if ranges-1 > len(p.helpers) || ranges > 255 {
		return false
	}
	p.fn, p.n, p.step = fn, n, step
	p.pending.Store(int64(ranges - 1))
	p.job.Store((p.job.Load()>>8+1)<<8 | uint64(ranges))
	for _, h := range p.helpers[:ranges-1] {
		if h.parked.CompareAndSwap(true, false) {
			h.wake <- struct{}{}
		}
	}
	p.panics.run(fn, 0, min(step, n))
	for spins := 0; p.pending.Load() > 0; spins++ {
		if spins < 1<<12 {
			runtime.Gosched()
		} else {
			time.Sleep(10 * time.Microsecond)
		}
	}
	p.fn = nil
	p.panics.raise()
	return true
}

// loop is helper i's life: wait for the next job (spinning for helperSpin, then parked), run its range if it
// has one.
func (p *helperPool) loop(i int, h *helper) {
	debug.SetPanicOnFault(true)
	var seen uint64
	for {
		g := p.job.Load()
		if g == seen {
			start := time.Now()
			for spins := 0; g == seen; spins++ {
				if spins&63 == 63 && time.Since(start) > helperSpin {
					h.parked.Store(true)
					if g = p.job.Load(); g != seen && h.parked.CompareAndSwap(true, false) {
						break
					}
					<-h.wake
					start = time.Now()
				}
				runtime.Gosched()
				g = p.job.Load()
			}
		}
		seen = g
		if i+1 < int(g&0xff) { // this helper has a range in the job
			lo := (i + 1) * p.step
			p.panics.run(p.fn, lo, min(lo+p.step, p.n))
			p.pending.Add(-1)
		}
	}
}
