package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/layerstream/layerstream/engine/kernels/ggml"
	"github.com/layerstream/layerstream/quant"
)

// manyRowsCase is one matrix of TestManyRows: product computes the outputs of the input rows x (in values each)
// by the kernels a product of that many rows selects, ref the outputs of input row r (x) of a product of rows
// rows by the one-row portable path, the bits product must give it. Under llama.cpp's arithmetic (batch) they
// depend on the number of rows, which picks llama.cpp's kernels; under the engine's they do not, and a row's
// outputs must also equal those of its product alone.
type manyRowsCase struct {
	name    string
	in, out int
	batch   bool
	product func(y, x []float32)
	ref     func(y, x []float32, rows, r int)
}

// TestManyRows: for every block type the engine reads (the K-quants, the 32-element types, the i-quants, MXFP4,
// a two-part Q8_0), the float matrices (f32, bf16, bf16 inputs; f16 matrices are widened to f32 when loaded) and
// both arithmetics (the engine's, and llama.cpp's: LinearQuantGGML as loaded and repacked, LinearGGMLF32), a
// product of k input rows, for every k from 1 to 32 (and 33, 40: more than one call of a rows kernel), gives each
// row's outputs bit for bit as the one-row portable path computes them. Under the engine's arithmetic: the
// portable dot (for the types of rowsKernels the tiled order's tiledRef; for the float matrices the product of the
// row alone), and the product of that row alone too, whichever kernels the row count selects (rows kernels, four-
// and eight-row kernels, grid rows decoded once, padded fours, tiled panels, widened rows). Under llama.cpp's: the
// portable twin of the kernel llama.cpp takes for the row's place in its batch
// (TestLinearQuantGGMLMatchesLlamaCppMatmul checks those against llama.cpp itself).
func TestManyRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(40, 32))
	counts := []int{rowsMost + 1, rowsMost + 8} // every count from 1 to rowsMost, then past one call's rows
	for rows := rowsMost; rows >= 1; rows-- {
		counts = append([]int{rows}, counts...)
	}
	const most = rowsMost + 8
	for _, c := range manyRowsCases(t, rng) {
		x := make([]float32, most*c.in)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		want, alone := make([]float32, most*c.out), make([]float32, most*c.out)
		refs := func(rows int) {
			for r := range rows {
				c.ref(want[r*c.out:(r+1)*c.out], x[r*c.in:(r+1)*c.in], rows, r)
			}
		}
		if !c.batch {
			refs(most)
			for r := range most {
				c.product(alone[r*c.out:(r+1)*c.out], x[r*c.in:(r+1)*c.in])
			}
		}
		for _, rows := range counts {
			if c.batch {
				refs(rows)
			}
			y := make([]float32, rows*c.out)
			c.product(y, x[:rows*c.in])
			for i, v := range y {
				if math.Float32bits(v) != math.Float32bits(want[i]) || !c.batch && math.Float32bits(v) != math.Float32bits(alone[i]) {
					t.Fatalf("%s, %d rows: row %d output %d %g, one-row portable %g, the row alone %g", c.name, rows, i/c.out, i%c.out, v, want[i], alone[i])
				}
			}
		}
	}
}

