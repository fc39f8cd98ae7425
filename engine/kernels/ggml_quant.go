package kernels

import (
	"fmt"

	"github.com/layerstream/layerstream/engine/kernels/ggml"
	"github.com/layerstream/layerstream/quant"
)

// llama.cpp's CPU backend (its x86-64 build with AVX-512, VNNI and AVX2) multiplies a block-quantized matrix by
// input rows it quantizes first (LinearQuant's activation formats, bit for bit) with one of three kinds of kernel,
// by format, matrix and batch:
//
//   - its vec_dot kernels (every format, fewer than 8 rows for the K-quants): eight lanes of integer sums of four
//     products, each block's lanes scaled and added with a fused multiply-add, summed as hsum_float_8 (dot32 with
//     fused, and dotKFused, whose minimum terms Q4_K and Q5_K add in their own ways); the batches of Q8_0, Q4_0
//     and Q5_0 go through llamafile's tinyBLAS, whose sums are the same;
//   - its repacked kernels, for the Q4_0 and Q4_K matrices of a multiple of 8 rows that it interleaves 8 rows at a
//     time when it loads them (GGMLRepacks): each block's integer sum scaled and
//     added with one fused multiply-add, the minimum terms of Q4_K in a second sum subtracted at the end. Of a
//     batch of n > 3 rows, the first n - n%4 go four at a time (gemm), the others one at a time (gemv); Q4_K's gemm
//     adds a super-block in four parts of 64 elements, its gemv in one;
//   - its tiled K-quant kernels (Q3_K to Q6_K not repacked, 8 rows or more): each super-block's integer sum times
//     the weight's d, less dmin times its minimum terms' sum, then times the input's scale and added with fused
//     multiply-adds (dotKTiled).
//
// A ggmlKernel is, for one format, the dot product of one weight row with one quantized input row in each case.
type ggmlKernel struct {
	act actFormat
	// one is the product for a batch of fewer than batchRows input rows (or any when many is nil).
	one func(w []byte, x qActRow) float32
	// many is the product for batchRows rows or more.
	many      func(w []byte, x qActRow) float32
	batchRows int
	// four, when set, is the product of the rows a repacked kernel takes four at a time (gemm).
	four func(w []byte, x qActRow) float32
}

// ggmlKernels are the kernels of the matrices llama.cpp multiplies as it loaded them.
var ggmlKernels = func() map[quant.Type]*ggmlKernel {
	m := map[quant.Type]*ggmlKernel{
		quant.Q8_0: {act: actQ8_0, one: func(w []byte, x qActRow) float32 { return dot32(w, x, 34, intsQ8_0, true) }},
		quant.Q4_0: {act: actQ8_0, one: func(w []byte, x qActRow) float32 { return dot32(w, x, 18, intsQ4_0, true) }},
		quant.Q4_1: {act: actQ8_1, one: func(w []byte, x qActRow) float32 { return dot32(w, x, 20, intsQ4_1, true) }},
		quant.Q5_0: {act: actQ8_0, one: func(w []byte, x qActRow) float32 { return dot32(w, x, 22, intsQ5_0, true) }},
		quant.Q5_1: {act: actQ8_1, one: func(w []byte, x qActRow) float32 { return dot32(w, x, 24, intsQ5_1, true) }},
		quant.Q3_K: {act: actQ8_K, one: dotKFused(decodeQ3_KInts, minsSum), many: dotKTiled(decodeQ3_KInts), batchRows: 8},
		quant.Q4_K: {act: actQ8_K, one: dotKFused(decodeQ4_KInts, minsFused4), many: dotKTiled(decodeQ4_KInts), batchRows: 8},
		quant.Q5_K: {act: actQ8_K, one: dotKFused(decodeQ5_KInts, minsFused), many: dotKTiled(decodeQ5_KInts), batchRows: 8},
		quant.Q6_K: {act: actQ8_K, one: dotKFused(decodeQ6_KInts, minsSum), many: dotKTiled(decodeQ6_KInts), batchRows: 8},
	}
	for t, f := range ggmlAsmDots() {
		m[t].one = f
	}
	return m
}()

// ggmlRepacked are the kernels of the matrices llama.cpp repacks when it loads them (GGMLRepacks).
var ggmlRepacked = map[quant.Type]*ggmlKernel{
	quant.Q4_0: {act: actQ8_0, one: dotQ4_0Repacked},
	quant.Q4_K: {act: actQ8_K, one: dotQ4_KRepacked, four: dotQ4_KRepacked4},
}

// GGMLSupports reports whether LinearQuantGGML multiplies a matrix of type t as llama.cpp does, and if not, says
// why.
func GGMLSupports(t quant.Type) error {
	if _, ok := ggmlKernels[t]; !ok {
		return fmt.Errorf("llama.cpp's arithmetic is reproduced for the Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q3_K, Q4_K, Q5_K and Q6_K block formats, not %s", t)
	}
	return nil
}

// GGMLRepacks reports whether llama.cpp repacks a weight matrix of type t with rows rows when it loads it, which
// picks other kernels: Q4_0 and Q4_K matrices of a multiple of 8 rows. A tied output head is repacked too (llama.cpp
// loads the embedding a second time as the output tensor); the embedding's row lookups are exact either way.
func GGMLRepacks(t quant.Type, rows int) bool {
	_, ok := ggmlRepacked[t]
	return ok && rows%8 == 0
}

