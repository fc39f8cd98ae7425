// Package kernels holds the host math of the engine's compute stage on plain slices: dot products, the
// row-blocked matrix product of Linear, axpy, and ParallelFor, which spreads a loop over the cores. Assembly
// kernels (AVX2/FMA on amd64) are chosen at run time where the CPU has them; every one has a portable Go
// twin that other architectures and the tests use.
//
// Weights are read in their stored dtype ([]float32 or []bfloat16.BFloat16, bf16 widened exactly in
// registers) and every kernel sums in float32. Each output element is summed exactly as the one-row dot
// product sums it, whatever the number of rows computed together, so a sequence gives bit-identical results
// alone and in a batch.
package kernels

import (
	"math"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
)

// Weight is the element type of a weight matrix the kernels read in place.
type Weight interface {
	float32 | bfloat16.BFloat16
}

// Linear sets y[r·out+o] = x[r·in:(r+1)·in] · w[o·in:(o+1)·in] (+ bias[o] when bias is not nil) for every input
// row r of x and every output o, where w is a [out, in] matrix (the Hugging Face layout) and out = len(w)/in.
//
// Output-major: each weight row is read once from memory (then from L1) for a block of input rows, three at a
// time, so a batch of sequences costs one pass over the weights. The input rows go in blocks that stay in the
// core's L2 cache while the weight rows stream past them: a long prompt's activations (4 MB for 512 TinyLlama
// positions) would otherwise be re-read from L3 for every weight row. The outputs are split over the cores.
func Linear[W Weight](y, x []float32, w []W, bias []float32, in int) {
	rows, out := len(x)/in, len(w)/in
	block := linearRowBlock(in)
	ParallelFor(out, func(lo, hi int) {
		switch wt := any(w).(type) {
		case []float32:
			linearRows(y, x, wt, rows, in, out, lo, hi, block, DotF32, dotF32x3)
		case []bfloat16.BFloat16:
			linearRows(y, x, wt, rows, in, out, lo, hi, block, DotBF16, dotBF16x3)
		}
		if bias != nil {
			for r := range rows {
				yr := y[r*out : (r+1)*out]
				for o := lo; o < hi; o++ {
					yr[o] += bias[o]
				}
			}
		}
	})
}

// linearBlockBytes is the size of a block of input rows in Linear: small enough to stay in L2 with room for
// the weight rows streaming through. BenchmarkLinear bf16 [2048×2048], 512 rows: unblocked 25.5 GFLOP/s;
// blocks of 256 KiB 48.5, 512 KiB 56.0, 1 MiB 44.2 (the 2-core VM's cores have 2 MiB of L2).
var linearBlockBytes = 512 << 10

// linearRowBlock is the number of input rows of length in per block: a multiple of 3 (the three-row kernels),
// at least 3.
func linearRowBlock(in int) int {
	return max(3, linearBlockBytes/(4*in)/3*3)
}

// linearRows computes y[r, o] = x[r] · w[o] for every row r and the outputs o in [lo, hi), blocks of block input
// rows at a time: per weight row, one call of dot3 for the block's rows three at a time, and dot1 for the rest
// (which sum each row identically).
func linearRows[W Weight](y, x []float32, w []W, rows, in, out, lo, hi, block int,
	dot1 func(a []float32, b []W) float32, dot3 func(x []float32, b []W, y []float32, stride, triples int)) {
	for rb := 0; rb < rows; rb += block {
		re := min(rb+block, rows)
		triples := (re - rb) / 3
		for o := lo; o < hi; o++ {
			wr := w[o*in : (o+1)*in]
			dot3(x[rb*in:re*in], wr, y[rb*out+o:], out, triples)
			for r := rb + 3*triples; r < re; r++ {
				y[r*out+o] = dot1(x[r*in:(r+1)*in], wr)
			}
		}
	}
}

// dotRowsGo sets y[r·stride] = dot(x[r·n:(r+1)·n], b) for r < rows (n = len(b)): the portable three-row kernels.
func dotRowsGo[W Weight](x []float32, b []W, y []float32, stride, rows int, dot func([]float32, []W) float32) {
	n := len(b)
	for r := range rows {
		y[r*stride] = dot(x[r*n:(r+1)*n], b)
	}
}

// ParallelFor splits [0, n) into one contiguous range per CPU and runs fn on each concurrently (in the calling
// goroutine alone when n is small). A panic in a worker, a fault reading a mapped shard included (workers turn
// faults into panics, debug.SetPanicOnFault), is raised again in the calling goroutine once every worker is
// done, where the engine can recover it.
func ParallelFor(n int, fn func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), max(n/64, 1))
	if workers <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first any
	step := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += step {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
			defer func() {
				if r := recover(); r != nil {
					mu.Lock()
					if first == nil {
						first = r
					}
					mu.Unlock()
				}
			}()
			fn(lo, hi)
		}(lo, min(lo+step, n))
	}
	wg.Wait()
	if first != nil {
		panic(first)
	}
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

// SiLU sets y[i] = x[i]·sigmoid(x[i]) (len(y) ≥ len(x)). An exp per element (about 15 ns) is worth both cores
// from a few thousand elements on.
func SiLU(y, x []float32) {
	n := len(x)
	ParallelFor((n+255)/256, func(lo, hi int) { // chunks of 256 elements
		lo, hi = lo*256, min(hi*256, n)
		for i, v := range x[lo:hi] {
			y[lo+i] = v / (1 + float32(math.Exp(-float64(v))))
		}
	})
}
