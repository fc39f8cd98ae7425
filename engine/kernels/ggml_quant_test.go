package kernels

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// TestLinearQuantGGMLMatchesLlamaCpp: LinearQuantGGML's products of matrices llama.cpp does not repack equal
// llama.cpp's vec_dot kernels (ggml_vec_dot_q8_0_q8_0 and the others; testdata/llamacpp_dots.json, from the x86
// build's own functions) bit for bit, with the assembly and the portable kernels; the i-quants are refused by
// GGMLSupports.
func TestLinearQuantGGMLMatchesLlamaCpp(t *testing.T) {
	for _, asm := range []bool{true, false} {
		t.Run(fmt.Sprintf("asm=%v", asm), func(t *testing.T) { withGGMLTables(asm, func() { checkGGMLDots(t) }) })
	}
}

// withGGMLTables runs f with LinearQuantGGML's kernels made by ggmlTables(asm), then restores them.
func withGGMLTables(asm bool, f func()) {
	plain, repacked := ggmlKernels, ggmlRepacked
	defer func() { ggmlKernels, ggmlRepacked = plain, repacked }()
	ggmlKernels, ggmlRepacked = ggmlTables(asm)
	f()
}

func checkGGMLDots(t *testing.T) {
	ref, x := readLlamaCppDots(t)
	n := ref.Meta.N
	var checked []string
	for _, c := range ref.Cases {
		typ, err := quant.Parse(c.Type)
		if err != nil {
			t.Fatal(err)
		}
		if GGMLSupports(typ) != nil {
			continue
		}
		w, err := NewQuantMatrix(typ, unb64(t, c.Weights), ref.Meta.Rows, n)
		if err != nil {
			t.Fatal(err)
		}
		checked = append(checked, c.Type)
		y := make([]float32, len(x)/n*w.Rows)
		LinearQuantGGML(y, x, w, nil, 1, false)
		for r := range len(x) / n {
			for o := range w.Rows {
				if want := float32(c.Dots[r][o]); y[r*w.Rows+o] != want {
					t.Fatalf("%s: row %d · x%d = %.9g, llama.cpp's vec_dot %.9g", c.Type, o, r, y[r*w.Rows+o], want)
				}
			}
		}
	}
	if want := []string{"Q8_0", "Q4_0", "Q5_0", "Q4_1", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS",
		"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"}; !slices.Equal(checked, want) {
		t.Errorf("formats checked %v, want %v", checked, want)
	}
	if GGMLSupports(quant.TQ1_0) == nil {
		t.Errorf("GGMLSupports(TQ1_0) = nil: llama.cpp multiplies it with kernels LinearQuantGGML does not reproduce")
	}
	if !GGMLRepacks(quant.Q4_K, 16) || GGMLRepacks(quant.Q4_K, 12) || !GGMLRepacks(quant.Q4_0, 8) || !GGMLRepacks(quant.Q2_K, 8) || !GGMLRepacks(quant.IQ4_NL, 8) || GGMLRepacks(quant.Q6_K, 16) || GGMLRepacks(quant.IQ4_XS, 16) {
		t.Errorf("GGMLRepacks: Q4_0, Q4_K, Q2_K and IQ4_NL of a multiple of 8 rows, and nothing else")
	}
}

