package kernels

import (
	"math"
	"sync"

	"github.com/layerstream/layerstream/internal/grow"
	"github.com/layerstream/layerstream/quant"
)

// Products of a few input rows (a decode step, a batch step of several sequences, a draft's verification) in
// the tiled kernels' order.
//
// LinearQuantPrompt's tiled products (tiled.go) sum each super-block in integers and take one float update per
// super-block and output, y += ((float(isb)·d) − (float(imin)·dm))·dx, in block order. That order does not
// depend on how the weights are laid out, so kernels that read the weight rows as they are stored can follow it
// too: for the types of rowsKernels, the rows kernels compute every output of LinearQuant, one row or many, in
// that order, bit for bit as the tiled kernels and their Go twins (tileGo) do, and LinearQuant and
// LinearQuantPrompt give the same bits at any number of rows. A decode step, a batch step and a draft's
// verification then compute the same bits as a prompt's pass, and a verification of k positions reads each
// weight block once for all of them instead of once per position.
//
// A rows kernel decodes one weight row's super-block into registers once (the codes as 64 bytes per register,
// the sub-block scales as a register of int16 words per 128 codes) and multiplies it with the input rows four at
// a time (the K-quants, where groups of eight pad to
// no more rows than quads: eight at a time): per row, VPDPBUSD sums fours of code·x into int32
// lanes (at most 4·63·128, an int16), VPACKSSDW packs two registers of them into words and VPDPWSSD multiplies
// them by their sub-blocks' scales into 16 int32 lanes, which a transposing reduction folds into the rows' isb;
// imin is the minimum factors (pairs of int16) times the rows' sums of 16 or 32 (VPDPWSSD), and the float update
// is the tiled one on the rows' lanes (IQ4_XS, whose codes reach 255, takes VPDPBUSD then VPMULLD by the scales
// instead, ROWD). Integer sums are exact, so only the float update fixes the bits. The
// 32-element types (Q8_0, and Q4_0, Q5_0, IQ4_NL, which the tiled kernels widen to Q8_0's integers) take two
// blocks a step: their codes w + 128 against the rows by VPDPBUSD, less 128·Σx, then per block the tiled update
// y += (float(Σ w·x)·d)·dx. A single row (a decode step) has kernels of its own that fold its lanes horizontally
// instead of padding it to four rows. Q4_K and Q6_K (the bulk of Q4_K_M files) take transposing tiled kernels
// (tiledrows.go) for 2 to 64 rows instead of rows kernels: the tiled kernels' layout, 16 weight rows transposed
// in registers. The other types (the codebook i-quants IQ1-IQ3) have no rows kernels yet: their LinearQuant
// keeps its lanes order.
//
// Every type's k-row products, in both arithmetics, are tabulated in docs/performance-log.md ("Issue 40: every
// block type, many rows"), with how many times each decodes a weight block: the codebook i-quants decode each
// super-block once for 2-32 rows in their own order (gridRows, grid.go), MXFP4 once per four rows (mxfp4.go), and
// TestManyRows checks every type at 1-32 rows against the one-row portable path.

// rowsQuad is the number of input rows a rows kernel multiplies together; a product's rows are padded to a
// multiple of it with zero rows.
const rowsQuad = 4

// rowsMost is the most input rows a rows kernel multiplies in one call (its sums' scratch): from a type's
// rowsKernelPair.tiledFrom (at most rowsMost) LinearQuant takes the tiled kernels (the same bits).
const rowsMost = 32

