// Package kernels holds the host math of the engine's compute stage on plain slices: the matrix product of
// Linear (register tiles, see gemm.go), dot products, axpy, and ParallelFor, which spreads a loop over the
// cores. Assembly kernels (AVX-512 and AVX512_BF16, else AVX2/FMA, on amd64) are chosen at run time where the
// CPU has them; every one has a portable Go twin that other architectures and the tests use.
//
// Weights are read in their stored dtype ([]float32 or []bfloat16.BFloat16) and every kernel sums in float32.
// Each output element is summed in an order fixed by the kernel and the row length alone, whatever the number
// of rows computed together, so a sequence gives bit-identical results alone and in a batch.
package kernels

import (
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
)

// Weight is the element type of a weight matrix the kernels read in place.
type Weight interface {
	float32 | bfloat16.BFloat16
}

// dotRowsGo sets y[r·stride] = dot(x[r·n:(r+1)·n], b) for r < rows (n = len(b)): the portable three-row kernels.
func dotRowsGo[W Weight](x []float32, b []W, y []float32, stride, rows int, dot func([]float32, []W) float32) {
	n := len(b)
	for r := range rows {
		y[r*stride] = dot(x[r*n:(r+1)*n], b)
	}
}

// ParallelFor splits [0, n) into one contiguous range per CPU and runs fn on each concurrently, the first on the
// calling goroutine (all of them there when n is small), the others on the pool's long-lived helpers (pool.go),
// or on goroutines started for the call while another call holds the pool. A panic in any range, a fault reading a mapped shard
// included (workers turn faults into panics, debug.SetPanicOnFault, as the engine's caller does), is raised
// again in the calling goroutine once every range is done, where the engine can recover it.
func ParallelFor(n int, fn func(lo, hi int)) {
	parallelFor(n, min(runtime.GOMAXPROCS(0), max(n/64, 1)), fn)
}

// parallelFor is ParallelFor with a number of workers (≤ 0: one per CPU), each taking one contiguous range.
func parallelFor(n, workers int, fn func(lo, hi int)) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, n)
	if workers <= 1 {
		fn(0, n)
		return
	}
	step := (n + workers - 1) / workers
	if pool.run(n, step, fn) {
		return
	}
	var wg sync.WaitGroup
	var panics firstPanic
	for lo := step; lo < n; lo += step {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
			panics.run(fn, lo, hi)
		}(lo, min(lo+step, n))
	}
	panics.run(fn, 0, min(step, n)) // the first range on the calling goroutine: one goroutine fewer to start and wake
	wg.Wait()
	panics.raise()
}

// firstPanic keeps the first panic of the ranges of a parallelFor, to raise again once every range is done.
type firstPanic struct {
	mu    sync.Mutex
	first any
}

// run runs fn(lo, hi), keeping its panic if it is the first.
func (p *firstPanic) run(fn func(lo, hi int), lo, hi int) {
	defer func() {
		if r := recover(); r != nil {
			p.mu.Lock()
			if p.first == nil {
				p.first = r
			}
			p.mu.Unlock()
		}
	}()
	fn(lo, hi)
}

// raise panics again with the kept panic, if any, and forgets it.
func (p *firstPanic) raise() {
	if r := p.first; r != nil {
		p.first = nil
		panic(r)
	}
}

// parallelChunks runs fn over [0, n) in ranges of chunk, which the workers (≤ 0: one per CPU) take one after
// another as they finish theirs: a core slowed by other work (a busy machine, the Go runtime) ends up taking
// fewer, where contiguous halves would leave the other core waiting. Panics are handled as ParallelFor's.
func parallelChunks(n, chunk, workers int, fn func(lo, hi int)) {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	chunks := (n + chunk - 1) / chunk
	workers = min(workers, chunks)
	var next atomic.Int64
	parallelFor(workers, workers, func(int, int) {
		for k := int(next.Add(1) - 1); k < chunks; k = int(next.Add(1) - 1) {
			fn(k*chunk, min((k+1)*chunk, n))
		}
	})
}

// axpyF32Go adds a·x to y (len(x) ≥ len(y)): the portable kernel (AxpyF32 picks an assembly one where the CPU
// has it).
func axpyF32Go(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i, v := range x {
		y[i] += a * v
	}
}

// dotF32Go is the dot product of two equally long float32 vectors, with four independent accumulators: the
// portable kernel (DotF32 picks an assembly one where the CPU has it).
func dotF32Go(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// dotBF16Go is the dot product of a float32 vector with a bfloat16 one, widened exactly on the fly: the
// portable kernel (DotBF16 picks an assembly one where the CPU has it).
func dotBF16Go(a []float32, b []bfloat16.BFloat16) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * math.Float32frombits(uint32(b[i])<<16)
		s1 += a[i+1] * math.Float32frombits(uint32(b[i+1])<<16)
		s2 += a[i+2] * math.Float32frombits(uint32(b[i+2])<<16)
		s3 += a[i+3] * math.Float32frombits(uint32(b[i+3])<<16)
	}
	for ; i < len(a); i++ {
		s0 += a[i] * math.Float32frombits(uint32(b[i])<<16)
	}
	return (s0 + s1) + (s2 + s3)
}

// SiLU sets y[i] = x[i]·sigmoid(x[i]) (len(y) ≥ len(x)), with a vectorized exp where the CPU has AVX-512 (a
// few ulps from the float64 exp of the portable loop), on every core from a few thousand elements on.
func SiLU(y, x []float32) {
	n := len(x)
	ParallelFor((n+255)/256, func(lo, hi int) { // chunks of 256 elements
		lo, hi = lo*256, min(hi*256, n)
		if useAVX512 {
			if hi > lo {
				siluAVX512(&y[lo], &x[lo], hi-lo)
			}
			return
		}
		siluGo(y[lo:hi], x[lo:hi])
	})
}

// siluGo is SiLU's portable loop.
func siluGo(y, x []float32) {
	for i, v := range x {
		y[i] = v / (1 + float32(math.Exp(-float64(v))))
	}
}
