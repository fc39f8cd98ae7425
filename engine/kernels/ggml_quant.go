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
//   - its vec_dot kernels (every format, fewer than 8 rows for the K-quants and i-quants): eight lanes of integer sums of four
//     products, each block's lanes scaled and added with a fused multiply-add, summed as hsum_float_8 (dot32 with
//     fused, and dotKVec, whose minimum terms Q2_K, Q4_K and Q5_K add in their own ways; IQ4_NL's in two sums,
//     dotIQ4_NLVec); the batches of Q8_0, Q4_0, Q5_0 and IQ4_NL go through llamafile's tinyBLAS, whose sums are
//     dot32's;
//   - its repacked kernels, for the Q4_0, IQ4_NL, Q4_K and Q2_K matrices of a multiple of 8 rows that it interleaves
//     8 rows at a time when it loads them (GGMLRepacks): each block's integer sum scaled and added with one fused
//     multiply-add, the minimum terms of the K-quants in a second sum subtracted at the end. Of a batch of n > 3
//     rows, the first n - n%4 go four at a time (gemm), the others one at a time (gemv); the gemm adds a Q4_K
//     super-block in four parts of 64 elements and a Q2_K one in two of 128, the gemv in one (dotKRepacked);
//   - its tiled K-quant kernels (the K-quants not repacked, IQ4_XS and the IQ1-IQ3 i-quants, 8 rows or more): each
//     super-block's integer sum times the weight's d, less dmin times its minimum terms' sum, then times the input's
//     scale and added with fused multiply-adds (dotKTiled).
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

// tiledBatchRows is the batch from which llama.cpp takes its tiled K-quant kernel (ggml_tiled_min_batch).
const tiledBatchRows = 8

// ggmlKernels and ggmlRepacked are the kernels of the matrices llama.cpp multiplies as it loaded them and of those
// it repacks when it loads them (GGMLRepacks).
var ggmlKernels, ggmlRepacked = ggmlTables(true)

// ggmlTables makes ggmlKernels and ggmlRepacked, with the assembly kernels where the CPU has them when asm is true
// (false: the Go ones, which the assembly ones equal bit for bit).
func ggmlTables(asm bool) (plain, repacked map[quant.Type]*ggmlKernel) {
	quads := func(t quant.Type) kQuadFormat {
		return kQuadFormat{typ: t, asm: asm && (kQuadsAsm(t) || quant.IsGrid(t) && useAVX2)}
	}
	plain = map[quant.Type]*ggmlKernel{
		quant.Q8_0: {act: actQ8_0, one: func(w []byte, x qActRow) float32 { return dot32(w, x, 34, intsQ8_0, true) }},
		quant.Q4_0: {act: actQ8_0, one: func(w []byte, x qActRow) float32 { return dot32(w, x, 18, intsQ4_0, true) }},
		quant.Q4_1: {act: actQ8_1, one: func(w []byte, x qActRow) float32 { return dot32(w, x, 20, intsQ4_1, true) }},
		quant.Q5_0: {act: actQ8_0, one: func(w []byte, x qActRow) float32 { return dot32(w, x, 22, intsQ5_0, true) }},
		quant.Q5_1: {act: actQ8_1, one: func(w []byte, x qActRow) float32 { return dot32(w, x, 24, intsQ5_1, true) }},
		// IQ4_NL's vec_dot adds even and odd blocks in two sums (dotIQ4_NLVec); its batches go through tinyBLAS.
		quant.IQ4_NL: {act: actQ8_0, one: dotIQ4_NLVec, batchRows: 2,
			many: func(w []byte, x qActRow) float32 { return dot32(w, x, 18, intsIQ4_NL, true) }},
	}
	// The codebook i-quants but IQ1's (below) take the K-quants' kernels: their vec_dot's lanes and hsum_float_8 (its d without the format's power of two, which its end
	// multiplies in: the same bits while d·dx stays above 2^-123, far below any model's), and the tiled kernel's
	// act-bias sums, exactly the signed codes' (kDecode).
	for t, mins := range map[quant.Type]kMins{quant.Q2_K: minsLanes, quant.Q3_K: minsSum, quant.Q4_K: minsFused4, quant.Q5_K: minsFused, quant.Q6_K: minsSum, quant.IQ4_XS: minsSum,
		quant.IQ2_XXS: minsSum, quant.IQ2_XS: minsSum, quant.IQ2_S: minsSum, quant.IQ3_XXS: minsSum, quant.IQ3_S: minsSum} {
		f := quads(t)
		plain[t] = &ggmlKernel{act: actQ8_K, one: func(w []byte, x qActRow) float32 { return dotKVec(f, mins, w, x) },
			many: func(w []byte, x qActRow) float32 { return dotKTiled(f, w, x) }, batchRows: tiledBatchRows}
	}
	// IQ1's vec_dot takes the grid values (-1, 0, 1) in the lanes and the ±1/8 shifts apart; its tiled kernel is
	// the others' (codes 8·v±1).
	for t, dot := range map[quant.Type]func(w []byte, x qActRow) float32{quant.IQ1_S: dotIQ1SVec, quant.IQ1_M: dotIQ1MVec} {
		f := quads(t)
		plain[t] = &ggmlKernel{act: actQ8_K, one: dot, many: func(w []byte, x qActRow) float32 { return dotKTiled(f, w, x) }, batchRows: tiledBatchRows}
	}
	repacked = map[quant.Type]*ggmlKernel{
		quant.Q4_0:   {act: actQ8_0, one: dotQ4_0Repacked},
		quant.Q4_K:   {act: actQ8_K, one: dotKRepacked(quads(quant.Q4_K), 1), four: dotKRepacked(quads(quant.Q4_K), 4)},
		quant.Q2_K:   {act: actQ8_K, one: dotKRepacked(quads(quant.Q2_K), 1), four: dotKRepacked(quads(quant.Q2_K), 2)},
		quant.IQ4_NL: {act: actQ8_0, one: dotIQ4_NLRepacked},
	}
	if asm {
		for t, f := range ggmlAsmDots() {
			plain[t].one = f
		}
		for t, f := range ggmlAsmRepacked() {
			repacked[t].one = f
		}
	}
	return plain, repacked
}

