package kernels

import (
	"unsafe"

	"github.com/layerstream/layerstream/internal/grow"
	"github.com/layerstream/layerstream/quant"
)

// Panel layout. The transposing kernels (tiledrows.go) spend a fifth of their time putting 16 rows' codes and
// scales in the lanes of registers: loads of 16 rows, unpacks and shuffles, and the meta of each super-block
// built from its 16 headers. PackPanels rewrites a resident matrix once so that each 16-row panel holds, super-block
// after super-block, the registers those kernels build, in the order they build them: the panel kernels load them
// (one load a register), the same arithmetic bit for bit. A panel is then one contiguous stream that the core's
// prefetchers follow, where its rows were 16 streams a row apart. The bytes are those of the rows they replace
// (the layout is a permutation within each panel), so a matrix is packed in place, in the buffer it was loaded
// into. Measured on the 2-core Zen 5 VM (docs/performance-log.md, issue 40): an 8-row product of a [8960×1536]
// Q4_K matrix from memory went from 1.3-1.4× a one-row product to ~1.1×.

// panelFormat is a block type's panel layout and kernels. A panel is its super-blocks one after the other (block
// bytes each: the 16 rows' meta, then their codes), and a side part of side bytes a super-block (Q6_K's d), after
// them or, where that puts the super-blocks at the start of a cache line, before them (split).
type panelFormat struct {
	block, side int
	// runs are a super-block's registers in the order the kernels load them; sideAt is where in a row's
	// super-block the 2 bytes of each row that the side part holds are (with side 32).
	runs   []dwordRun
	sideAt int
	// kernels take panelIn inputs a call, building each super-block's meta at meta.
	kernels [3]panelKernel
	// run1 is kernels[0] over panels in a row, writing into the output: panels panels of nsb super-blocks
	// from data, pb bytes each, adding each one's 16 outputs to y.
	run1 func(data *byte, panels, nsb, pb int, meta, qs, ameta *byte, y *float32)
	// build and kept are kernels[2] for a panel's groups of inputs when there are several: build for the
	// first, keeping the panel's meta at meta (tiledFormat.metaBytes a super-block), kept for the others, which
	// read it (built in each call, it cost a prompt of 512 rows a third more on [1536×8960] Q6_K).
	build, kept panelKernel
	// tiledFrom, where set, is the number of input rows from which a product takes the tiled kernels (tiled.go),
	// as LinearQuant does for a matrix in rows (a prompt): Q6_K's panel kernels cost a 512-row product of a
	// [1536×8960] matrix a third more than they. tiled (set with it) writes a whole panel's tile
	// (tiledPanel.fill's codes and meta) from its super-blocks and side part.
	tiledFrom int
	tiled     func(blocks, side, codes, meta *byte, nsb int)
}

// panelIn are the numbers of input rows a panel kernel multiplies together: one (a decode step), then as the
// transposing kernels (tiledRowsIn), the last group padded with zero rows.
var panelIn = [3]int{1, 4, 8}

