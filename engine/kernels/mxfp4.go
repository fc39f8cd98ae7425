package kernels

import (
	"sync"

	"github.com/layerstream/layerstream/quant"
)

// MXFP4 matrices (gpt-oss's experts) are multiplied by float32 inputs, not by inputs quantized to 8 bits as the
// other block formats are: an MXFP4 weight is an E2M1 value times a power of two, exact in float32, so the
// product computes what a float32 product with the decoded matrix would (transformers dequantizes gpt-oss's
// experts and multiplies in the model's dtype), where 8-bit inputs would add their own rounding. Each block's 32
// weights are decoded (quant.MXFP4Values · quant.MXFP4Scale, exact) and multiplied into two sets of 16 float32
// lanes: lane l of the first adds x[l]·w[l] of every block, lane l of the second x[16+l]·w[16+l] (a multiply, then
// an add: never fused; two sets, so that two chains of additions run at once), the second set is added to the
// first and the 16 lanes summed as hsum16 does. The assembly kernels (AVX-512) compute the same operations in the same order, bit for
// bit; the four-row kernels give each input row what the one-row kernel gives it.

// mxfp4BlockBytes is the size of one MXFP4 block: the scale byte and 16 bytes of nibbles.
const mxfp4BlockBytes = 1 + quant.QK/2

// mxfp4Lanes are one input row's 16 lane sums.
type mxfp4Lanes = [16]float32

// mxfp4Dot1Go sets acc to the lanes of weight row w (whole MXFP4 blocks) times x (len(w)/17·32 values).
func mxfp4Dot1Go(w []byte, x []float32, acc *mxfp4Lanes) {
	var a, b mxfp4Lanes
	for k := range len(w) / mxfp4BlockBytes {
		blk, xb := w[k*mxfp4BlockBytes:][:mxfp4BlockBytes], x[k*quant.QK:][:quant.QK]
		d := quant.MXFP4Scale[blk[0]]
		for l, q := range blk[1:] {
			lo, hi := float32(quant.MXFP4Values[q&0xf])*d, float32(quant.MXFP4Values[q>>4])*d
			a[l] += float32(xb[l] * lo)
			b[l] += float32(xb[16+l] * hi)
		}
	}
	for l := range acc {
		acc[l] = a[l] + b[l]
	}
}

// mxfp4Dot4Go sets acc[i] to the lanes of w times input row i of four, row i at x[i·ldx:], each as
// mxfp4Dot1Go computes it: the block's weights are decoded once for the four.
func mxfp4Dot4Go(w []byte, x []float32, ldx int, acc *[4]mxfp4Lanes) {
	var a, b [4]mxfp4Lanes
	var wv [32]float32
	for k := range len(w) / mxfp4BlockBytes {
		blk := w[k*mxfp4BlockBytes:][:mxfp4BlockBytes]
		d := quant.MXFP4Scale[blk[0]]
		for l, q := range blk[1:] {
			wv[l], wv[16+l] = float32(quant.MXFP4Values[q&0xf])*d, float32(quant.MXFP4Values[q>>4])*d
		}
		for i := range acc {
			xb := x[i*ldx+k*quant.QK:][:quant.QK]
			for l := range 16 {
				a[i][l] += float32(xb[l] * wv[l])
				b[i][l] += float32(xb[16+l] * wv[16+l])
			}
		}
	}
	for i := range acc {
		for l := range acc[i] {
			acc[i][l] = a[i][l] + b[i][l]
		}
	}
}

// mxfp4Rows4Go sets acc[i] to the lanes of weight row i of four (row i at w[i·stride:]) times x, each as
// mxfp4Dot1Go computes it.
func mxfp4Rows4Go(w []byte, stride int, x []float32, acc *[4]mxfp4Lanes) {
	n := len(x) / quant.QK * mxfp4BlockBytes
	for i := range acc {
		mxfp4Dot1Go(w[i*stride:][:n], x, &acc[i])
	}
}

// hsum16 sums the 16 lanes pairwise, halves first: (a[i] + a[i+8]), then those four apart, two apart, one apart.
func hsum16(a *mxfp4Lanes) float32 {
	var s [8]float32
	for i := range 8 {
		s[i] = a[i] + a[i+8]
	}
	for i := range 4 {
		s[i] += s[i+4]
	}
	s[0], s[1] = s[0]+s[2], s[1]+s[3]
	return s[0] + s[1]
}

