package kernels

import (
	"unsafe"

	"github.com/layerstream/layerstream/engine/kernels/internal/asmgen"
	"github.com/layerstream/layerstream/internal/grow"
)

// expConsts are the constants of the vectorized exp (attn_amd64.s loads them by broadcast).
var expConsts = asmgen.ExpConsts

//go:noescape
func siluAVX512(y, x *float32, n int)

//go:noescape
func geluTanhAVX512(y, x *float32, n int)

//go:noescape
func softCapAVX512(y, x *float32, n int, c float32)

//go:noescape
func addAVX512(y, x, b *float32, n int)

//go:noescape
func mulAVX512(y, x, b *float32, n int)

//go:noescape
func scaleRowAVX512(y, x, b *float32, n int, scale, offset float32)

//go:noescape
func sumSquaresAVX512(x *float32, n int) float64

//go:noescape
func softmaxRowAVX512(s *float32, n int, scale, softcap, mOld float32) (mNew, sum float32)

//go:noescape
func pvAVX512r1c1(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r1c2(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r1c3(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r1c4(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r2c1(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r2c2(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r2c3(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r2c4(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r3c1(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r3c2(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r3c3(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r3c4(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r4c1(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r4c2(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r4c3(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r4c4(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r5c1(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r5c2(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r5c3(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r5c4(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r6c1(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r6c2(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r6c3(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvAVX512r6c4(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int)

//go:noescape
func pvF16AVX512r1c1(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r1c2(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r1c3(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r1c4(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r2c1(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r2c2(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r2c3(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r2c4(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r3c1(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r3c2(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r3c3(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r3c4(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r4c1(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r4c2(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r4c3(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r4c4(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r5c1(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r5c2(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r5c3(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r5c4(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r6c1(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r6c2(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r6c3(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

//go:noescape
func pvF16AVX512r6c4(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int)

// pvF16Kernels are pvKernels for a float16 cache's values.
var pvF16Kernels = [asmgen.PVRows][asmgen.PVCols]func(o *float32, ldo int, p *float32, ldp int, v *uint16, ldv int, keys int){
	{pvF16AVX512r1c1, pvF16AVX512r1c2, pvF16AVX512r1c3, pvF16AVX512r1c4},
	{pvF16AVX512r2c1, pvF16AVX512r2c2, pvF16AVX512r2c3, pvF16AVX512r2c4},
	{pvF16AVX512r3c1, pvF16AVX512r3c2, pvF16AVX512r3c3, pvF16AVX512r3c4},
	{pvF16AVX512r4c1, pvF16AVX512r4c2, pvF16AVX512r4c3, pvF16AVX512r4c4},
	{pvF16AVX512r5c1, pvF16AVX512r5c2, pvF16AVX512r5c3, pvF16AVX512r5c4},
	{pvF16AVX512r6c1, pvF16AVX512r6c2, pvF16AVX512r6c3, pvF16AVX512r6c4},
}

// pvKernels[r-1][c-1] adds the weighted values of a block to a tile of r query rows and 16·c columns.
var pvKernels = [asmgen.PVRows][asmgen.PVCols]func(o *float32, ldo int, p *float32, ldp int, v *float32, ldv int, keys int){
	{pvAVX512r1c1, pvAVX512r1c2, pvAVX512r1c3, pvAVX512r1c4},
	{pvAVX512r2c1, pvAVX512r2c2, pvAVX512r2c3, pvAVX512r2c4},
	{pvAVX512r3c1, pvAVX512r3c2, pvAVX512r3c3, pvAVX512r3c4},
	{pvAVX512r4c1, pvAVX512r4c2, pvAVX512r4c3, pvAVX512r4c4},
	{pvAVX512r5c1, pvAVX512r5c2, pvAVX512r5c3, pvAVX512r5c4},
	{pvAVX512r6c1, pvAVX512r6c2, pvAVX512r6c3, pvAVX512r6c4},
}

// scoresAVX512 sets the tile's scores sc[r·attnBlock+j] = q_r·k_j for its rows (packed in s.qp) and the n
// keys (rows of d, a multiple of 16), with the matrix-product tiles (tileScores).
func (s *attnScratch) scoresAVX512(rows, d int, keys []float32, n int) {
	tileScores(s, rows, d, keys, n, &s.kpad, gemmF32AVX512)
}

// scoresF16AVX512 is scoresAVX512 for a float16 cache's keys, widened as the tiles load them.
func (s *attnScratch) scoresF16AVX512(rows, d int, keys []uint16, n int) {
	tileScores(s, rows, d, keys, n, &s.kpad16, gemmF32F16AVX512)
}

// tileScores is the scores of the tile's rows against n keys of element type T, with gemm, the tiles for T: the
// last keys, when n is not a multiple of gemmGroup, from a zero-padded copy in pad (their columns of sc, past n,
// are not used).
func tileScores[T float32 | uint16](s *attnScratch, rows, d int, keys []T, n int, pad *[]T,
	gemm func(x *float32, xs, xc, xt, rows int, w *T, ws, wc, chunks int, tail uint64, y *float32, ldy int)) {
	size := int(unsafe.Sizeof(keys[0]))
	xt := gemmTileRows * d * 4
	full := n / gemmGroup * gemmGroup
	for j := 0; j < full; j += gemmGroup {
		gemm(&s.qp[0], 64, gemmTileRows*64, xt, rows, &keys[j*d], d*size, 16*size, d/16, 0, &s.sc[j], attnBlock*4)
	}
	if full < n {
		*pad = grow.Slice(*pad, gemmGroup*d)
		clear(*pad)
		copy(*pad, keys[full*d:n*d])
		gemm(&s.qp[0], 64, gemmTileRows*64, xt, rows, &(*pad)[0], d*size, 16*size, d/16, 0, &s.sc[full], attnBlock*4)
	}
}

// pvAVX512 adds to the tile's outputs the weighted values of the block: o[r] += Σ_j sc[r, j]·v_j (d a multiple
// of 16).
func (s *attnScratch) pvAVX512(rows, d int, vals []float32, n int) {
	tilePV(s, rows, d, vals, n, &pvKernels)
}

// pvF16AVX512 is pvAVX512 for a float16 cache's values.
func (s *attnScratch) pvF16AVX512(rows, d int, vals []uint16, n int) {
	tilePV(s, rows, d, vals, n, &pvF16Kernels)
}

// tilePV is pvAVX512 for values of element type T, with kernels, the pv kernels for T.
func tilePV[T float32 | uint16](s *attnScratch, rows, d int, vals []T, n int,
	kernels *[asmgen.PVRows][asmgen.PVCols]func(o *float32, ldo int, p *float32, ldp int, v *T, ldv int, keys int)) {
	if n == 0 { // a block of a leaf's own key alone (ownBlocks)
		return
	}
	size := int(unsafe.Sizeof(vals[0]))
	for c0 := 0; c0 < d; c0 += 16 * asmgen.PVCols {
		cols := min(asmgen.PVCols, (d-c0)/16)
		for r0 := 0; r0 < rows; r0 += asmgen.PVRows {
			nr := min(asmgen.PVRows, rows-r0)
			kernels[nr-1][cols-1](&s.o[r0*d+c0], d*4, &s.sc[r0*attnBlock], attnBlock*4, &vals[c0], d*size, n)
		}
	}
}

// pvRowAVX512 adds w·v to one row o of a tile's outputs (d a multiple of 16), with the pv tiles' kernels: the
// same fused multiply-add per element as a row of pvAVX512 sums for one key.
func pvRowAVX512(o []float32, w float32, v []float32) {
	d := len(o)
	for c0 := 0; c0 < d; c0 += 16 * asmgen.PVCols {
		cols := min(asmgen.PVCols, (d-c0)/16)
		pvKernels[0][cols-1](&o[c0], d*4, &w, attnBlock*4, &v[c0], d*4, 1)
	}
}