// GGMLSupports reports whether LinearQuantGGML multiplies a matrix of type t as llama.cpp does, and if not, says
// why.
func GGMLSupports(t quant.Type) error {
	if _, ok := ggmlKernels[t]; !ok {
		return fmt.Errorf("llama.cpp's arithmetic is reproduced for the Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K to Q6_K, IQ1_S to IQ3_S, IQ4_NL and IQ4_XS block formats, not %s", t)
	}
	return nil
}

// GGMLRepacks reports whether llama.cpp repacks a weight matrix of type t with rows rows when it loads it, which
// picks other kernels: Q4_0, Q4_K and Q2_K matrices of a multiple of 8 rows (Q2_K on a CPU with AVX-512, as
// LinearQuantGGML's kernels all are). A tied output head is repacked too (llama.cpp
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
	if k == nil {
		panic(fmt.Sprintf("kernels: LinearQuantGGML of a %s matrix (repacked %v), which it does not reproduce (GGMLSupports, GGMLRepacks)", w.Type, repacked))
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

// LinearGGMLF32 is Linear of the float32 matrix w ([out, in], out = len(w)/in) as llama.cpp multiplies it, x
// holding sequences of batch rows each: ggml_vec_dot_f32 (ggml.VecDot) for a batch of one token, llamafile's
// tinyBLAS (ggml.Dot16) for more where in%16 == 0 and out%4 == 0 (its conditions). Each output is one dot product,
// whatever the rows beside it; each weight row is read once for all the input rows.
func LinearGGMLF32(y, x, w, bias []float32, in, batch int) {
	out, rows := len(w)/in, len(x)/in
	dot := ggml.VecDot
	if batch >= 2 && in%16 == 0 && out%4 == 0 {
		dot = ggml.Dot16
	}
	ParallelFor(out, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			wj := w[j*in : (j+1)*in]
			for r := range rows {
				v := dot(wj, x[r*in:(r+1)*in])
				if bias != nil {
					v += bias[j]
				}
				y[r*out+j] = v
			}
		}
	})
}

// GGMLExpertBatch is the batch LinearQuantGGML takes for a routed expert's matrix of type t (repacked as
// GGMLRepacks says) multiplied by the rows of one sequence routed to it, as llama.cpp's mul_mat_id multiplies
// them: rows with its tiled K-quant kernel (ggml_compute_forward_mul_mat_id_tiled, for a matrix it does not
// repack, where the expert has 8 rows or more), else 1: each row alone (vec_dot, or the repacked gemv; mul_mat_id
// never takes tinyBLAS or the repacked gemm).
func GGMLExpertBatch(t quant.Type, repacked bool, rows int) int {
	if k := ggmlKernels[t]; !repacked && k != nil && k.many != nil && k.batchRows == tiledBatchRows {
		return rows
	}
	return 1
}

