package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// TestLinearQuantGGMLMatchesLlamaCpp: LinearQuantGGML's products equal llama.cpp's ggml_vec_dot_q8_0_q8_0 and
// ggml_vec_dot_q4_1_q8_1 (testdata/llamacpp_dots.json, from the x86 build's own functions) bit for bit, with the
// assembly and the portable kernels; the other formats are refused by GGMLSupports.
func TestLinearQuantGGMLMatchesLlamaCpp(t *testing.T) {
	ref, x := readLlamaCppDots(t)
	n := ref.Meta.N
	checked := 0
	for _, c := range ref.Cases {
		typ, err := quant.Parse(c.Type)
		if err != nil {
			t.Fatal(err)
		}
		if GGMLSupports(typ) != nil {
			continue
		}
		checked++
		w, err := NewQuantMatrix(typ, unb64(t, c.Weights), ref.Meta.Rows, n)
		if err != nil {
			t.Fatal(err)
		}
		y := make([]float32, len(x)/n*w.Rows)
		LinearQuantGGML(y, x, w, nil)
		var a qAct
		a.quantize(w.k.act, x, n)
		blk := ggmlBlocks[typ]
		for r := range len(x) / n {
			for o := range w.Rows {
				want := float32(c.Dots[r][o])
				portable := dot32(w.Row(o), a.row(r), blk.bytes, blk.ints, true)
				if y[r*w.Rows+o] != want || portable != want {
					t.Fatalf("%s: row %d · x%d = %.9g (portable %.9g), llama.cpp %.9g", c.Type, o, r, y[r*w.Rows+o], portable, want)
				}
			}
		}
	}
	if checked != 2 {
		t.Errorf("%d formats checked, want Q8_0 and Q4_1", checked)
	}
	for _, typ := range []quant.Type{quant.Q4_0, quant.Q4_K, quant.Q6_K} {
		if GGMLSupports(typ) == nil {
			t.Errorf("GGMLSupports(%s) = nil: llama.cpp multiplies it with kernels LinearQuantGGML does not reproduce", typ)
		}
	}
}

// TestGGMLDotsAgree checks the assembly kernels of LinearQuantGGML against dot32 with fused, bit for bit, on
// random data (with biases).
func TestGGMLDotsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for typ, blk := range ggmlBlocks {
		w := randomQuantMatrix(t, rng, typ, 8, 1536)
		x := make([]float32, 3*w.Cols)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		bias := make([]float32, w.Rows)
		for i := range bias {
			bias[i] = float32(rng.NormFloat64())
		}
		y := make([]float32, 3*w.Rows)
		LinearQuantGGML(y, x, w, bias)
		var a qAct
		a.quantize(w.k.act, x, w.Cols)
		for r := range 3 {
			for o := range w.Rows {
				if want := dot32(w.Row(o), a.row(r), blk.bytes, blk.ints, true) + bias[o]; math.Float32bits(y[r*w.Rows+o]) != math.Float32bits(want) {
					t.Fatalf("%s: row %d input %d: %g, portable %g", typ, o, r, y[r*w.Rows+o], want)
				}
			}
		}
	}
}