// LinearQuantGGML is LinearQuant with llama.cpp's kernels, bit for bit, x holding sequences of batch rows each
// (the tokens llama.cpp multiplies at once, which pick its kernel): see ggmlKernel. w's type must be one
// GGMLSupports accepts; repacked says whether llama.cpp repacked w when it loaded it (GGMLRepacks).
func LinearQuantGGML(y, x []float32, w QuantMatrix, bias []float32, batch int, repacked bool) {
	k := ggmlKernels[w.Type]
	if repacked {
		k = ggmlRepacked[w.Type]
	}
	in, out := w.Cols, w.Rows
	rows := len(x) / in
	a := actPool.Get().(*qAct)
	defer actPool.Put(a)
	a.quantize(k.act, x[:rows*in], in)
	ParallelFor(out, func(lo, hi int) {
		for r := range rows {
			xr := a.row(r)
			dot := k.one
			switch j := r % batch; { // the row's place in its sequence's batch
			case k.many != nil && batch >= k.batchRows:
				dot = k.many
			case k.four != nil && batch > 3 && j < batch-batch%4:
				dot = k.four
			}
			for o := lo; o < hi; o++ {
				v := dot(w.Row(o), xr)
				if bias != nil {
					v += bias[o]
				}
				y[r*out+o] = v
			}
		}
	})
}

// dotQ4_0Repacked is the product of llama.cpp's repacked Q4_0 kernels (gemv/gemm_q4_0_8x8_q8_0): per block,
// the integer sum of its 32 products scaled by the weight's and the input's float16 scales, fused into the sum.
func dotQ4_0Repacked(w []byte, x qActRow) float32 {
	var y float32
	var q [32]int8
	for b := range len(x.d) {
		d, _ := intsQ4_0(&q, w[b*18:(b+1)*18])
		var s int32
		for i, a := range x.qs[32*b : 32*b+32] {
			s += int32(q[i]) * int32(a)
		}
		y = ggml.FMA32(float32(s), d*x.d[b], y)
	}
	return y
}

// dotQ4_KRepacked is the product of llama.cpp's repacked Q4_K gemv (gemv_q4_K_8x8_q8_K): per super-block, the
// integer sum of its sub-blocks' scaled products and that of its minimums times the input's sums, each fused into
// its own float sum with the weight's d or dmin times the input's scale; the second subtracted from the first at
// the end.
func dotQ4_KRepacked(w []byte, x qActRow) float32 { return dotQ4_KParts(w, x, 1) }

// dotQ4_KRepacked4 is dotQ4_KRepacked as llama.cpp's gemm_q4_K_8x8_q8_K computes it for rows it takes four at a
// time: each super-block's sums fused into the float sums in four parts of two sub-blocks.
func dotQ4_KRepacked4(w []byte, x qActRow) float32 { return dotQ4_KParts(w, x, 4) }

// dotQ4_KParts is the repacked Q4_K product with each super-block's eight sub-blocks fused into the float sums in
// parts (1 or 4) of equal size.
func dotQ4_KParts(w []byte, x qActRow, parts int) float32 {
	var acc, mins float32
	var k kInts
	per := 8 / parts
	for b := range len(x.d) {
		decodeQ4_KInts(&k, w[b*144:(b+1)*144])
		for part := range parts {
			var s, m int32
			for g := per * part; g < per*(part+1); g++ {
				var p int32
				for i, a := range x.qs[quant.QKK*b+32*g : quant.QKK*b+32*g+32] {
					p += int32(k.q[32*g+i]) * int32(a)
				}
				s += k.sc[2*g] * p
				m += k.mn[2*g] * (int32(x.bsums[16*b+2*g]) + int32(x.bsums[16*b+2*g+1]))
			}
			acc = ggml.FMA32(float32(s), k.d*x.d[b], acc)
			mins = ggml.FMA32(float32(m), k.dmin*x.d[b], mins)
		}
	}
	return acc - mins
}

// dotKTiled is the product of llama.cpp's tiled K-quant kernel (tiled_run_microtile_vnni) for the format whose
// super-blocks decode gives: per super-block, the integer sum of its sub-blocks' scaled products (weights less
// their offset) times the weight's d, less (fused) dmin times the integer sum of its minimum terms, then times
// the input's scale and added with one fused multiply-add (GCC fuses the kernel's _mm512_add_ps of an
// _mm512_mul_ps).
func dotKTiled(decode func(k *kInts, b []byte)) func(w []byte, x qActRow) float32 {
	return func(w []byte, x qActRow) float32 {
		var y float32
		var k kInts
		bb := len(w) / len(x.d)
		for b := range len(x.d) {
			decode(&k, w[b*bb:(b+1)*bb])
			var s, m int32
			for j := range 16 { // sub-blocks of 16 (Q4_K's and Q5_K's 32 come as two with the same scale)
				var p int32
				for i, a := range x.qs[quant.QKK*b+16*j : quant.QKK*b+16*j+16] {
					p += (int32(k.q[16*j+i]) - k.offset) * int32(a)
				}
				s += k.sc[j] * p
				m += k.mn[j] * int32(x.bsums[16*b+j])
			}
			r := float32(s) * k.d
			if k.hasMin {
				r = ggml.FMA32(-k.dmin, float32(m), r)
			}
			y = ggml.FMA32(r, x.d[b], y)
		}
		return y
	}
}
