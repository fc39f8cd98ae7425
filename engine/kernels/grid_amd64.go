package kernels

import "github.com/layerstream/layerstream/quant"

// The per-format row kernels (grid_amd64.s): gridDot of the row w (nb super-blocks) with the Q8_K activations x
// and their scales xd, each super-block decoded in registers.
//
//go:noescape
func gridRowIQ2XXS(w *byte, x *int8, xd *float32, nb int) float32

//go:noescape
func gridRowIQ2XS(w *byte, x *int8, xd *float32, nb int) float32

//go:noescape
func gridRowIQ2S(w *byte, x *int8, xd *float32, nb int) float32

//go:noescape
func gridRowIQ3XXS(w *byte, x *int8, xd *float32, nb int) float32

//go:noescape
func gridRowIQ3S(w *byte, x *int8, xd *float32, nb int) float32

//go:noescape
func gridRowIQ1S(w *byte, x *int8, xd *float32, nb int) float32

//go:noescape
func gridRowIQ1M(w *byte, x *int8, xd *float32, nb int) float32

// The per-format decoders (grid_amd64.s): the super-block at b as signed codes q (quant.GridInts's) and its
// scale vectors, for gridIntsAVX2.
//
//go:noescape
func gridDecodeIQ2XXS(b *byte, q *int8, scv *int16)

//go:noescape
func gridDecodeIQ2XS(b *byte, q *int8, scv *int16)

//go:noescape
func gridDecodeIQ2S(b *byte, q *int8, scv *int16)

//go:noescape
func gridDecodeIQ3XXS(b *byte, q *int8, scv *int16)

//go:noescape
func gridDecodeIQ3S(b *byte, q *int8, scv *int16)

//go:noescape
func gridDecodeIQ1S(b *byte, q *int8, scv *int16)

//go:noescape
func gridDecodeIQ1M(b *byte, q *int8, scv *int16)

// gridIntsAVX2 is gridIntsGo of a super-block decoded by gridDecodeAsm (q, scv) and the 256 activations at x.
//
//go:noescape
func gridIntsAVX2(q *[quant.QKK]int8, x *int8, scv *gridScales) int32

// gridInts4AVX2 sets out[r] to gridIntsAVX2 of q, scv and the activations at x + r·stride, r < 4.
//
//go:noescape
func gridInts4AVX2(q *[quant.QKK]int8, x *int8, stride int, scv *gridScales, out *[4]int32)

// gridIntsRowsVNNI sets out[r] to gridIntsAVX2 of q, scv and the activations at x + r·xstride, r < n (n ≥ 1), by
// AVX-512 VNNI: the codes + 128 against the rows, less 128 times the row's sums of 16 (at bsums + r·bstride bytes)
// times their scales.
//
//go:noescape
func gridIntsRowsVNNI(q *[quant.QKK]int8, scv *gridScales, x *int8, xstride int, bsums *int16, bstride int, n int, out *int32)

// gridIntsRows sets out[r] to gridIntsAVX2 of q, scv and the activations at x + r·xstride bytes, r < n, whose
// sums of 16 are at bsums + r·xstride/8 bytes (Q8_K: one int16 per 16 values), by gridIntsRowsVNNI; it reports
// false, doing nothing, where the CPU has no AVX-512 VNNI.
func gridIntsRows(q *[quant.QKK]int8, scv *gridScales, x *int8, xstride int, bsums *int16, n int, out *[rowsMost]int32) bool {
	if !useVNNI {
		return false
	}
	gridIntsRowsVNNI(q, scv, x, xstride, bsums, xstride/8, n, &out[:n][0])
	return true
}

// gridQuadsAVX2 sets out[i] to the sum of the four products q[4i+j]·x[4i+j], j < 4, of a decoded super-block and
// the 256 activations at x (quadsOf, for kQuadFormat).
//
//go:noescape
func gridQuadsAVX2(q *[quant.QKK]int8, x *int8, out *[64]int32)

// gridDecodeAsm decodes the super-block b of the codebook i-quant t into q and scv, by t's decoder.
func gridDecodeAsm(t quant.Type, b []byte, q *[quant.QKK]int8, scv *gridScales) {
	f, _ := t.Format()
	bp, qp, sp := &b[:f.BlockBytes][0], &q[0], &scv[0][0]
	switch t {
	case quant.IQ2_XXS:
		gridDecodeIQ2XXS(bp, qp, sp)
	case quant.IQ2_XS:
		gridDecodeIQ2XS(bp, qp, sp)
	case quant.IQ2_S:
		gridDecodeIQ2S(bp, qp, sp)
	case quant.IQ3_XXS:
		gridDecodeIQ3XXS(bp, qp, sp)
	case quant.IQ3_S:
		gridDecodeIQ3S(bp, qp, sp)
	case quant.IQ1_S:
		gridDecodeIQ1S(bp, qp, sp)
	case quant.IQ1_M:
		gridDecodeIQ1M(bp, qp, sp)
	default:
		panic("kernels: no assembly decoder for " + t.String())
	}
}