// dotQ4_0Repacked is the product of llama.cpp's repacked Q4_0 kernels (gemv/gemm_q4_0_8x8_q8_0): per block,
// the integer sum of its 32 products scaled by the weight's and the input's float16 scales, fused into the sum.
func dotQ4_0Repacked(w []byte, x qActRow) float32 { return dotRepacked32(w, x, false) }

// dotIQ4_NLRepacked is the product of llama.cpp's repacked IQ4_NL kernels (gemv/gemm_iq4_nl_8x8_q8_0, Q4_0's
// with IQ4_NL's grid as the lookup table).
func dotIQ4_NLRepacked(w []byte, x qActRow) float32 { return dotRepacked32(w, x, true) }

// dotRepacked32 is dotQ4_0Repacked for Q4_0 or (iq4) IQ4_NL blocks.
func dotRepacked32(w []byte, x qActRow, iq4 bool) float32 {
	var y float32
	for b := range len(x.d) {
		var q [32]int8
		var d float32
		if iq4 {
			q, d, _ = intsIQ4_NL(w[b*18 : (b+1)*18])
		} else {
			q, d, _ = intsQ4_0(w[b*18 : (b+1)*18])
		}
		var s int32
		for i, a := range x.qs[32*b : 32*b+32] {
			s += int32(q[i]) * int32(a)
		}
		y = ggml.FMA32(float32(s), d*x.d[b], y)
	}
	return y
}

// dotKRepacked is the product of llama.cpp's repacked K-quant kernels (gemv_q4_K_8x8_q8_K, gemv_q2_K_8x8_q8_K
// and their gemm): per super-block, the integer sum of its sub-blocks' scaled products and that of its minimums
// times the input's sums, each fused into its own float sum with the weight's d or dmin times the input's scale;
// the second subtracted from the first at the end. The gemv kernels fuse a super-block at once (parts 1); the gemm
// kernels, for the rows they take four at a time, in parts of equal size (Q4_K four of 64 elements, Q2_K two of
// 128).
func dotKRepacked(f kQuadFormat, parts int) func(w []byte, x qActRow) float32 {
	per := 16 / parts // sixteenths a part
	return func(w []byte, x qActRow) float32 {
		var acc, mins float32
		var k kInts
		var q [64]int32
		bb := len(w) / len(x.d)
		for b := range len(x.d) {
			f.quads(&k, w[b*bb:(b+1)*bb], x.qs[quant.QKK*b:quant.QKK*(b+1)], &q)
			for part := range parts {
				var s, m int32
				for j := per * part; j < per*(part+1); j++ {
					s += k.sc[j] * sixteenth(&q, j)
					m += k.mn[j] * int32(x.bsums[16*b+j])
				}
				acc = ggml.FMA32(float32(s), k.d*x.d[b], acc)
				mins = ggml.FMA32(float32(m), k.dmin*x.d[b], mins)
			}
		}
		return acc - mins
	}
}

// kQuadFormat is a K-quant format as LinearQuantGGML multiplies it: from each super-block's quad sums, out[8g+l]
// the integer sum of the four products of elements 32g+4l to 32g+4l+3 (ggml's lane l of sub-block g), weight codes
// as kInts holds them, computed by an assembly kernel when asm is set (quads_amd64.s).
type kQuadFormat struct {
	typ quant.Type
	asm bool
}

// quads sets k to super-block b's scales (and, without the assembly kernel, its codes) and out to its quad sums
// against the 256 activations qs. It calls its helpers directly, not through function values, so that k and out
// stay on the caller's stack.
func (f kQuadFormat) quads(k *kInts, b []byte, qs []int8, out *[64]int32) {
	if f.asm && quant.IsGrid(f.typ) { // decoded by the assembly decoder, then summed in quads
		var scv gridScales
		gridDecodeAsm(f.typ, b, &k.q, &scv)
		for s := range 16 {
			k.sc[s] = scv.sc(s)
		}
		k.d, k.hasMin, k.offset = quant.GridScale(f.typ, b), false, 0
		gridQuadsAVX2(&k.q, &qs[:quant.QKK][0], out)
		return
	}
	if f.asm {
		kScales(f.typ, k, b)
		quadsAsm(f.typ, b, qs[:quant.QKK], out)
		return
	}
	kDecode(f.typ, k, b)
	quadsOf(k, qs, out)
}