// mxfp4Kernels are the kernels linearMXFP4 uses: one weight row times one input row, four weight rows times one
// input row (rows4: a decode step's), one weight row times four input rows (four: a prompt's); the assembly ones
// where the CPU has AVX-512, else the Go ones (which they equal bit for bit).
type mxfp4Kernels struct {
	one   func(w []byte, x []float32, acc *mxfp4Lanes)
	rows4 func(w []byte, stride int, x []float32, acc *[4]mxfp4Lanes)
	four  func(w []byte, x []float32, ldx int, acc *[4]mxfp4Lanes)
	// padFour says whether a four padded with zero rows can cost less than one to three rows one at a time
	// (mxfp4PadRows).
	padFour bool
}

var mxfp4Go = mxfp4Kernels{one: mxfp4Dot1Go, rows4: mxfp4Rows4Go, four: mxfp4Dot4Go}

// mxfp4TileRows is the number of weight rows each group of four input rows sweeps before the next group: a
// few tens of KB, so that the group's inputs stay in L1 over the tile and the tile's rows in L2 over the groups
// (sweeping every weight row per group re-read a prompt's 16 rows, 184 KB at gpt-oss's 2880, from L2 for each
// weight row: 3× slower per row than 4 rows).
const mxfp4TileRows = 16

// mxfp4PadRows says whether linearMXFP4 multiplies the last rows%4 input rows as a four padded with zero rows
// rather than one at a time, with kernels whose padded four costs less (padFour: the assembly ones): where they are
// all the rows (the one-row kernels read four weight rows at a time from memory, slower than the four-row kernel
// with its padding: thread CPU time of [8960×1536], 1 row 1.46-1.57 ms, 2 rows 1.80-1.94, 3 rows 2.29-2.44, a
// padded four 1.01-1.22; docs/performance-log.md) or three of them (7 rows 2.63 ms against 2.77; 5 and 6 rows
// cost more padded).
func mxfp4PadRows(rows int) bool { return rows < 4 || rows%4 == 3 }

var mxfp4Pad = sync.Pool{New: func() any { return new([]float32) }}

// linearMXFP4 is LinearQuant for an MXFP4 matrix (see the top of this file), with kernels k: tiles of weight
// rows, each swept by the input rows four at a time, then the rest (mxfp4PadRows) as a four padded with zero
// rows or one at a time (four weight rows at a time).
func linearMXFP4(y, x []float32, w QuantMatrix, bias []float32, k mxfp4Kernels) {
	in, out := w.Cols, w.Rows
	rows := len(x) / in
	var pad []float32 // the last rows, padded to a four
	if rows%4 != 0 && k.padFour && mxfp4PadRows(rows) {
		p, xp := scratch[float32](&mxfp4Pad, 4*in)
		defer mxfp4Pad.Put(p)
		clear(xp[copy(xp, x[rows/4*4*in:rows*in]):])
		pad = xp
	}
	ParallelFor(out, func(lo, hi int) {
		var acc [4]mxfp4Lanes
		for o0 := lo; o0 < hi; o0 += mxfp4TileRows {
			o1 := min(o0+mxfp4TileRows, hi)
			r := 0
			for ; r+4 <= rows; r += 4 {
				for o := o0; o < o1; o++ {
					k.four(w.Row(o), x[r*in:(r+4)*in], in, &acc)
					for i := range acc {
						y[(r+i)*out+o] = hsum16(&acc[i])
					}
				}
			}
			if pad != nil {
				for o := o0; o < o1; o++ {
					k.four(w.Row(o), pad, in, &acc)
					for i := range rows - r {
						y[(r+i)*out+o] = hsum16(&acc[i])
					}
				}
				r = rows
			}
			for ; r < rows; r++ {
				xr := x[r*in : (r+1)*in]
				o := o0
				for ; o+4 <= o1; o += 4 {
					k.rows4(w.Data[o*w.rowBytes:], w.rowBytes, xr, &acc)
					for i := range acc {
						y[r*out+o+i] = hsum16(&acc[i])
					}
				}
				for ; o < o1; o++ {
					k.one(w.Row(o), xr, &acc[0])
					y[r*out+o] = hsum16(&acc[0])
				}
			}
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
