package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// TestLinearQuantRowsTiledOrder: for every type with a rows kernel, LinearQuant over 0 to 40 input rows (and, for
// a type with a transposing kernel, the row counts around its last one, past which the tiled kernels take over;
// 37 outputs: two whole panels of 16 rows and a tail) gives every output bit for bit as the tiled kernels'
// order does: tiledRef,
// the scalar reference, and the tiled Go kernel (tileGo) through linearTiled, with and without a bias; and
// LinearQuantPrompt gives the same bits. Random blocks (every code and scale pattern), and blocks of all-equal
// extreme bytes against ±1 inputs (the largest integer sums).
func TestLinearQuantRowsTiledOrder(t *testing.T) {
	if len(rowsKernels) == 0 {
		t.Skip("no rows kernels on this CPU (AVX-512 VNNI): LinearQuant keeps its lanes order")
	}
	rng := rand.New(rand.NewPCG(13, 17))
	for typ, f := range rowsKernels {
		if f.tiledFrom > rowsMost {
			t.Errorf("%v: the rows kernel up to %d rows, its scratch holds %d", typ, f.tiledFrom-1, rowsMost)
		}
		shapes := [][2]int{{13, 256}, {5, 1536}}
		counts := make([]int, 41)
		for i := range counts {
			counts[i] = i
		}
		if f.trans.kernels[0] != nil {
			shapes = append(shapes, [2]int{37, 512})                        // whole panels of 16 rows and a tail: the transposing kernel
			counts = append(counts, f.trans.to-1, f.trans.to, f.trans.to+7) // its last row count, then the tiled kernels'
		}
		if f.tiled.block == quant.QK {
			shapes = append(shapes, [2]int{7, 160}) // an odd number of blocks: the tiled kernels
		}
		for _, shape := range shapes {
			out, in := shape[0], shape[1]
			mats := []QuantMatrix{randomKBlocks(t, rng, typ, out, in), randomQuantMatrix(t, rng, typ, out, in)}
			for _, fill := range []byte{0xff, 0x80} {
				mats = append(mats, filledMatrix(t, typ, fill, out, in))
			}
			bias := make([]float32, out)
			for i := range bias {
				bias[i] = float32(rng.NormFloat64())
			}
			for mi, w := range mats {
				for _, rows := range counts {
					x := make([]float32, rows*in)
					for i := range x {
						x[i] = float32(rng.NormFloat64())
						if mi >= 2 {
							x[i] = float32(1 - 2*(i%2)) // ±1: quantized to ±127
						}
					}
					var a qAct
					a.quantize(w.k.act, x, in)
					ref := make([]float32, rows*out)
					linearTiled(ref, x, w, nil, f.tiled, f.tiled.goKernel)
					y, yb, yp := make([]float32, rows*out), make([]float32, rows*out), make([]float32, rows*out)
					LinearQuant(y, x, w, nil)
					LinearQuant(yb, x, w, bias)
					LinearQuantPrompt(yp, x, w, nil)
					for i := range y {
						r, o := i/out, i%out
						want := tiledRef(typ, w.Row(o), a.row(r))
						if math.Float32bits(y[i]) != math.Float32bits(want) || math.Float32bits(ref[i]) != math.Float32bits(want) ||
							math.Float32bits(yp[i]) != math.Float32bits(want) || yb[i] != want+bias[o] {
							t.Fatalf("%v [%d×%d] matrix %d, %d rows: y[%d][%d] = %v (bias: %v, prompt: %v), tiled Go %v, tiledRef %v",
								typ, out, in, mi, rows, r, o, y[i], yb[i], yp[i], ref[i], want)
						}
					}
				}
			}
		}
	}
}

// filledMatrix is a [rows, cols] matrix of type typ whose bytes are all fill, with its float16 scales 0.01.
func filledMatrix(t *testing.T, typ quant.Type, fill byte, rows, cols int) QuantMatrix {
	t.Helper()
	bf, _ := typ.Format()
	data := make([]byte, rows*cols/bf.BlockElems*bf.BlockBytes)
	for i := range data {
		data[i] = fill
	}
	for b := 0; b < len(data); b += bf.BlockBytes {
		setScales(typ, data[b:b+bf.BlockBytes], func() float32 { return 0.01 })
	}
	w, err := NewQuantMatrix(typ, data, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