// TestGGMLDotsAgree checks the assembly kernels of LinearQuantGGML against dot32 with fused, bit for bit, on
// random data (with biases).
func TestGGMLDotsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for typ, blockBytes := range map[quant.Type]int{quant.Q8_0: 34, quant.Q4_0: 18, quant.Q4_1: 20, quant.Q5_0: 22, quant.Q5_1: 24, quant.IQ4_NL: 18} {
		ints := map[quant.Type]func(b []byte) ([32]int8, float32, float32){quant.Q8_0: intsQ8_0, quant.Q4_0: intsQ4_0,
			quant.Q4_1: intsQ4_1, quant.Q5_0: intsQ5_0, quant.Q5_1: intsQ5_1, quant.IQ4_NL: intsIQ4_NL}[typ]
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
		LinearQuantGGML(y, x, w, bias, 3, false)
		var a qAct
		a.quantize(w.k.act, x, w.Cols)
		for r := range 3 {
			for o := range w.Rows {
				if want := dot32(w.Row(o), a.row(r), blockBytes, ints, true) + bias[o]; math.Float32bits(y[r*w.Rows+o]) != math.Float32bits(want) {
					t.Fatalf("%s: row %d input %d: %g, portable %g", typ, o, r, y[r*w.Rows+o], want)
				}
			}
		}
		repacked := map[quant.Type]func(w []byte, x qActRow) float32{quant.Q4_0: dotQ4_0Repacked, quant.IQ4_NL: dotIQ4_NLRepacked}[typ]
		if repacked == nil {
			continue
		}
		// The repacked kernel (a multiple of 8 rows), against its portable twin.
		LinearQuantGGML(y, x, w, bias, 3, true)
		for r := range 3 {
			for o := range w.Rows {
				if want := repacked(w.Row(o), a.row(r)) + bias[o]; math.Float32bits(y[r*w.Rows+o]) != math.Float32bits(want) {
					t.Fatalf("repacked %s: row %d input %d: %g, portable %g", typ, o, r, y[r*w.Rows+o], want)
				}
			}
		}
	}
}

// TestLinearQuantGGMLMatchesLlamaCppMatmul: whole products of 16×1536 matrices (six K-quant super-blocks a row) by
// batches of 1, 5 and 12 rows equal llama.cpp's CPU mul_mat, computed through a one-node ggml graph
// (testdata/llamacpp_matmul.json, scripts/fixtures/llamacpp_matmul.py), of every covered format as llama.cpp
// holds a matrix it does not repack: its vec_dot kernels (for Q4_K and Q5_K their own sums of the minimum terms),
// llamafile's tinyBLAS for batches of Q8_0, Q4_0 and Q5_0, and its tiled K-quant kernel from 8 rows on, whose
// super-blocks are added with fused multiply-adds (a single super-block cannot show that).
func TestLinearQuantGGMLMatchesLlamaCppMatmul(t *testing.T) {
	for _, asm := range []bool{true, false} {
		t.Run(fmt.Sprintf("asm=%v", asm), func(t *testing.T) { withGGMLTables(asm, func() { checkGGMLMatmul(t) }) })
	}
}

func checkGGMLMatmul(t *testing.T) {
	b, err := os.ReadFile("testdata/llamacpp_matmul.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Meta struct {
			Rows, Cols int
			X          string
			RepackedX  string `json:"repacked_x"` // the repacked cases' inputs
		}
		Cases []struct {
			Type, Weights, X string
			Cols             int  // when not the meta's, with its own inputs X
			Repacked         bool // in llama.cpp's CPU_REPACK buffer: its repacked kernels
			Rows             int  // the repacked cases' rows
			Y                map[string]string
		}
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	x, xr := floatsOf(unb64(t, ref.Meta.X)), floatsOf(unb64(t, ref.Meta.RepackedX))
	plain, repacked := map[quant.Type]bool{}, map[quant.Type]bool{}
	for _, c := range ref.Cases {
		typ, err := quant.Parse(c.Type)
		if err != nil {
			t.Fatal(err)
		}
		rows, cols, x := ref.Meta.Rows, ref.Meta.Cols, x
		switch {
		case c.Repacked:
			rows, x = c.Rows, xr
			repacked[typ] = true
		case c.Cols != 0:
			cols, x = c.Cols, floatsOf(unb64(t, c.X))
		default:
			plain[typ] = true
		}
		if c.Repacked && !GGMLRepacks(typ, rows) {
			t.Fatalf("%s, %d rows: repacked by llama.cpp, not by GGMLRepacks", c.Type, rows)
		}
		w, err := NewQuantMatrix(typ, unb64(t, c.Weights), rows, cols)
		if err != nil {
			t.Fatal(err)
		}
		for batch := range 18 {
			ys, ok := c.Y[strconv.Itoa(batch)]
			if !ok {
				continue
			}
			want := floatsOf(unb64(t, ys))
			y := make([]float32, batch*w.Rows)
			LinearQuantGGML(y, x[:batch*w.Cols], w, nil, batch, c.Repacked)
			for i := range y {
				if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
					t.Fatalf("%s (repacked %v, %d rows), batch %d: output %d (row %d) %.9g, llama.cpp %.9g", c.Type, c.Repacked, rows, batch, i%w.Rows, i/w.Rows, y[i], want[i])
				}
			}
		}
	}
	// Every format LinearQuantGGML covers, as loaded and as repacked.
	for typ := range ggmlKernels {
		if !plain[typ] {
			t.Errorf("no %s case in llamacpp_matmul.json", typ)
		}
	}
	for typ := range ggmlRepacked {
		if !repacked[typ] {
			t.Errorf("no repacked %s case in llamacpp_matmul.json", typ)
		}
	}
}