// quadsOf sets out to the quad sums of k's codes and the 256 activations qs.
func quadsOf(k *kInts, qs []int8, out *[64]int32) {
	for i := range out {
		var s int32
		for j := range 4 {
			s += int32(k.q[4*i+j]) * int32(qs[4*i+j])
		}
		out[i] = s
	}
}

// sixteenth is the integer sum of the products of a super-block's elements 16j to 16j+15, from its quad sums q.
func sixteenth(q *[64]int32, j int) int32 {
	o := 8*(j/2) + 4*(j%2)
	return q[o] + q[o+1] + q[o+2] + q[o+3]
}

// dotKVec is the product of llama.cpp's x86 vec_dot kernel for format f (ggml_vec_dot_q6_K_q8_K and the others):
// per super-block, eight integer lanes (the scaled quad sums, less Q6_K's offset terms as ggml takes them) added
// with one fused multiply-add each, the minimum terms as mins says (addMins); the lanes summed as hsum_float_8.
func dotKVec(f kQuadFormat, mins kMins, w []byte, x qActRow) float32 {
	var acc [8]float32
	var summs [4]float32
	var k kInts
	var q [64]int32
	bb := len(w) / len(x.d)
	for b := range len(x.d) {
		f.quads(&k, w[b*bb:(b+1)*bb], x.qs[quant.QKK*b:quant.QKK*(b+1)], &q)
		bsums := x.bsums[16*b : 16*b+16]
		var lanes [8]int32
		for g := range 8 {
			lo, hi := k.sc[2*g], k.sc[2*g+1]
			for l := range 4 {
				lanes[l] += lo * q[8*g+l]
				lanes[4+l] += hi * q[8*g+4+l]
			}
		}
		if k.offset != 0 {
			for l := range 8 {
				lanes[l] -= k.offset * (k.sc[2*l]*int32(bsums[2*l]) + k.sc[2*l+1]*int32(bsums[2*l+1]))
			}
		}
		if k.hasMin { // before the products: minsLanes adds into their lanes first, as Q2_K's kernel does
			addMins(&acc, &summs, &k, bsums, x.d[b], mins)
		}
		fmaLanes(&acc, k.d*x.d[b], &lanes)
	}
	return hsum8(&acc) - sumMins(&summs, mins)
}

