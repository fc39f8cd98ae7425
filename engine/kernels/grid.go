package kernels

import (
	"encoding/binary"
	"unsafe"

	"github.com/layerstream/layerstream/quant"
)

// Products of the codebook i-quants (quant.GridTypes: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) with
// Q8_K activations, as llama.cpp pairs them. Each super-block is decoded into integers (quant.GridInts: weight j
// is d·sc[j/16]·q[j]), its product with the activations is exact in the integers,
//
//	isum = Σ_s sc[s]·Σ_{j in sixteenth s} q[j]·x[j]   (|q| ≤ 62, sc ≤ 31, |x| ≤ 127: within int32)
//
// and one float update per super-block adds float32(d·dx)·isum. The assembly row kernels (grid_amd64.s), which
// decode in registers, compute the same integers and float operations, so they give gridDot's bits; so do the
// tiled prompts, whose unpackers write the same codes and scales with and without assembly.

// gridIntsGo is isum for the decoded super-block q, sc and the 256 activations x.
func gridIntsGo(q *[quant.QKK]int8, x []int8, sc *[16]int32) int32 {
	x = x[:quant.QKK]
	var sum int32
	for s := range 16 {
		var p int32
		for j := 16 * s; j < 16*s+16; j++ {
			p += int32(q[j]) * int32(x[j])
		}
		sum += sc[s] * p
	}
	return sum
}

// gridScales are a super-block's scales as the assembly unpackers write them: per 32 elements, 16 words, the
// first sixteenth's scale in words 0-7, the second's in 8-15 (the row kernels' VPMADDWD operand).
type gridScales [8][16]int16

// sc returns the scale of sixteenth s.
func (v *gridScales) sc(s int) int32 { return int32(v[s/2][8*(s%2)]) }

// gridDot is the product of a row w of the codebook i-quant t with the Q8_K row x; with asm, by t's assembly row
// kernel (gridRowAsm), which decodes each super-block in registers and gives the same bits.
func gridDot(t quant.Type, asm bool, w []byte, x qActRow) float32 {
	if asm {
		return gridRowAsm(t, w, x)
	}
	if len(x.d) == 0 {
		return 0
	}
	var acc float32
	bb := len(w) / len(x.d)
	var q [quant.QKK]int8
	var sc [16]int32
	for b := range len(x.d) {
		d := quant.GridInts(t, &q, &sc, w[b*bb:(b+1)*bb])
		isum := gridIntsGo(&q, x.qs[quant.QKK*b:], &sc)
		acc += float32(float32(d*x.d[b]) * float32(isum))
	}
	return acc
}

// gridVNNIRows is the number of rows from which gridRows takes the integer sums of all the rows at once by AVX-512
// VNNI (gridIntsRows) rather than four at a time by AVX2 (gridInts4AVX2): its setup per super-block costs more
// below (thread CPU time of [8960×1536], IQ2_XXS, IQ3_S, IQ1_M: 4 rows 2.10-2.59 ms against 1.78-2.31; 8 rows
// 2.53-3.06 against 2.63-3.23; 32 rows 6.38-7.36 against 7.57-8.28; docs/performance-log.md).
const gridVNNIRows = 8