// The tables the assembly kernels read: the grids (copies of quant's), and 7-bit signs as ±1 bytes.
var (
	iq2xxsGrid = quant.IQ2XXSGrid
	iq2xsGrid  = quant.IQ2XSGrid
	iq2sGrid   = quant.IQ2SGrid
	iq3xxsGrid = quant.IQ3XXSGrid
	iq3sGrid   = quant.IQ3SGrid
	iq1Codes   = quant.IQ1Codes
	// ksignPM[s] has byte j −1 where quant.KSigns(s) negates weight j (ggml's ksigns_iq2xs: the 7 bits of s and
	// their parity as the eighth), else +1: the sign mask with every byte's low bit set.
	ksignPM = func() (m [128]uint64) {
		for s := range m {
			m[s] = quant.KSignMask(s) | 0x0101010101010101
		}
		return m
	}()
)

// gridRowAsm is gridDot of the row w of the codebook i-quant t with x, by t's row kernel: w holds len(x.d)
// super-blocks and x.qs 256 activations for each (NewQuantMatrix's sizes and qAct guarantee them; checked here).
func gridRowAsm(t quant.Type, w []byte, x qActRow) float32 {
	nb := len(x.d)
	if nb == 0 {
		return 0
	}
	f, _ := t.Format()
	wp, xp, dp := &w[:nb*f.BlockBytes][0], &x.qs[:nb*quant.QKK][0], &x.d[0]
	switch t {
	case quant.IQ2_XXS:
		return gridRowIQ2XXS(wp, xp, dp, nb)
	case quant.IQ2_XS:
		return gridRowIQ2XS(wp, xp, dp, nb)
	case quant.IQ2_S:
		return gridRowIQ2S(wp, xp, dp, nb)
	case quant.IQ3_XXS:
		return gridRowIQ3XXS(wp, xp, dp, nb)
	case quant.IQ3_S:
		return gridRowIQ3S(wp, xp, dp, nb)
	case quant.IQ1_S:
		return gridRowIQ1S(wp, xp, dp, nb)
	case quant.IQ1_M:
		return gridRowIQ1M(wp, xp, dp, nb)
	}
	panic("kernels: no assembly kernel for " + t.String())
}

// The per-format tiled-prompt unpackers (grid_amd64.s): the super-block at b as tiled codes (quant.GridInts's
// q + 128) of one row of a panel (codes: its quad 0, tiled.go's codeDst) and its scale vectors.
//
//go:noescape
func gridUnpackIQ2XXS(b *byte, codes *byte, scv *int16)

//go:noescape
func gridUnpackIQ2XS(b *byte, codes *byte, scv *int16)

//go:noescape
func gridUnpackIQ2S(b *byte, codes *byte, scv *int16)

//go:noescape
func gridUnpackIQ3XXS(b *byte, codes *byte, scv *int16)

//go:noescape
func gridUnpackIQ3S(b *byte, codes *byte, scv *int16)

//go:noescape
func gridUnpackIQ1S(b *byte, codes *byte, scv *int16)

//go:noescape
func gridUnpackIQ1M(b *byte, codes *byte, scv *int16)

// gridUnpackAsm writes the super-block b of the codebook i-quant t as the tiled codes at c and its scales into
// scv, by t's unpacker.
func gridUnpackAsm(t quant.Type, b []byte, c codeDst, scv *gridScales) {
	f, _ := t.Format()
	bp, cp, sp := &b[:f.BlockBytes][0], (*byte)(c.p), &scv[0][0]
	switch t {
	case quant.IQ2_XXS:
		gridUnpackIQ2XXS(bp, cp, sp)
	case quant.IQ2_XS:
		gridUnpackIQ2XS(bp, cp, sp)
	case quant.IQ2_S:
		gridUnpackIQ2S(bp, cp, sp)
	case quant.IQ3_XXS:
		gridUnpackIQ3XXS(bp, cp, sp)
	case quant.IQ3_S:
		gridUnpackIQ3S(bp, cp, sp)
	case quant.IQ1_S:
		gridUnpackIQ1S(bp, cp, sp)
	case quant.IQ1_M:
		gridUnpackIQ1M(bp, cp, sp)
	default:
		panic("kernels: no assembly unpacker for " + t.String())
	}
}
