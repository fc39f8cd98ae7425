package kernels

import (
	"math"

	"github.com/layerstream/layerstream/internal/grow"
)

// Transposing tiled kernels: the tiled kernels' products (tiled.go: 16 weight rows in the lanes of a register,
// one VPDPBUSD per quad of four codes of the 16 rows and one input row, the sub-block scales per lane, one float
// update per super-block, row and input), for products of a few input rows (a batch step of several sequences, a
// draft's verification). The tiled kernels first unpack 16 weight rows into a panel of codes, which costs as much
// as the products of about 12 input rows; these kernels read the 16 rows' blocks as they are stored and
// transpose them in registers (a 32-byte group of each row: two rows to a register, two rounds of unpacks and a
// 128-bit shuffle), then multiply each quad of codes with 8 input rows a call (4 for products of up to 4 rows).
// Their arithmetic is the tiled order's, bit for bit (integer sums, then tileGo's float update), so they replace
// the rows kernels or the tiled ones at any row count without changing a bit (TestLinearQuantRowsTiledOrder).

// tiledRowsIn are the numbers of input rows a transposing kernel multiplies together (transKernel.kernels; the
// last group padded with zero rows).
var tiledRowsIn = [2]int{4, 8}

// tiledRowsKernel adds to acc[c·16 + r] the products of the 16 weight rows at w (row r at w + r·stride, nsb
// super-blocks each) with its number of packed inputs (qs, ameta: tiledActs of that many rows a group), the rows'
// scales at meta (the panel meta of tiledFormat.scales16, or one super-block's that the kernel builds there
// itself: transKernel); it prefetches the 16·stride bytes from pf
// (the next panel's rows: prefetches never fault, so the matrix's end may be within them).
type tiledRowsKernel func(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

// transKernel is a type's transposing tiled kernel and the row counts it is taken for, from to to-1: below from
// the rows kernels cost less, from to the tiled kernels (whose panels cost as much as the products of ~12
// input rows, but whose tiles of 12 input rows take fewer instructions per product); thread CPU time of
// [8960×1536] products, 93 MB of them in turn (BenchmarkRowsPaths, docs/performance-log.md).
type transKernel struct {
	// kernels: 4 and 8 inputs a call (4 for products of up to 4 rows), each building a super-block's meta of the
	// 16 rows from its own loads as it goes, into one super-block's worth at meta (a separate pass over the
	// panel, scales16, waited on the panel's memory and took ~15% of an 8-row product).
	kernels [2]tiledRowsKernel
	// panel: the 8-input kernel reading the panel's meta (scales16), for products of more than 8 rows, whose
	// calls share it (built in each call it would cost each call again).
	panel    tiledRowsKernel
	from, to int
}

// linearTiledRows is LinearQuant for a type of rowsKernels with a transposing kernel (f.trans): the same bits as
// linearTiled and the rows kernels. The input's block count must be whole super-blocks (the K-quants: always).
func linearTiledRows(y, x []float32, w QuantMatrix, bias []float32, f *rowsFormat) {
	in, out := w.Cols, w.Rows
	rows := len(x) / in
	tf := f.tiled
	nb := in / tf.block
	kernel, inputs := f.trans.kernels[1], tiledRowsIn[1]
	if rows <= tiledRowsIn[0] {
		kernel, inputs = f.trans.kernels[0], tiledRowsIn[0]
	}
	t := packedInputs(w, x, rows, tf, inputs)
	defer tiledPool.Put(t)
	groups := (rows + inputs - 1) / inputs
	metaSBs := 1 // the kernels build each super-block's
	if groups > 1 {
		kernel, metaSBs = f.trans.panel, nb
	}
	gq, gm := in*inputs, nb*tf.actMetaBytes(inputs)
	bb := w.rowBytes / nb
	parallelFor((out+tileRows-1)/tileRows, 0, func(lo, hi int) {
		p := panelPool.Get().(*tiledPanel)
		defer panelPool.Put(p)
		p.meta = grow.Slice(p.meta, metaSBs*tf.metaBytes())
		acc := p.acc[:8*tileRows]
		for pi := lo; pi < hi; pi++ {
			o := pi * tileRows
			n := min(tileRows, out-o)
			src := &w.Data[o*w.rowBytes]
			if n < tileRows { // the last rows, padded with zero blocks (zero scales) to 16
				p.codes = grow.Slice(p.codes, tileRows*w.rowBytes)
				copy(p.codes, w.Data[o*w.rowBytes:(o+n)*w.rowBytes])
				clear(p.codes[n*w.rowBytes:])
				src = &p.codes[0]
			}
			pf := src // the next panel's rows, which the kernel prefetches (past the matrix's end: its own, again)
			if next := o + tileRows; next < out {
				pf = &w.Data[next*w.rowBytes]
			}
			if groups > 1 {
				tf.scales16(src, w.rowBytes, &p.meta[0], nb, bb)
			}
			for g := range groups {
				clear(acc)
				kernel(src, w.rowBytes, &p.meta[0], &t.qs[g*gq], &t.meta[g*gm], nb, &acc[0], pf)
				storeTile(y, acc, bias, out, g*inputs, min(inputs, rows-g*inputs), o, n)
			}
		}
	})
}

// tiledRowsFits reports whether w's 16-row panels can take a transposing kernel: the scale unpackers gather with
// 32-bit offsets r·stride.
func tiledRowsFits(w QuantMatrix) bool {
	return (tileRows-1)*w.rowBytes <= math.MaxInt32
}