// quantRowsKernel multiplies the nout weight rows from w (nst steps each, stored one after the other: a step is
// a K-quant super-block, or two 32-element blocks) with nq quads of input rows, qs (row r at r·xstride) and
// ameta (per step and quad: the rows' parts, rowsFormat.packStep), and sets y[r·ystride + o] for o < nout and
// r < rows; acc is scratch of 4·nq floats.
type quantRowsKernel func(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

// quantRowKernel is quantRowsKernel for one input row (its parts packed with one lane): y[o] for o < nout.
type quantRowKernel func(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

// rowsKernelPair are a type's rows kernels: for several rows, and for one; from tiledFrom rows, unpacking 16 weight
// rows into the tiled kernels' panels costs less than the rows kernels' reductions (thread CPU time of
// [8960×1536] products, 93 MB of them in turn, docs/performance-log.md; Q5_K from 29 rows, which the rows
// kernels would pad to 32, whose inputs no longer stay in L1). A type whose transposing kernel (rowsFormat.trans)
// takes every row count from 2 has no rows kernel for several rows (rows nil, tiledFrom 2).
type rowsKernelPair struct {
	rows      quantRowsKernel
	one       quantRowKernel
	tiledFrom int
}

// rowsOct is the number of input rows an octs kernel (rowsFormat.oct) multiplies together.
const rowsOct = 8

// rowsFormat is a type's rows kernels and the layout of the input parts they read.
type rowsFormat struct {
	tiled *tiledFormat // the type's tiled format (block: 256 or 32 elements; sub: a K-quant's sums of 16 or 32)
	rowsKernelPair
	// oct, where the type has one, is rows for rowsOct input rows at a time (their parts packed with eight
	// lanes), taken where groups of eight pad to no more rows than quads (5-8, 13-16, 21-24 rows): one
	// reduction, minimum and float update per eight rows instead of four.
	oct quantRowsKernel
	// trans, where the type has one, is its transposing tiled kernel (tiledrows.go), taken from trans.from rows
	// to trans.to (where the tiled kernels take over) instead of the rows kernels or the tiled ones.
	trans transKernel
}

// step is the number of elements a kernel takes per step: a K-quant super-block, or two 32-element blocks.
func (f *rowsFormat) step() int { return max(f.tiled.block, 2*quant.QK) }

// metaBytes is the size of the input parts of one step of lanes rows (a quad, or one row): for a K-quant the
// pairs of sums [npair][lanes]int32 then the scales [lanes]float32; for two 32-element blocks their blockPart
// [2][lanes], then their scales [2][lanes]float32.
func (f *rowsFormat) metaBytes(lanes int) int {
	if f.tiled.block == quant.QK {
		return 4 * 4 * lanes
	}
	return (f.tiled.npair() + 1) * 4 * lanes
}

// packStep writes input c's parts of step b into the step's meta m (lanes inputs).
func (f *rowsFormat) packStep(m []byte, lanes, c int, x qActRow, b int) {
	if f.tiled.block == quant.QK {
		for k := range 2 {
			put32(m, 4*(k*lanes+c), f.blockPart(x, 2*b+k))
			put32(m, 4*((2+k)*lanes+c), math.Float32bits(x.d[2*b+k]))
		}
		return
	}
	f.tiled.packPairs(m, lanes, c, x, b)
	put32(m, f.tiled.npair()*4*lanes+4*c, math.Float32bits(x.d[b]))
}

// blockPart is what a 32-element block's update takes from the input besides its scale: Q8_1's scaled sum s for
// the types with a minimum (Q4_1, Q5_1: y += ((float(Σ code·x)·d)·dx) + m·s), else 128·Σx, the part of the
// integer sum that the weights' codes w + 128 add.
func (f *rowsFormat) blockPart(x qActRow, b int) uint32 {
	if f.tiled.min {
		return math.Float32bits(x.s[b])
	}
	var sum int32
	for _, v := range x.qs[32*b : 32*b+32] {
		sum += int32(v)
	}
	return uint32(128 * sum)
}

// rowsKernels are the types whose LinearQuant products follow the tiled order (nil or empty where the CPU has
// no rows kernels: there LinearQuant keeps its lanes order, quant.go).
// panelFormats are the types PackPanels packs, with their panel kernels (none where the CPU has no VNNI).
var panelFormats = panelsAsm()

var rowsKernels = func() map[quant.Type]*rowsFormat {
	m, octs, trans := map[quant.Type]*rowsFormat{}, rowsOctAsm(), tiledRowsAsm()
	for t, k := range rowsAsm() {
		if f := tiledFormats[t]; f != nil && f.asmKernel != nil {
			m[t] = &rowsFormat{tiled: f, rowsKernelPair: k, oct: octs[t]}
			if tr, ok := trans[t]; ok && f.scales16 != nil {
				m[t].trans = tr
			}
		}
	}
	return m
}()

// rowsInputs is input rows quantized and packed for a rows kernel: qs padded with zero rows to whole quads,
// and the parts of each super-block and quad.
type rowsInputs struct {
	qs   []int8
	meta []byte
}

var rowsPool = sync.Pool{New: func() any { return new(rowsInputs) }}

// pack packs the rows of a (n values each) for format f, lanes rows together (rowsQuad, or 1 for a single row):
// nq groups of lanes rows.
func (p *rowsInputs) pack(f *rowsFormat, a *qAct, rows, lanes, nq int) {
	n := a.n
	p.qs = grow.Slice(p.qs, nq*lanes*n)
	copy(p.qs, a.qs[:rows*n])
	clear(p.qs[rows*n:])
	nst, mb := n/f.step(), f.metaBytes(lanes)
	p.meta = grow.Slice(p.meta, nst*nq*mb)
	clear(p.meta)
	for r := range rows {
		x := a.row(r)
		q, c := r/lanes, r%lanes
		for b := range nst {
			f.packStep(p.meta[(b*nq+q)*mb:], lanes, c, x, b)
		}
	}
}

// linearQuantRows is LinearQuant for a type of rowsKernels: its rows kernel, or for many rows the tiled kernels (the
// same bits).
func linearQuantRows(y, x []float32, w QuantMatrix, bias []float32, f *rowsFormat) {
	in, out := w.Cols, w.Rows
	rows := len(x) / in
	if rows == 0 {
		return
	}
	if f.trans.kernels[0] != nil && rows >= f.trans.from && rows < f.trans.to && tiledRowsFits(w) {
		linearTiledRows(y, x, w, bias, f)
		return
	}
	if rows >= f.tiledFrom || in%f.step() != 0 { // many rows, or an odd number of 32-element blocks
		linearTiled(y, x, w, bias, f.tiled, f.tiled.asmKernel)
		return
	}
	a := actPool.Get().(*qAct)
	defer actPool.Put(a)
	a.quantize(w.k.act, x[:rows*in], in)
	p := rowsPool.Get().(*rowsInputs)
	defer rowsPool.Put(p)
	lanes, kernel := rowsQuad, f.rows
	switch {
	case rows == 1:
		lanes = 1
	case f.oct != nil && rows > rowsQuad && (rows+rowsOct-1)/rowsOct*2 == (rows+rowsQuad-1)/rowsQuad: // no more padding than quads
		lanes, kernel = rowsOct, f.oct
	}
	nq := (rows + lanes - 1) / lanes
	p.pack(f, a, rows, lanes, nq)
	nst := in / f.step()
	ParallelFor(out, func(lo, hi int) {
		if rows == 1 {
			f.one(&w.Row(lo)[0], hi-lo, nst, &p.qs[0], &p.meta[0], &y[lo])
		} else {
			var acc [rowsMost]float32 // the kernel's sums, in groups of lanes rows
			kernel(&w.Row(lo)[0], hi-lo, nst, &p.qs[0], in, nq, &p.meta[0], rows, &y[lo], out, &acc[0])
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