// panelKernel adds to acc[c·16 + r] the products of a panel's 16 rows (nsb super-blocks at blocks, their side
// parts at side) with its number of packed inputs (tiledRowsKernel's qs, ameta), building each super-block's
// meta into the scratch at meta; it prefetches the next panel from pf.
type panelKernel func(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

// Packs reports whether PackPanels packs matrices of type t on this CPU.
func Packs(t quant.Type) bool { return panelFormats[t] != nil }

// panelBytes is a panel's size: 16 rows.
func (w QuantMatrix) panelBytes() int { return tileRows * w.rowBytes }

// Panelled reports whether w is packed in panels (PackPanels).
func (w QuantMatrix) Panelled() bool { return w.panels != nil }

// PackPanels packs w's whole 16-row panels in place, in its own bytes, for the panel kernels, and returns it as a
// matrix in that layout (the rows past the last whole panel stay as they are). It returns w unchanged where this CPU
// has no panel kernels for w's type. The caller gives up w: its Data is no longer in rows; the returned matrix
// still reads its rows (Row, DequantizeRow), unpacking them.
func PackPanels(w QuantMatrix) QuantMatrix {
	f := panelFormats[w.Type]
	if f == nil || w.panels != nil || w.Cols%quant.QKK != 0 || w.Rows < tileRows || !tiledRowsFits(w) {
		return w
	}
	nsb, pb := w.Cols/quant.QKK, w.panelBytes()
	ParallelFor(w.Rows/tileRows, func(lo, hi int) { // the panels on every core: a model's load waits for them
		src := make([]byte, pb)
		for p := lo; p < hi; p++ {
			panel := w.Data[p*pb : (p+1)*pb]
			copy(src, panel)
			blocks, side := f.split(panel, nsb)
			f.movePanel(blocks, side, src, nsb, w.rowBytes, false)
		}
	})
	w.panels = f
	return w
}

// split returns a panel's super-blocks and side part: the super-blocks first where the panel starts a cache line,
// else the side part first where it ends one (a Q6_K panel of 35 super-blocks a row starts half a line in every
// other panel, and its side part is 35 half lines), so that the super-blocks do.
func (f *panelFormat) split(panel []byte, nsb int) (blocks, side []byte) {
	nb := nsb * f.block
	if f.side == 0 || uintptr(unsafe.Pointer(&panel[0]))%64 == 0 {
		return panel[:nb], panel[nb:]
	}
	return panel[len(panel)-nb:], panel[:len(panel)-nb]
}

// unpackRow writes row o of a packed matrix into dst (rowBytes), from its panel.
func (w QuantMatrix) unpackRow(dst []byte, o int) {
	p, r := o/tileRows, o%tileRows
	if p >= w.Rows/tileRows { // past the whole panels: as it was
		copy(dst, w.Data[o*w.rowBytes:(o+1)*w.rowBytes])
		return
	}
	nsb, pb := w.Cols/quant.QKK, w.panelBytes()
	rows := make([]byte, pb)
	blocks, side := w.panels.split(w.Data[p*pb:(p+1)*pb], nsb)
	w.panels.movePanel(blocks, side, rows, nsb, w.rowBytes, true)
	copy(dst, rows[r*w.rowBytes:(r+1)*w.rowBytes])
}

// dwordRun is n registers of a panel's super-block at byte at of it: register q's lane r holds dword q of the
// n·4 bytes at offset off of row r's super-block.
type dwordRun struct{ at, off, n int }

// q4Runs: the meta as K4META's TRANS4 gives it (the 16-byte headers: d, dmin, the scales: four registers), then
// the codes as the transposing kernel's T8TRANSPOSE (four groups of 32 bytes, eight registers each).
var q4Runs = []dwordRun{{0, 0, 4}, {256, 16, 8}, {768, 48, 8}, {1280, 80, 8}, {1792, 112, 8}}

// q6Runs: the meta as Q6META's first TRANS4 (the scales: four registers), then the codes as Q6PIECE's three T4
// of each piece 2n + h (ql's two 16-byte parts, qh's one); Q6_K's d (at 208) goes to the side part.
var q6Runs = func() []dwordRun {
	runs := []dwordRun{{0, 192, 4}}
	for n := range 2 {
		for h := range 2 {
			at := 256 + (2*n+h)*768
			runs = append(runs, dwordRun{at, 64*n + 16*h, 4}, dwordRun{at + 256, 64*n + 32 + 16*h, 4},
				dwordRun{at + 512, 128 + 32*n + 16*h, 4})
		}
	}
	return runs
}()

// moveBlock moves one super-block of the 16 rows at rows (row r at rows[r·stride:]) between its rows and its
// panel layout, block and side: into the layout (packing), or with toRows back into the rows.
func (f *panelFormat) moveBlock(block, side, rows []byte, stride int, toRows bool) {
	for _, run := range f.runs {
		moveDwords(block[run.at:], rows, stride, run.off, run.n, toRows)
	}
	for r := range f.side / 2 {
		inRow, inSide := rows[r*stride+f.sideAt:][:2], side[2*r:][:2]
		if toRows {
			copy(inRow, inSide)
		} else {
			copy(inSide, inRow)
		}
	}
}

// moveDwords moves n registers' dwords between regs and the 16 rows at rows (row r at rows[r·stride+off:]):
// register q's lane r (at regs[(q·16 + r)·4:]) is dword q of row r; toRows says which way.
func moveDwords(regs, rows []byte, stride, off, n int, toRows bool) {
	reg := unsafe.Slice((*uint32)(unsafe.Pointer(&regs[0])), n*tileRows)
	for r := range tileRows {
		row := unsafe.Slice((*uint32)(unsafe.Pointer(&rows[r*stride+off])), n)
		for q := range row {
			if toRows {
				row[q] = reg[q*tileRows+r]
			} else {
				reg[q*tileRows+r] = row[q]
			}
		}
	}
}

// linearPanels is LinearQuant for a matrix in panels: the panel kernels over its whole panels, and over the rows
// after them packed into a panel on the way (zero rows to 16).
func linearPanels(y, x []float32, w QuantMatrix, bias []float32) {
	rows := len(x) / w.Cols
	if rows == 0 {
		return
	}
	if f := rowsKernels[w.Type].tiled; w.panels.tiledFrom > 0 && rows >= w.panels.tiledFrom {
		linearTiled(y, x, w, bias, f, f.asmKernel) // each panel's tile written from it (tiledPanel.fill)
		return
	}
	k := 0
	for k < len(panelIn)-1 && rows > panelIn[k] {
		k++
	}
	pp := panelProduct{y: y, w: w, bias: bias, rows: rows, k: k, f: rowsKernels[w.Type].tiled}
	pp.t = packedInputs(w, x, rows, pp.f, panelIn[k])
	defer tiledPool.Put(pp.t)
	whole := w.Rows / tileRows
	parallelFor((w.Rows+tileRows-1)/tileRows, 0, func(lo, hi int) {
		p := panelPool.Get().(*tiledPanel)
		defer panelPool.Put(p)
		if rows == 1 && lo < whole { // a decode step: the whole panels in one call
			pp.run1(p, lo, min(hi, whole))
			lo = min(hi, whole)
		}
		for pi := lo; pi < hi; pi++ {
			pp.panel(p, pi)
		}
	})
}

// panelProduct is one product of linearPanels: its matrix, output, inputs packed for its kernels (panelIn[k] a
// group).
type panelProduct struct {
	y, bias []float32
	w       QuantMatrix
	f       *tiledFormat
	t       *tiledActs
	rows, k int
}

// run1 computes the outputs of the whole panels lo..hi-1 for one input row in one call (panelFormat.run1).
func (pp *panelProduct) run1(p *tiledPanel, lo, hi int) {
	w, nb := pp.w, pp.w.Cols/pp.f.block
	p.meta = grow.Slice(p.meta, pp.f.metaBytes())
	yr := pp.y[lo*tileRows : hi*tileRows]
	clear(yr)
	w.panels.run1(&w.Data[lo*w.panelBytes()], hi-lo, nb, w.panelBytes(), &p.meta[0], &pp.t.qs[0], &pp.t.meta[0], &yr[0])
	if pp.bias != nil { // after the products, as storeTile adds it
		addBias(yr, pp.bias[lo*tileRows:hi*tileRows], 1, len(yr))
	}
}

// panel computes the outputs of panel pi (the rows past the whole panels packed into one first) for every group
// of inputs.
func (pp *panelProduct) panel(p *tiledPanel, pi int) {
	w, pf, nb, pb := pp.w, pp.w.panels, pp.w.Cols/pp.f.block, pp.w.panelBytes()
	inputs := panelIn[pp.k]
	groups := (pp.rows + inputs - 1) / inputs
	gq, gm := w.Cols*inputs, nb*pp.f.actMetaBytes(inputs)
	metaSBs := 1 // each call builds a super-block's meta at a time
	if groups > 1 && pf.build != nil {
		metaSBs = nb // the panel's, kept from its first group to the others
	}
	p.meta = grow.Slice(p.meta, metaSBs*pp.f.metaBytes())
	o, whole := pi*tileRows, w.Rows/tileRows
	n := min(tileRows, w.Rows-o)
	var blocks, side, next []byte
	if pi < whole {
		blocks, side = pf.split(w.Data[pi*pb:(pi+1)*pb], nb)
		next = w.Data[min(pi+1, whole-1)*pb:] // prefetches never fault: a panel's own, at the end
	} else {
		blocks, side = w.tailPanel(p, o)
		next = blocks
	}
	acc := p.acc[:8*tileRows]
	for g := range groups {
		kernel := pf.kernels[pp.k]
		switch {
		case groups > 1 && g == 0 && pf.build != nil:
			kernel = pf.build
		case groups > 1 && pf.kept != nil:
			kernel = pf.kept
		}
		clear(acc)
		kernel(&blocks[0], sidePtr(side), &p.meta[0], &pp.t.qs[g*gq], &pp.t.meta[g*gm], nb, &acc[0], &next[0])
		storeTile(pp.y, acc, pp.bias, w.Rows, g*inputs, min(inputs, pp.rows-g*inputs), o, n)
	}
}

// movePanel moves a panel's 16 rows (nsb super-blocks each, stride bytes a row) between rows and the panel's
// super-blocks and side part (moveBlock, super-block by super-block): packing it, or with toRows unpacking it.
func (f *panelFormat) movePanel(blocks, side, rows []byte, nsb, stride int, toRows bool) {
	bb := stride / nsb
	for s := range nsb {
		f.moveBlock(blocks[s*f.block:(s+1)*f.block], side[s*f.side:(s+1)*f.side], rows[s*bb:], stride, toRows)
	}
}

// sidePtr is a kernel's pointer to a side part (nil when the type has none).
func sidePtr(side []byte) *byte {
	if len(side) == 0 {
		return nil
	}
	return &side[0]
}

// tailPanel packs the rows of w from o on (fewer than 16, after its whole panels) into a panel in p's scratch,
// padded with zero blocks (zero scales, zero products), and returns its super-blocks and side part.
func (w QuantMatrix) tailPanel(p *tiledPanel, o int) (blocks, side []byte) {
	f, nsb, pb := w.panels, w.Cols/quant.QKK, w.panelBytes()
	p.codes = grow.Slice(p.codes, 2*pb)
	src, dst := p.codes[:pb], p.codes[pb:]
	clear(src[copy(src, w.Data[o*w.rowBytes:]):])
	blocks, side = dst[:nsb*f.block], dst[nsb*f.block:]
	f.movePanel(blocks, side, src, nsb, w.rowBytes, false)
	return blocks, side
}