// dotKTiled is the product of llama.cpp's tiled K-quant kernel (tiled_run_microtile_vnni) for format f: per
// super-block, the integer sum of its sub-blocks' scaled products (weights less their offset) times the weight's
// d, less (fused) dmin times the integer sum of its minimum terms, then times the input's scale and added with one
// fused multiply-add (GCC fuses the kernel's _mm512_add_ps of an _mm512_mul_ps).
func dotKTiled(f kQuadFormat, w []byte, x qActRow) float32 {
	var y float32
	var k kInts
	var q [64]int32
	bb := len(w) / len(x.d)
	for b := range len(x.d) {
		f.quads(&k, w[b*bb:(b+1)*bb], x.qs[quant.QKK*b:quant.QKK*(b+1)], &q)
		var s, m int32
		for j := range 16 { // sub-blocks of 16 (Q4_K's and Q5_K's 32 come as two with the same scale)
			s += k.sc[j] * (sixteenth(&q, j) - k.offset*int32(x.bsums[16*b+j]))
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

// dotIQ4_NLVec is the product of llama.cpp's x86 ggml_vec_dot_iq4_nl_q8_0: eight lanes per block as dot32's, the
// even blocks' fused into one float sum and the odd ones' into another, the two added before hsum_float_8; an odd
// last block's integer sum times d_a·d_w added after, unfused.
func dotIQ4_NLVec(w []byte, x qActRow) float32 {
	var acc [2][8]float32
	nb := len(x.d)
	b := 0
	for ; b+1 < nb; b += 2 {
		for k := range 2 {
			q, d, _ := intsIQ4_NL(w[(b+k)*18 : (b+k+1)*18])
			var lanes [8]int32
			lanes32(&lanes, q[:], x.qs[32*(b+k):32*(b+k)+32], 1, 1)
			fmaLanes(&acc[k], x.d[b+k]*d, &lanes)
		}
	}
	for l := range 8 {
		acc[0][l] += acc[1][l]
	}
	s := hsum8(&acc[0])
	for ; b < nb; b++ {
		q, d, _ := intsIQ4_NL(w[b*18 : (b+1)*18])
		var sum int32
		for i, a := range x.qs[32*b : 32*b+32] {
			sum += int32(q[i]) * int32(a)
		}
		s += float32(x.d[b] * d * float32(sum))
	}
	return s
}

// iq1Split writes an IQ1_S or IQ1_M super-block's codes q (8·v+δ, quant.GridInts's) as llama.cpp's vec_dot takes
// them: the grid values v (-1, 0, 1) and the shifts' signs δ (±1, one per 8 elements), and returns the block's
// float16 d (GridInts's d is d/8).
func iq1Split(t quant.Type, b []byte, v, delta *[quant.QKK]int8, sc *[16]int32) float32 {
	var q [quant.QKK]int8
	d8 := quant.GridInts(t, &q, sc, b)
	for j, c := range q {
		v[j] = (c + 4*sign8(c)) / 8 // the nearest: ±9, ±7 → ±1; ±1 → 0
		delta[j] = c - 8*v[j]
	}
	return d8 * 8
}

func sign8(c int8) int8 {
	if c < 0 {
		return -1
	}
	return 1
}

// dotIQ1SVec is llama.cpp's x86 ggml_vec_dot_iq1_s_q8_K: per super-block the grid values' eight lanes, scaled per
// 32, fused into eight float sums with d·dx; the shifts' sum Σ ls·δ·(the activations' sums) in a scalar, added as
// d·sum (the C line accum1 += d * sumi1, which GCC fuses); at the end hsum_float_8 + 1/8 of the scalar.
func dotIQ1SVec(w []byte, x qActRow) float32 {
	var acc [8]float32
	var acc1 float32
	var v, delta [quant.QKK]int8
	var sc [16]int32
	bb := len(w) / len(x.d)
	for b := range len(x.d) {
		f16 := iq1Split(quant.IQ1_S, w[b*bb:(b+1)*bb], &v, &delta, &sc)
		var lanes [8]int32
		var s1 int32
		for ib := range 8 {
			lanes32(&lanes, v[32*ib:32*ib+32], x.qs[quant.QKK*b+32*ib:], sc[2*ib], sc[2*ib+1])
			s1 += (int32(x.bsums[16*b+2*ib]) + int32(x.bsums[16*b+2*ib+1])) * int32(delta[32*ib]) * sc[2*ib]
		}
		d := x.d[b] * f16
		fmaLanes(&acc, d, &lanes)
		acc1 = ggml.FMA32(d, float32(s1), acc1)
	}
	return hsum8(&acc) + 0.125*acc1 // 0.125·acc1 is exact: fused or not, the same
}

// dotIQ1MVec is llama.cpp's x86 ggml_vec_dot_iq1_m_q8_K: the grid values' eight lanes and the shifts' eight lanes
// (δ·x, per 8 elements), both scaled per 16, fused into two sets of eight float sums with d·dx; at the end
// hsum_float_8 of the first plus 1/8 of hsum_float_8 of the second.
func dotIQ1MVec(w []byte, x qActRow) float32 {
	var acc1, acc2 [8]float32
	var v, delta [quant.QKK]int8
	var sc [16]int32
	bb := len(w) / len(x.d)
	for b := range len(x.d) {
		f16 := iq1Split(quant.IQ1_M, w[b*bb:(b+1)*bb], &v, &delta, &sc)
		var l1, l2 [8]int32
		for ib := range 8 {
			xs := x.qs[quant.QKK*b+32*ib:]
			lanes32(&l1, v[32*ib:32*ib+32], xs, sc[2*ib], sc[2*ib+1])
			lanes32(&l2, delta[32*ib:32*ib+32], xs, sc[2*ib], sc[2*ib+1])
		}
		d := x.d[b] * f16
		fmaLanes(&acc1, d, &l1)
		fmaLanes(&acc2, d, &l2)
	}
	return hsum8(&acc1) + 0.125*hsum8(&acc2)
}