// floatsOf reads little-endian float32 values.
func floatsOf(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

// TestKQuadsAsm checks the assembly quad-sum kernels against quadsGo on random super-blocks (any bytes are valid
// codes) and on the extremes: every code at its largest against activations of -127 and of 127 (Q8_K's range: its
// quantizer never writes -128, whose sign the signed formats' VPSIGNB could not flip).
func TestKQuadsAsm(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	checked := 0
	for _, typ := range []quant.Type{quant.Q2_K, quant.Q3_K, quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.IQ4_XS} {
		if !kQuadsAsm(typ) {
			continue
		}
		checked++
		format, _ := typ.Format()
		b := make([]byte, format.BlockBytes)
		qs := make([]int8, quant.QKK)
		for trial := range 200 {
			switch trial {
			case 0, 1:
				for i := range b {
					b[i] = 0xff
				}
				for i := range qs {
					qs[i] = [2]int8{-127, 127}[trial]
				}
			default:
				for i := range b {
					b[i] = byte(rng.Uint32())
				}
				for i := range qs {
					qs[i] = int8(rng.IntN(255) - 127)
				}
			}
			var got, want [64]int32
			var k kInts
			quadsAsm(typ, b, qs, &got)
			kDecode(typ, &k, b)
			quadsOf(&k, qs, &want)
			if got != want {
				t.Fatalf("%s, trial %d: assembly quads %v, Go %v", typ, trial, got, want)
			}
		}
	}
	if checked == 0 {
		t.Skip("no assembly quad kernels on this CPU")
	}
}

// TestKernelsDoNotAllocate: a dot product of LinearQuantGGML's kernels (assembly and Go) and of the engine's
// portable kernels allocates nothing (a block decoded through a function value would escape to the heap, once per
// weight row and input row).
func TestKernelsDoNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	check := func(name string, typ quant.Type, dot func(w []byte, x qActRow) float32, act actFormat) {
		t.Helper()
		if dot == nil {
			return
		}
		w := randomQuantMatrix(t, rng, typ, 1, 512)
		x := make([]float32, 512)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		var a qAct
		a.quantize(act, x, 512)
		if n := testing.AllocsPerRun(10, func() { dot(w.Row(0), a.row(0)) }); n != 0 {
			t.Errorf("%s %s: %g allocations per dot product", name, typ, n)
		}
	}
	for _, asm := range []bool{true, false} {
		plain, repacked := ggmlTables(asm)
		for typ, k := range plain {
			check(fmt.Sprintf("ggml (asm %v)", asm), typ, k.one, k.act)
			check(fmt.Sprintf("ggml batch (asm %v)", asm), typ, k.many, k.act)
		}
		for typ, k := range repacked {
			check(fmt.Sprintf("repacked (asm %v)", asm), typ, k.one, k.act)
			check(fmt.Sprintf("repacked four (asm %v)", asm), typ, k.four, k.act)
		}
	}
	for typ, k := range portableKernels {
		check("portable", typ, k.dot, k.act)
	}
}
