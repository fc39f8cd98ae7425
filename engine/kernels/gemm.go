package kernels

import (
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"

	"github.com/layerstream/layerstream/internal/grow"
)

// gemmGroup is the number of weight rows (outputs) a matrix-product tile takes at once.
const gemmGroup = 8

// linearWork is the number of multiply-adds from which Linear spreads the outputs over every core.
const linearWork = 1 << 16

// bf16Bits rounds v to bf16 (nearest even), as VCVTNEPS2BF16 does: NaN stays a (quiet) NaN, a denormal
// becomes a zero of its sign.
func bf16Bits(v float32) uint16 {
	b := math.Float32bits(v)
	switch {
	case b&0x7fffffff > 0x7f800000:
		return uint16(b>>16) | 0x40
	case b&0x7f800000 == 0:
		return uint16(b>>16) & 0x8000
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// roundBF16 sets dst[i] to src[i] rounded to bf16 and widened back to float32.
func roundBF16(dst, src []float32) {
	dst = dst[:len(src)]
	for i, v := range src {
		dst[i] = math.Float32frombits(uint32(bf16Bits(v)) << 16)
	}
}

// Scratch slices, pooled by use (a pool's slices have similar sizes): the rounded input of the three-row
// kernels, the packed inputs of the tiles and their padded last group of weight rows.
var (
	roundScratch       = sync.Pool{New: func() any { return new([]float32) }}
	packXF32, packWF32 = sync.Pool{New: func() any { return new([]float32) }}, sync.Pool{New: func() any { return new([]float32) }}
	packXBF, packWBF   = sync.Pool{New: func() any { return new([]uint16) }}, sync.Pool{New: func() any { return new([]uint16) }}
)

// scratch returns a pooled slice of n elements (contents undefined) and the pointer to put back.
func scratch[T uint16 | float32](pool *sync.Pool, n int) (*[]T, []T) {
	p := pool.Get().(*[]T)
	*p = grow.Slice(*p, n)
	return p, *p
}

// Linear sets y[r·out+o] = x[r·in:(r+1)·in] · w[o·in:(o+1)·in] (+ bias[o] when bias is not nil) for every input
// row r of x and every output o, where w is a [out, in] matrix (the Hugging Face layout) and out = len(w)/in.
// The products are exact (bf16 weights widened to float32) and summed in float32.
//
// Each output is summed in an order that depends only on in, never on the number of input rows or on which
// rows are computed together: a sequence gives bit-identical results alone and in a batch. The outputs are
// split over the cores.
func Linear[W Weight](y, x []float32, w []W, bias []float32, in int) {
	rows, out := len(x)/in, len(w)/in
	workers := linearWorkers(rows, in, out)
	switch wt := any(w).(type) {
	case []float32:
		if useAVX512 {
			gemmF32(y, x, wt, rows, in, out, workers)
		} else {
			linearThreeRows(y, x, wt, rows, in, out, workers, DotF32, dotF32x3)
		}
	case []bfloat16.BFloat16:
		if useAVX512 {
			gemmF32BF16(y, x, wt, rows, in, out, workers)
		} else {
			linearThreeRows(y, x, wt, rows, in, out, workers, DotBF16, dotBF16x3)
		}
	}
	addBias(y, bias, rows, out)
}

// LinearBF16 is Linear of bf16 weights with the input rounded to bf16 (to nearest even) first, as llama.cpp
// and PyTorch's bf16 matrix products do: products of two bf16 values (exact), summed in float32. Where the CPU
// has AVX512_BF16 (NativeBF16) it runs on VDPBF16PS, two products per float32 lane and instruction: twice
// Linear's rate, with the rounding of the input as the price. Elsewhere the rounded input feeds Linear's
// kernels. The same invariant holds: a row's outputs do not depend on the rows beside it.
func LinearBF16(y, x []float32, w []bfloat16.BFloat16, bias []float32, in int) {
	rows, out := len(x)/in, len(w)/in
	workers := linearWorkers(rows, in, out)
	if useAVX512BF16 {
		gemmBF16(y, x, w, rows, in, out, workers)
	} else {
		p, xr := scratch[float32](&roundScratch, len(x))
		roundBF16(xr, x)
		Linear(y, xr, w, nil, in)
		roundScratch.Put(p)
	}
	addBias(y, bias, rows, out)
}

// NativeBF16 reports whether LinearBF16 runs on the CPU's bf16 dot-product instruction (AVX512_BF16).
func NativeBF16() bool { return useAVX512BF16 }

// linearWorkers is 1 for a product too small to be worth a second core, else 0 (all cores).
func linearWorkers(rows, in, out int) int {
	if rows*in*out < linearWork {
		return 1
	}
	return 0
}

func addBias(y, bias []float32, rows, out int) {
	if bias == nil {
		return
	}
	for r := range rows {
		yr := y[r*out : (r+1)*out]
		for o, b := range bias[:out] {
			yr[o] += b
		}
	}
}

// linearThreeRows is Linear on the three-row dot-product kernels (no AVX-512): the input rows go in blocks
// that stay in L2, each weight row read once per block.
func linearThreeRows[W Weight](y, x []float32, w []W, rows, in, out, workers int,
	dot1 func(a []float32, b []W) float32, dot3 func(x []float32, b []W, y []float32, stride, triples int)) {
	block := linearRowBlock(in)
	parallelFor(out, workers, func(lo, hi int) {
		linearRows(y, x, w, rows, in, out, lo, hi, block, dot1, dot3)
	})
}

// linearBlockBytes is the size of a block of input rows in the three-row kernels (no AVX-512): small enough
// to stay in L2 with room for the weight rows streaming through. BenchmarkLinear bf16 [2048×2048], 512 rows:
// unblocked 25.5 GFLOP/s; blocks of 256 KiB 48.5, 512 KiB 56.0, 1 MiB 44.2 (the 2-core VM's cores have 1 MiB
// of L2 each).
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

// tileKernel is a matrix-product tile kernel of gemm_amd64.s (see there for the arguments): input elements X,
// weight elements W (float32, or bf16 bits). rowsKernel is its twin for one tile of input rows against any
// number of weight rows read one after another (the same sums).
type (
	tileKernel[X, W uint16 | float32] func(x *X, xs, xc, xt, rows int, w *W, ws, wc, chunks int, tail uint64, y *float32, ldy int)
	rowsKernel[X, W uint16 | float32] func(x *X, xs, xc, rows int, w *W, ws, wc, n, chunks int, tail uint64, y *float32, ldy int)
)

// gemmTileRows is the number of input rows of a tile; gemmBlockBytes bounds the packed input rows that pass a
// group of weight rows together (a block stays in L2 while the weight rows are read once per block).
// Measured per core on the 2-core EPYC (CPU time, bf16 [2048×2048]): 128 rows (512 KiB) 210 GFLOP/s, 512 rows
// in one block 162.
const gemmTileRows = 3

var gemmBlockBytes = 512 << 10

// gemmTiles computes y [rows, out] = x [rows, in] · w [out, in]ᵀ with a tile kernel, e elements per chunk (with
// the rows kernel when one tile holds every input row: decode steps). The input rows are first packed by put
// (which converts them to X), tile by tile, chunk by chunk, so that a tile reads one stream; the weight rows are read in place (packing
// them measured slower: the copy costs more than the L1 conflicts of rows 4 KiB apart). The groups of
// gemmGroup outputs are split over the workers. The last group, when out is not a multiple of gemmGroup, runs
// on a zero-padded copy of its weight rows into a scratch output: padding adds zeros to no sum, so every
// output is the same however it was reached.
func gemmTiles[X, W uint16 | float32](y, x []float32, w []W, rows, in, out, workers, e int, kernel tileKernel[X, W],
	rowsKernel rowsKernel[X, W], put func(dst []X, step int, src []float32, chunks int)) {
	size, wsize := int(unsafe.Sizeof(X(0))), int(unsafe.Sizeof(W(0)))
	chunkBytes := e * size // of the packed input
	full := in / e
	chunks := (in + e - 1) / e // the last one maybe partial
	tail := uint64(1)<<(in%e) - 1
	tiles := (rows + gemmTileRows - 1) / gemmTileRows
	tileLen := gemmTileRows * chunks * e // elements of a packed tile

	xpool, wpool := packPool[X](false), packPool[W](true)
	pp, xp := scratch[X](xpool, tiles*tileLen)
	defer xpool.Put(pp)
	parallelFor(tiles, workers, func(lo, hi int) {
		packTiles(xp[lo*tileLen:], min(hi*gemmTileRows, rows)-lo*gemmTileRows, in, e, func(r int) []float32 {
			r += lo * gemmTileRows
			return x[r*in : (r+1)*in]
		}, put)
	})

	groups := (out + gemmGroup - 1) / gemmGroup
	xs, xc, xt := chunkBytes, gemmTileRows*chunkBytes, tileLen*size
	// The groups go to the workers in chunks (parallelChunks): a sixteenth of a worker's share for a decode
	// step or a small batch, a quarter for larger tiles, which read the input rows again for each chunk.
	nw := workers
	if nw <= 0 {
		nw = runtime.GOMAXPROCS(0)
	}
	chunk := max(1, groups/(16*nw))
	if tiles == 1 {
		parallelChunks(groups, chunk, workers, func(lo, hi int) {
			o0, o1 := lo*gemmGroup, min(hi*gemmGroup, out)
			rowsKernel(&xp[0], xs, xc, rows, &w[o0*in], in*wsize, e*wsize, o1-o0, full, tail, &y[o0], out*4)
		})
		return
	}
	blockTiles := max(1, gemmBlockBytes/(tileLen*size))
	perWorker := 4
	if rows <= 32 {
		perWorker = 16 // a batch's decode step: its few input rows are cheap to read again, the finer split evens the cores
	}
	parallelChunks(groups, max(1, groups/(perWorker*nw)), workers, func(lo, hi int) {
		var ptail []W // the partial last group's weight rows, zero-padded, and its outputs
		var ytail []float32
		if hi*gemmGroup > out {
			p, wp := scratch[W](wpool, gemmGroup*in)
			defer wpool.Put(p)
			clear(wp)
			o0 := (hi - 1) * gemmGroup
			copy(wp, w[o0*in:])
			ptail, ytail = wp, make([]float32, rows*gemmGroup)
		}
		for t0 := 0; t0 < tiles; t0 += blockTiles {
			n := min(blockTiles*gemmTileRows, rows-t0*gemmTileRows)
			xb := &xp[t0*tileLen]
			r0 := t0 * gemmTileRows
			for g := lo; g < hi; g++ {
				o0 := g * gemmGroup
				if o0+gemmGroup > out {
					kernel(xb, xs, xc, xt, n, &ptail[0], in*wsize, e*wsize, full, tail, &ytail[r0*gemmGroup], gemmGroup*4)
					continue
				}
				kernel(xb, xs, xc, xt, n, &w[o0*in], in*wsize, e*wsize, full, tail, &y[r0*out+o0], out*4)
			}
		}
		if ptail != nil {
			o0 := (hi - 1) * gemmGroup
			for r := range rows {
				copy(y[r*out+o0:(r+1)*out], ytail[r*gemmGroup:])
			}
		}
	})
}

// packTiles packs rows input rows of in elements (row(r) gives row r) for the tile kernels into xp, e elements
// per chunk: tiles of gemmTileRows rows, chunk by chunk ([tile][chunk][row][e]), the last chunk of each row
// zero-padded.
func packTiles[X uint16 | float32](xp []X, rows, in, e int, row func(r int) []float32, put func(dst []X, step int, src []float32, chunks int)) {
	full, chunks := in/e, (in+e-1)/e
	tileLen := gemmTileRows * chunks * e
	for r := range rows {
		t, i := r/gemmTileRows, r%gemmTileRows
		dst := xp[t*tileLen+i*e:]
		src := row(r)
		put(dst, gemmTileRows*e, src, full)
		if full < chunks {
			last := dst[full*gemmTileRows*e:][:e]
			clear(last)
			put1(last, src[full*e:])
		}
	}
}

// putF32 copies chunks of 16 input elements, each step elements after the last.
func putF32(dst []float32, step int, src []float32, chunks int) {
	for c := range chunks {
		copy(dst[c*step:][:16], src[c*16:])
	}
}

// put1 converts src (at most one chunk) into dst: float32 copied, bf16 rounded.
func put1[X uint16 | float32](dst []X, src []float32) {
	switch d := any(dst).(type) {
	case []float32:
		copy(d, src)
	case []uint16:
		for i, v := range src {
			d[i] = bf16Bits(v)
		}
	}
}

// packPool returns the pool of packed inputs or padded weights of T.
func packPool[T uint16 | float32](weights bool) *sync.Pool {
	_, bf := any(T(0)).(uint16)
	switch {
	case bf && weights:
		return &packWBF
	case bf:
		return &packXBF
	case weights:
		return &packWF32
	}
	return &packXF32
}
