package kernels

import (
	"github.com/layerstream/layerstream/quant"
	"golang.org/x/sys/cpu"
)

//go:noescape
func octsQ5_KVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func octsQ2_KVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func octsQ3_KVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func rowsQ5_KVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func rowsQ8_0VNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func rowQ8_0VNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

//go:noescape
func rowsQ4_0VNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func rowQ4_0VNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

//go:noescape
func rowsQ5_0VNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func rowQ5_0VNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

//go:noescape
func rowsIQ4_NLVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func rowIQ4_NLVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

//go:noescape
func rowsQ4_1VNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func rowQ4_1VNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

//go:noescape
func rowsQ5_1VNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func rowQ5_1VNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

//go:noescape
func rowsIQ4_XSVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func rowIQ4_XSVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

//go:noescape
func rowsQ2_KVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func rowQ2_KVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

//go:noescape
func rowsQ3_KVNNI(w *byte, nout, nst int, qs *int8, xstride, nq int, ameta *byte, rows int, y *float32, ystride int, acc *float32)

//go:noescape
func rowQ3_KVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

//go:noescape
func rowQ4_KVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

//go:noescape
func rowQ5_KVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

//go:noescape
func rowQ6_KVNNI(w *byte, nout, nst int, qs *int8, ameta *byte, y *float32)

// rowsAsm returns the rows kernels (rows.go) the CPU can run, several rows and one: AVX-512 VNNI (and BW, for the
// word operations).
func rowsAsm() map[quant.Type]rowsKernelPair {
	if !useVNNI {
		return nil
	}
	m := map[quant.Type]rowsKernelPair{
		quant.Q4_K:   {nil, rowQ4_KVNNI, 2}, // several rows: its transposing kernel (tiledRowsAsm)
		quant.Q5_K:   {rowsQ5_KVNNI, rowQ5_KVNNI, 29},
		quant.Q6_K:   {nil, rowQ6_KVNNI, 2},
		quant.Q2_K:   {rowsQ2_KVNNI, rowQ2_KVNNI, 14},
		quant.Q3_K:   {rowsQ3_KVNNI, rowQ3_KVNNI, 14},
		quant.Q8_0:   {rowsQ8_0VNNI, rowQ8_0VNNI, 10},
		quant.Q4_0:   {rowsQ4_0VNNI, rowQ4_0VNNI, 10},
		quant.Q5_0:   {rowsQ5_0VNNI, rowQ5_0VNNI, 10},
		quant.IQ4_NL: {rowsIQ4_NLVNNI, rowIQ4_NLVNNI, 10},
		quant.Q4_1:   {rowsQ4_1VNNI, rowQ4_1VNNI, 8},
		quant.Q5_1:   {rowsQ5_1VNNI, rowQ5_1VNNI, 8},
	}
	if cpu.X86.HasBMI2 { // IQ4_XS's scales spread by PDEP
		m[quant.IQ4_XS] = rowsKernelPair{rowsIQ4_XSVNNI, rowIQ4_XSVNNI, rowsMost} // its tiled unpacking is Go: 9 ms for 12 rows of [8960×1536]
	}
	return m
}

// rowsOctAsm returns the rows kernels of eight input rows at a time (rows.go's rowsOct) the CPU can run.
func rowsOctAsm() map[quant.Type]quantRowsKernel {
	if !useVNNI {
		return nil
	}
	return map[quant.Type]quantRowsKernel{
		quant.Q5_K: octsQ5_KVNNI,
		quant.Q3_K: octsQ3_KVNNI, quant.Q2_K: octsQ2_KVNNI,
	}
}

//go:noescape
func tiledRowsQ4_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

//go:noescape
func tiledRowsQ6_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

//go:noescape
func tiledRows4Q4_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

//go:noescape
func tiledRows4Q6_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

//go:noescape
func tiledRowsPanelQ4_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

//go:noescape
func tiledRowsPanelQ6_KVNNI(w *byte, stride int, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

// tiledRowsAsm returns the transposing tiled kernels (tiledrows.go) the CPU can run.
func tiledRowsAsm() map[quant.Type]transKernel {
	if !useVNNI {
		return nil
	}
	return map[quant.Type]transKernel{
		quant.Q4_K: {[2]tiledRowsKernel{tiledRows4Q4_KVNNI, tiledRowsQ4_KVNNI}, tiledRowsPanelQ4_KVNNI, 2, 65},
		quant.Q6_K: {[2]tiledRowsKernel{tiledRows4Q6_KVNNI, tiledRowsQ6_KVNNI}, tiledRowsPanelQ6_KVNNI, 2, 65},
	}
}

//go:noescape
func panelsRun1Q4_KVNNI(data *byte, panels, nsb, pb int, meta, qs, ameta *byte, y *float32)

//go:noescape
func panelsRun1Q6_KVNNI(data *byte, panels, nsb, pb int, meta, qs, ameta *byte, y *float32)

//go:noescape
func panelsTiledQ6_K(blocks, side, codes, meta *byte, nsb int)

//go:noescape
func panelsBuildQ4_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

//go:noescape
func panelsKeptQ4_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

//go:noescape
func panels1Q4_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

//go:noescape
func panels1Q6_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

//go:noescape
func panelsQ4_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

//go:noescape
func panels4Q4_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

//go:noescape
func panelsQ6_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

//go:noescape
func panels4Q6_KVNNI(blocks, side, meta, qs, ameta *byte, nsb int, acc *float32, pf *byte)

// panelsAsm returns the panel kernels (panels.go) the CPU can run.
func panelsAsm() map[quant.Type]*panelFormat {
	if !useVNNI {
		return nil
	}
	return map[quant.Type]*panelFormat{
		quant.Q4_K: {block: 2304, runs: q4Runs, kernels: [3]panelKernel{panels1Q4_KVNNI, panels4Q4_KVNNI, panelsQ4_KVNNI}, run1: panelsRun1Q4_KVNNI,
			build: panelsBuildQ4_KVNNI, kept: panelsKeptQ4_KVNNI},
		quant.Q6_K: {block: 3328, side: 32, runs: q6Runs, sideAt: 208, tiledFrom: 192, kernels: [3]panelKernel{panels1Q6_KVNNI, panels4Q6_KVNNI, panelsQ6_KVNNI}, run1: panelsRun1Q6_KVNNI, tiled: panelsTiledQ6_K},
	}
}
