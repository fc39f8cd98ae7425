package engine

import (
	"math"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
)

// hostOps implements Ops directly on host arrays with hand-written kernels. Decode steps (one new position)
// use it: there the time goes into matrix-vector products over the weights, which a plain Go loop over the
// shared device buffers runs several times faster than simplego's DotGeneral, and no graph is executed at all.
//
// Activations are *hostArray; weights are the *deviceTensor buffers the transfer stage filled (f32 or bf16,
// widened on the fly). The cache and mask are those of the graph path, laid out the same way.
type hostOps struct {
	cos, sin     []float32 // [B, T, headDim]
	mask         []float32 // [B, T, S+T], additive
	pastK, pastV []float32 // [B, kvHeads, S, headDim]
	capacity     int       // S
	// rows maps the activations' batch index to the cache's (the sequences still decoding); nil is the identity.
	rows []int
	// arena, when set, supplies the arrays the ops return (else they are fresh).
	arena *hostArena
}

// hostArray is a float32 array on the host.
type hostArray struct {
	data []float32
	dims []int
}

func newHostArray(dims ...int) *hostArray {
	return &hostArray{data: make([]float32, elems(dims)), dims: dims}
}

// elems is the number of elements of an array of the given dims.
func elems(dims []int) int {
	n := 1
	for _, d := range dims {
		n *= d
	}
	return n
}

func arr(v Value) *hostArray { return v.(*hostArray) }

// hostArena recycles activations from one layer to the next: every decoder layer computes arrays of the same
// sizes, so a layer reuses those of the layer before it instead of asking the Go heap for fresh memory. Without
// it a 512-token TinyLlama prefill allocated about 36 MB per layer, and the garbage piled up to 600 MB before a
// collection (the Go heap grows to twice its live size, and the engine's buffers are live).
type hostArena struct {
	used []*hostArray         // handed out since the last recycle
	free map[int][]*hostArray // reusable, by length
}

// array returns a zeroed array of the given dims, reused when one of its length is free.
func (a *hostArena) array(dims ...int) *hostArray {
	if a == nil {
		return newHostArray(dims...)
	}
	n := elems(dims)
	var y *hostArray
	if l := a.free[n]; len(l) > 0 {
		y, a.free[n] = l[len(l)-1], l[:len(l)-1]
		clear(y.data)
		y.dims = dims
	} else {
		y = newHostArray(dims...)
	}
	a.used = append(a.used, y)
	return y
}

// recycle makes every array handed out since the last recycle reusable, except keep (still in use: it is
// recycled the next time).
func (a *hostArena) recycle(keep *hostArray) {
	if a.free == nil {
		a.free = map[int][]*hostArray{}
	}
	used := a.used
	a.used = nil
	for _, y := range used {
		if y == keep {
			a.used = append(a.used, y)
			continue
		}
		a.free[len(y.data)] = append(a.free[len(y.data)], y)
	}
}

// weightData returns a weight's elements: []float32 or []bfloat16.BFloat16.
func weightData(v Value) any { return v.(*deviceTensor).flat }