// manyRowsCases are TestManyRows' matrices.
func manyRowsCases(t *testing.T, rng *rand.Rand) []manyRowsCase {
	const in, out = 512, 16 // two super-blocks, 16 block rows; out a multiple of 8 (llama.cpp's repacking) and of 4 (tinyBLAS)
	var cases []manyRowsCase
	for _, typ := range quantTypes {
		w := randomQuantMatrix(t, rng, typ, out, in)
		cases = append(cases, manyRowsCase{typ.String(), in, out, false,
			func(y, x []float32) { LinearQuant(y, x, w, nil) },
			func(y, x []float32, _, _ int) { engineRef(y, x, w) }})
		if GGMLSupports(typ) == nil {
			cases = append(cases, ggmlCase(typ, w, false))
			if GGMLRepacks(typ, out) {
				cases = append(cases, ggmlCase(typ, w, true))
			}
		}
	}
	two := randomQuantMatrix(t, rng, quant.Q8_0, out, in)
	two.TwoPart = true
	mx := randomMXFP4(t, rng, out, in)
	wf, wb := randomWeights(rng, in*out)
	alone := func(f func(y, x []float32)) func(y, x []float32, rows, r int) {
		return func(y, x []float32, _, _ int) { f(y, x) }
	}
	lin := func(y, x []float32) { Linear(y, x, wf, nil, in) }
	linB := func(y, x []float32) { Linear(y, x, wb, nil, in) }
	linBI := func(y, x []float32) { LinearBF16(y, x, wb, nil, in) }
	return append(cases,
		manyRowsCase{"Q8_0 two-part", in, out, false, func(y, x []float32) { LinearQuant(y, x, two, nil) },
			func(y, x []float32, _, _ int) { // hi + lo·2⁻⁸ as linearTwoPart splits the row, each by engineRef
				linearTwoPart(y, x, two, nil, func(y, x []float32, w QuantMatrix, _ []float32) {
					for r := range len(x) / in {
						engineRef(y[r*out:(r+1)*out], x[r*in:(r+1)*in], w)
					}
				})
			}},
		manyRowsCase{"MXFP4", in, out, false, func(y, x []float32) { LinearQuant(y, x, mx, nil) },
			func(y, x []float32, _, _ int) {
				for o := range out {
					y[o] = mxfp4Scalar(mx.Row(o), x)
				}
			}},
		manyRowsCase{"f32", in, out, false, lin, alone(lin)},
		manyRowsCase{"bf16", in, out, false, linB, alone(linB)},
		manyRowsCase{"bf16 inputs", in, out, false, linBI, alone(linBI)},
		manyRowsCase{"llama.cpp f32", in, out, true, func(y, x []float32) { LinearGGMLF32(y, x, wf, nil, in, len(x)/in) },
			func(y, x []float32, rows, _ int) {
				dot := ggml.VecDot // ggml_vec_dot_f32 for a batch of one; tinyBLAS for more
				if rows > 1 {
					dot = ggml.Dot16
				}
				for o := range out {
					y[o] = dot(wf[o*in:(o+1)*in], x)
				}
			}},
	)
}

// engineRef sets y to the engine's products of w's rows with the input row x, by the portable dot (for the types
// of rowsKernels, in the tiled order: tiledRef).
func engineRef(y, x []float32, w QuantMatrix) {
	p := portableKernels[w.Type]
	dot := p.dot
	if rowsKernels[w.Type] != nil {
		dot = func(b []byte, x qActRow) float32 { return tiledRef(w.Type, b, x) } // the tiled order (rows.go)
	}
	quantRef(y, x, w, p.act, dot)
}

// quantRef sets y[o] to dot of w's row o with the input row x quantized to act.
func quantRef(y, x []float32, w QuantMatrix, act actFormat, dot func(w []byte, x qActRow) float32) {
	var a qAct
	a.quantize(act, x, w.Cols)
	for o := range w.Rows {
		y[o] = dot(w.Row(o), a.row(0))
	}
}

// ggmlCase is the TestManyRows case of LinearQuantGGML of w with a batch of all the rows (repacked as llama.cpp
// would): the reference of row r is the portable kernel llama.cpp takes for the r-th row of a batch of rows
// (ggmlKernel: vec_dot, its tiled kernel from batchRows, the repacked gemm for the rows it takes four at a time).
func ggmlCase(typ quant.Type, w QuantMatrix, repacked bool) manyRowsCase {
	name := fmt.Sprintf("llama.cpp %s", typ)
	if repacked {
		name += " repacked"
	}
	plain, packed := ggmlTables(false)
	k := plain[typ]
	if repacked {
		k = packed[typ]
	}
	return manyRowsCase{name, w.Cols, w.Rows, true,
		func(y, x []float32) { LinearQuantGGML(y, x, w, nil, len(x)/w.Cols, repacked) },
		func(y, x []float32, rows, r int) {
			dot := k.one
			switch {
			case k.many != nil && rows >= k.batchRows:
				dot = k.many
			case k.four != nil && rows > 3 && r < rows-rows%4:
				dot = k.four
			}
			quantRef(y, x, w, k.act, dot)
		}}
}