// gridRows sets y[r·ystride] (r < n ≤ rowsMost) to gridDot of w with the n consecutive Q8_K rows x spans,
// decoding each super-block once for all of them (with asm, by the assembly decoder, then from gridVNNIRows rows
// gridIntsRows where the CPU has AVX-512 VNNI, else gridInts4AVX2 for each four rows and gridIntsAVX2 for the
// rest: the row kernels' integers, so the same bits). Each row's float updates are gridDot's, in its order.
func gridRows(t quant.Type, asm bool, w []byte, x qActRow, n int, y []float32, ystride int) {
	var q [quant.QKK]int8
	var sc [16]int32
	var scv gridScales
	var acc [rowsMost]float32
	var isum [4]int32
	var isums [rowsMost]int32
	nb := len(x.d) / n
	bb := len(w) / nb
	_ = x.qs[n*nb*quant.QKK-1]
	for b := range nb {
		blk := w[b*bb : (b+1)*bb]
		var d float32
		if asm {
			gridDecodeAsm(t, blk, &q, &scv)
			d = quant.GridScale(t, blk)
		} else {
			d = quant.GridInts(t, &q, &sc, blk)
		}
		r, k := 0, b // k: row r's super-block b in x
		if asm && n >= gridVNNIRows && gridIntsRows(&q, &scv, &x.qs[quant.QKK*b], nb*quant.QKK, &x.bsums[16*b], n, &isums) {
			for ; r < n; r, k = r+1, k+nb {
				acc[r] += float32(float32(d*x.d[k]) * float32(isums[r]))
			}
		}
		for ; asm && r+4 <= n; r, k = r+4, k+4*nb {
			gridInts4AVX2(&q, &x.qs[quant.QKK*k], nb*quant.QKK, &scv, &isum)
			a, xd := (*[4]float32)(acc[r:r+4]), x.d[k:k+3*nb+1]
			a[0] += float32(float32(d*xd[0]) * float32(isum[0]))
			a[1] += float32(float32(d*xd[nb]) * float32(isum[1]))
			a[2] += float32(float32(d*xd[2*nb]) * float32(isum[2]))
			a[3] += float32(float32(d*xd[3*nb]) * float32(isum[3]))
		}
		for ; r < n; r, k = r+1, k+nb {
			var s int32
			if asm {
				s = gridIntsAVX2(&q, &x.qs[quant.QKK*k], &scv)
			} else {
				s = gridIntsGo(&q, x.qs[quant.QKK*k:], &sc)
			}
			acc[r] += float32(float32(d*x.d[k]) * float32(s))
		}
	}
	for r := range n {
		y[r*ystride] = acc[r]
	}
}

// gridRowsFrom is, where it is not 2, the number of input rows from which a codebook i-quant's assembly products
// decode each super-block once for all the rows (gridRows: quantKernel.rowsFrom) rather than run the row kernel,
// which decodes in registers, once per row: two IQ2_XXS or IQ2_XS rows cost more by gridRows (thread CPU time of [8960×1536]: 1.72
// ms against 1.52, 1.93 against 1.81; docs/performance-log.md).
var gridRowsFrom = map[quant.Type]int{quant.IQ2_XXS: 3, quant.IQ2_XS: 3}

// gridKernels are the codebook i-quants' kernels, with the assembly ones when asm is set.
func gridKernels(asm bool) map[quant.Type]*quantKernel {
	m := map[quant.Type]*quantKernel{}
	for _, t := range quant.GridTypes {
		m[t] = &quantKernel{act: actQ8_K, dot: func(w []byte, x qActRow) float32 { return gridDot(t, asm, w, x) },
			rows:     func(w []byte, x qActRow, n int, y []float32, ystride int) { gridRows(t, asm, w, x, n, y, ystride) },
			rowsFrom: 2}
		if asm {
			m[t].rowsFrom = max(2, gridRowsFrom[t])
		}
	}
	return m
}

// unpackGridTiled returns the tiled prompt unpacker of the codebook i-quant t: codes q + 128 (the 128 goes into
// mi as 128·sc, as IQ4_XS's does), its scales per sub-block of sub elements (32, or 16 where t has a scale per
// 16); by t's assembly unpacker where the CPU has AVX2.
func unpackGridTiled(t quant.Type, sub int) func(c codeDst, m metaDst, blk []byte) {
	return func(c codeDst, m metaDst, blk []byte) {
		var sc16, sc, mi [16]int32
		var d float32
		if useAVX2 {
			var scv gridScales
			gridUnpackAsm(t, blk, c, &scv)
			for s := range 16 {
				sc16[s] = scv.sc(s)
			}
			d = quant.GridScale(t, blk)
		} else {
			var q [quant.QKK]int8
			d = quant.GridInts(t, &q, &sc16, blk)
			qb := (*[quant.QKK]byte)(unsafe.Pointer(&q))
			for i := range quant.QKK / 4 { // byte k of quad i: element 4i+k
				c.set(i, binary.LittleEndian.Uint32(qb[4*i:])^0x80808080)
			}
		}
		step := sub / 16
		for s := range quant.QKK / sub {
			sc[s] = sc16[s*step]
			mi[s] = 128 * sc[s]
		}
		m.scales(&sc, &mi, d, d)
	}
}

// gridTiledSub is the tiled sub-block size of each codebook i-quant: 16 where its scales are per 16 elements.
var gridTiledSub = map[quant.Type]int{quant.IQ2_XXS: 32, quant.IQ2_XS: 16, quant.IQ2_S: 16, quant.IQ3_XXS: 32,
	quant.IQ3_S: 32, quant.IQ1_S: 32, quant.IQ1_M: 16}