func (o hostOps) Linear(x, w, b Value) Value {
	xa := arr(x)
	in := xa.dims[len(xa.dims)-1]
	rows := len(xa.data) / in
	var out int
	switch f := weightData(w).(type) {
	case []float32:
		out = len(f) / in
	case []bfloat16.BFloat16:
		out = len(f) / in
	}
	dims := append(append([]int(nil), xa.dims[:len(xa.dims)-1]...), out)
	y := o.arena.array(dims...)
	var bias []float32
	if b != nil {
		bias = weightData(b).([]float32)
	}
	wd := weightData(w)
	// Output-major: each weight row is read once from memory (then from L1) for a block of input rows, three
	// at a time, so a batch of sequences costs one pass over the weights. The input rows go in blocks that stay
	// in the core's L2 cache while the weight rows stream past them: a long prompt's activations (4 MB for 512
	// TinyLlama positions) would otherwise be re-read from L3 for every weight row.
	block := linearRowBlock(in)
	parallelFor(out, func(lo, hi int) {
		switch f := wd.(type) {
		case []float32:
			linearRows(y.data, xa.data, f, rows, in, out, lo, hi, block, dotF32, dotF32x3)
		case []bfloat16.BFloat16:
			linearRows(y.data, xa.data, f, rows, in, out, lo, hi, block, dotBF16, dotBF16x3)
		}
		if bias != nil {
			for r := range rows {
				yr := y.data[r*out : (r+1)*out]
				for o := lo; o < hi; o++ {
					yr[o] += bias[o]
				}
			}
		}
	})
	return y
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
func linearRows[W float32 | bfloat16.BFloat16](y, x []float32, w []W, rows, in, out, lo, hi, block int,
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
func dotRowsGo[W float32 | bfloat16.BFloat16](x []float32, b []W, y []float32, stride, rows int, dot func([]float32, []W) float32) {
	n := len(b)
	for r := range rows {
		y[r*stride] = dot(x[r*n:(r+1)*n], b)
	}
}

// parallelFor splits [0, n) into one contiguous range per CPU and runs fn on each concurrently. A panic in a
// worker, a fault reading a mapped shard included (workers turn faults into panics, debug.SetPanicOnFault),
// is raised again in the calling goroutine once every worker is done, where guardMapped can recover it.
func parallelFor(n int, fn func(lo, hi int)) {
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

// axpyF32Go adds a·x to y (len(x) ≥ len(y)): the portable kernel (axpyF32 picks an assembly one where the CPU
// has it).
func axpyF32Go(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i, v := range x {
		y[i] += a * v
	}
}

// dotF32Go is the dot product of two equally long float32 vectors, with four independent accumulators: the
// portable kernel (dotF32 picks an assembly one where the CPU has it).
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
// portable kernel (dotBF16 picks an assembly one where the CPU has it).
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

func (o hostOps) RMSNorm(x, w Value, eps float64) Value {
	xa := arr(x)
	wf := weightData(w).([]float32)
	h := len(wf)
	y := o.arena.array(xa.dims...)
	for r := 0; r < len(xa.data); r += h {
		ss := 0.0
		for _, v := range xa.data[r : r+h] {
			ss += float64(v) * float64(v)
		}
		scale := float32(1 / math.Sqrt(ss/float64(h)+eps))
		for i, v := range xa.data[r : r+h] {
			y.data[r+i] = v * scale * wf[i]
		}
	}
	return y
}

func (o hostOps) Heads(x Value, heads, d int) Value {
	xa := arr(x)
	b, t := xa.dims[0], xa.dims[1]
	y := o.arena.array(b, heads, t, d)
	for bi := range b {
		for ti := range t {
			src := xa.data[(bi*t+ti)*heads*d:]
			for h := range heads {
				copy(y.data[((bi*heads+h)*t+ti)*d:][:d], src[h*d:(h+1)*d])
			}
		}
	}
	return y
}

func (o hostOps) Rotary(x Value) Value {
	xa := arr(x)
	b, heads, t, d := xa.dims[0], xa.dims[1], xa.dims[2], xa.dims[3]
	half := d / 2
	y := o.arena.array(xa.dims...)
	for bi := range b {
		for h := range heads {
			for ti := range t {
				v := xa.data[((bi*heads+h)*t+ti)*d:][:d]
				out := y.data[((bi*heads+h)*t+ti)*d:][:d]
				c := o.cos[(bi*t+ti)*d:][:d]
				s := o.sin[(bi*t+ti)*d:][:d]
				for j := range half {
					out[j] = v[j]*c[j] - v[j+half]*s[j]
					out[j+half] = v[j+half]*c[j+half] + v[j]*s[j+half]
				}
			}
		}
	}
	return y
}

func (o hostOps) Attention(q, k, v Value) Value {
	qa, ka, va := arr(q), arr(k), arr(v)
	b, heads, t, d := qa.dims[0], qa.dims[1], qa.dims[2], qa.dims[3]
	kvHeads := ka.dims[1]
	group := heads / kvHeads
	s := o.capacity
	n := s + t
	scale := float32(1 / math.Sqrt(float64(d)))
	y := o.arena.array(b, t, heads*d)
	parallelFor(b*heads, func(lo, hi int) {
		scores := make([]float32, n)
		for bh := lo; bh < hi; bh++ {
			bi, h := bh/heads, bh%heads
			row := bi // the sequence's row of the cache
			if o.rows != nil {
				row = o.rows[bi]
			}
			kv, past := bi*kvHeads+h/group, row*kvHeads+h/group // key/value head in k and v, in the cache
			for ti := range t {
				qv := qa.data[((bi*heads+h)*t+ti)*d:][:d]
				mask := o.mask[(bi*t+ti)*n:][:n]
				key := func(j int) []float32 {
					if j < s {
						return o.pastK[(past*s+j)*d:][:d]
					}
					return ka.data[(kv*t+j-s)*d:][:d]
				}
				value := func(j int) []float32 {
					if j < s {
						return o.pastV[(past*s+j)*d:][:d]
					}
					return va.data[(kv*t+j-s)*d:][:d]
				}
				top := float32(math.Inf(-1))
				for j := range n {
					if mask[j] <= maskedOut/2 { // contributes exp(-1e30) = 0: skip the dot product
						scores[j] = maskedOut
					} else {
						scores[j] = dotF32(qv, key(j))*scale + mask[j]
					}
					top = max(top, scores[j])
				}
				sum := float32(0)
				for j := range n {
					if scores[j] == maskedOut { // exp(maskedOut - top) is 0: no need to compute it
						scores[j] = 0
						continue
					}
					scores[j] = float32(math.Exp(float64(scores[j] - top)))
					sum += scores[j]
				}
				out := y.data[(bi*t+ti)*heads*d+h*d:][:d]
				for j := range n {
					if p := scores[j] / sum; p != 0 {
						axpyF32(out, p, value(j))
					}
				}
			}
		}
	})
	return y
}

func (o hostOps) SiLU(x Value) Value {
	xa := arr(x)
	y := o.arena.array(xa.dims...)
	// An exp per element (about 15 ns): worth both cores from a few thousand elements on.
	n := len(xa.data)
	parallelFor((n+255)/256, func(lo, hi int) { // chunks of 256 elements
		lo, hi = lo*256, min(hi*256, n)
		for i, v := range xa.data[lo:hi] {
			y.data[lo+i] = v / (1 + float32(math.Exp(-float64(v))))
		}
	})
	return y
}

func (o hostOps) Add(a, b Value) Value {
	aa, ba := arr(a), arr(b)
	y := o.arena.array(aa.dims...)
	for i := range y.data {
		y.data[i] = aa.data[i] + ba.data[i]
	}
	return y
}

func (o hostOps) Mul(a, b Value) Value {
	aa, ba := arr(a), arr(b)
	y := o.arena.array(aa.dims...)
	for i := range y.data {
		y.data[i] = aa.data[i] * ba.data[i]
	}
	return y
}
