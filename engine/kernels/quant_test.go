package kernels

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// quantTypes are the block formats the kernels multiply.
var quantTypes = append([]quant.Type{quant.Q8_0, quant.Q4_0, quant.Q5_0, quant.Q4_1, quant.Q5_1, quant.Q2_K, quant.Q3_K,
	quant.Q4_K, quant.Q5_K, quant.Q6_K, quant.IQ4_NL, quant.IQ4_XS}, quant.GridTypes...)

// halfOffsets are the byte offsets of the float16 scales in a block of each type (IQ1_M's d is spread over the
// top nibbles of its four scale words instead; setScales writes it).
var halfOffsets = map[quant.Type][]int{quant.Q2_K: {80, 82}, quant.Q3_K: {108}, quant.Q4_K: {0, 2}, quant.Q5_K: {0, 2},
	quant.Q6_K: {208}, quant.Q8_0: {0}, quant.Q4_0: {0}, quant.Q5_0: {0}, quant.Q4_1: {0, 2}, quant.Q5_1: {0, 2},
	quant.IQ4_NL: {0}, quant.IQ4_XS: {0}, quant.IQ2_XXS: {0}, quant.IQ2_XS: {0}, quant.IQ2_S: {0}, quant.IQ3_XXS: {0},
	quant.IQ3_S: {0}, quant.IQ1_S: {0}}

// setScales sets the float16 scales of blk, one block of type typ, to values from next: random bytes with sane
// scales decode to finite, varied weights.
func setScales(typ quant.Type, blk []byte, next func() float32) {
	if typ == quant.IQ1_M {
		h := quant.Float32ToHalf(next())
		for i := range 4 {
			w := binary.LittleEndian.Uint16(blk[48+2*i:])
			binary.LittleEndian.PutUint16(blk[48+2*i:], w&0x0fff|(h>>(4*i)&0xf)<<12)
		}
		return
	}
	for _, off := range halfOffsets[typ] {
		binary.LittleEndian.PutUint16(blk[off:], quant.Float32ToHalf(next()))
	}
}

// randomQuantMatrix makes a [rows, cols] matrix of type t: encoded from N(0, 0.02) weights where quant can
// encode t, else random blocks whose float16 scales are set to sane values (as gguf-py's test vectors do).
func randomQuantMatrix(t testing.TB, rng *rand.Rand, typ quant.Type, rows, cols int) QuantMatrix {
	t.Helper()
	f, _ := typ.Format()
	data := make([]byte, rows*cols/f.BlockElems*f.BlockBytes)
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.02)
	}
	if err := quant.Quantize(typ, data, w); err != nil {
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		for b := 0; b < len(data); b += f.BlockBytes {
			setScales(typ, data[b:b+f.BlockBytes], func() float32 { return float32(1e-4 + rng.Float64()*1e-2) })
		}
	}
	m, err := NewQuantMatrix(typ, data, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// llamaCppDots are llama.cpp's own activation blocks and dot products (scripts/fixtures/llamacpp_dots.py).
type llamaCppDots struct {
	Meta struct {
		N, Rows int
		X       string
	}
	Cases []struct {
		Type    string
		Act     string
		Weights string
		Acts    []string
		Dots    [][]float64
	}
}

func unb64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// llamaCppAct turns llama.cpp's activation blocks (block_q8_0: f16 d, 32 int8; block_q8_1: f16 d, f16 s, 32
// int8; block_q8_K: f32 d, 256 int8, 16 int16 sums) into a qActRow.
func llamaCppAct(b []byte, format string, n int) qActRow {
	var x qActRow
	switch format {
	case "q8_0", "q8_1":
		size, off := 34, 2
		if format == "q8_1" {
			size, off = 36, 4
		}
		for i := 0; i < len(b); i += size {
			x.d = append(x.d, quant.HalfToFloat32(binary.LittleEndian.Uint16(b[i:])))
			if format == "q8_1" {
				x.s = append(x.s, quant.HalfToFloat32(binary.LittleEndian.Uint16(b[i+2:])))
			}
			for _, v := range b[i+off : i+off+32] {
				x.qs = append(x.qs, int8(v))
			}
		}
	case "q8_K":
		for i := 0; i < len(b); i += 292 {
			x.d = append(x.d, math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
			for _, v := range b[i+4 : i+260] {
				x.qs = append(x.qs, int8(v))
			}
			for j := range 16 {
				x.bsums = append(x.bsums, int16(binary.LittleEndian.Uint16(b[i+260+2*j:])))
			}
		}
	}
	return x
}

func sameRow(a, b qActRow) bool {
	eq := func(x, y []float32) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
				return false
			}
		}
		return true
	}
	if len(a.qs) != len(b.qs) || len(a.bsums) != len(b.bsums) || !eq(a.d, b.d) || !eq(a.s, b.s) {
		return false
	}
	for i := range a.qs {
		if a.qs[i] != b.qs[i] {
			return false
		}
	}
	for i := range a.bsums {
		if a.bsums[i] != b.bsums[i] {
			return false
		}
	}
	return true
}

// magnitude is Σ|w·a| over the dequantized weight row and quantized activations: the scale of a dot product's
// float32 rounding.
func magnitude(w QuantMatrix, o int, x qActRow) float64 {
	row := make([]float32, w.Cols)
	w.DequantizeRow(row, o)
	b := quant.QK
	if len(x.bsums) > 0 {
		b = quant.QKK
	}
	m := 0.0
	for i, v := range row {
		m += math.Abs(float64(v) * float64(x.qs[i]) * float64(x.d[i/b]))
	}
	return m
}

// readLlamaCppDots reads testdata/llamacpp_dots.json (scripts/fixtures/llamacpp_dots.py) and its input rows.
func readLlamaCppDots(t *testing.T) (llamaCppDots, []float32) {
	t.Helper()
	b, err := os.ReadFile("testdata/llamacpp_dots.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref llamaCppDots
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	xb := unb64(t, ref.Meta.X)
	x := make([]float32, len(xb)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(xb[4*i:]))
	}
	return ref, x
}

// TestQuantDotsMatchLlamaCpp checks, for every weight type, that the activations quantize to llama.cpp's blocks
// bit for bit and that the dot products equal llama.cpp's within float32 rounding (llama.cpp's x86 kernels sum
// their float parts in another order), with the selected (assembly where present) and the portable kernels.
func TestQuantDotsMatchLlamaCpp(t *testing.T) {
	ref, x := readLlamaCppDots(t)
	n := ref.Meta.N
	if len(ref.Cases) != len(quantTypes) {
		t.Fatalf("%d cases, want %d", len(ref.Cases), len(quantTypes))
	}
	for _, c := range ref.Cases {
		typ, err := quant.Parse(c.Type)
		if err != nil {
			t.Fatal(err)
		}
		w, err := NewQuantMatrix(typ, unb64(t, c.Weights), ref.Meta.Rows, n)
		if err != nil {
			t.Fatal(err)
		}
		var a qAct
		a.quantize(w.k.act, x, n)
		for r := range len(x) / n {
			want := llamaCppAct(unb64(t, c.Acts[r]), c.Act, n)
			got := a.row(r)
			if !sameRow(got, want) {
				t.Fatalf("%s: activation row %d quantized to %s differs from llama.cpp's", c.Type, r, c.Act)
			}
			for o := range w.Rows {
				tol := 2e-6*magnitude(w, o, got) + 1e-9
				for name, k := range map[string]*quantKernel{"selected": w.k, "portable": portableKernels[typ]} {
					d := k.dot(w.Row(o), got)
					if math.Abs(float64(d)-c.Dots[r][o]) > tol {
						t.Errorf("%s %s: row %d · x%d = %.9g, llama.cpp %.9g (tolerance %.2g)", name, c.Type, o, r, d, c.Dots[r][o], tol)
					}
				}
			}
		}
	}
}

// TestQuantKernelsAgree checks the assembly kernels (one row, four inputs) against the portable ones,
// bit for bit, on random data.
func TestQuantKernelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range quantTypes {
		k := quantKernels[typ]
		p := portableKernels[typ]
		for _, cols := range []int{256, 1536} {
			w := randomQuantMatrix(t, rng, typ, 8, cols)
			x := make([]float32, 4*cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			var a qAct
			a.quantize(k.act, x, cols)
			for name, in4 := range map[string]func(w []byte, x qActRow, y []float32, ystride int){"kernel": k.in4, "portable": p.in4} {
				if in4 == nil {
					continue
				}
				const ystride = 3
				for o := range w.Rows {
					y := make([]float32, 3*ystride+1)
					in4(w.Row(o), a.rows(0, 4), y, ystride)
					for r := range 4 {
						if want := p.dot(w.Row(o), a.row(r)); math.Float32bits(y[r*ystride]) != math.Float32bits(want) {
							t.Fatalf("%s cols %d: %s four-input kernel row %d input %d %g, portable %g", typ, cols, name, o, r, y[r*ystride], want)
						}
					}
				}
			}
			for r := range 3 {
				for o := range w.Rows {
					got, want := k.dot(w.Row(o), a.row(r)), p.dot(w.Row(o), a.row(r))
					if math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%s cols %d: kernel %g, portable %g", typ, cols, got, want)
					}
				}
			}
		}
	}
}

// TestWiden checks that widened rows hold the same values: dequantized, bit for bit.
func TestWiden(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, typ := range quantTypes {
		k := portableKernels[typ]
		if k.widen == nil {
			continue
		}
		const cols = 1024
		w := randomQuantMatrix(t, rng, typ, 3, cols)
		wide := make([]byte, 3*cols/quant.QK*34)
		for o := range 3 {
			k.widen(wide[o*len(wide)/3:(o+1)*len(wide)/3], w.Row(o))
		}
		ww, err := NewQuantMatrix(quant.Q8_0, wide, 3, cols)
		if err != nil {
			t.Fatal(err)
		}
		a, b := make([]float32, cols), make([]float32, cols)
		for o := range 3 {
			w.DequantizeRow(a, o)
			ww.DequantizeRow(b, o)
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("%s row %d [%d]: %g, widened %g", typ, o, i, a[i], b[i])
				}
			}
		}
	}
}

// TestLinearQuant checks LinearQuant against float32 products of the dequantized weights with the unquantized
// inputs, within the activations' 8-bit rounding (a relative error of a few 2⁻⁹ of Σ|w·x|), with bias; and that
// a row's outputs are the same alone and in a batch (where Q4_0 and Q5_0 rows are widened to Q8_0: rows ≥
// widenRows).
func TestLinearQuant(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, typ := range quantTypes {
		const in, out, rows = 512, 130, 5 // rows ≥ widenRows
		w := randomQuantMatrix(t, rng, typ, out, in)
		x := make([]float32, rows*in)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		bias := make([]float32, out)
		for i := range bias {
			bias[i] = float32(i)
		}
		y := make([]float32, rows*out)
		LinearQuant(y, x, w, bias)
		row := make([]float32, in)
		for r := range rows {
			alone := make([]float32, out)
			LinearQuant(alone, x[r*in:(r+1)*in], w, bias)
			for o := range out {
				if math.Float32bits(alone[o]) != math.Float32bits(y[r*out+o]) {
					t.Fatalf("%s: row %d output %d is %g alone, %g in a batch", typ, r, o, alone[o], y[r*out+o])
				}
				w.DequantizeRow(row, o)
				want, mag := 0.0, 0.0
				for i, v := range row {
					want += float64(v) * float64(x[r*in+i])
					mag += math.Abs(float64(v) * float64(x[r*in+i]))
				}
				if d := math.Abs(float64(y[r*out+o]) - float64(bias[o]) - want); d > 0.01*mag {
					t.Fatalf("%s: y[%d, %d] = %g, float %g + bias %g (|w·x| %g)", typ, r, o, y[r*out+o], want, bias[o], mag)
				}
			}
		}
	}
}

func TestNewQuantMatrixErrors(t *testing.T) {
	for _, c := range []struct {
		typ        quant.Type
		n          int
		rows, cols int
	}{
		{quant.Q8_0, 34, 1, 33}, // partial block
		{quant.Q8_0, 33, 1, 32}, // short data
		{quant.F32, 4, 1, 1},    // not a block type
		{quant.Q4_K, 0, 1, 0},   // empty rows
		{quant.TQ1_0, 54, 1, 256},
	} {
		if _, err := NewQuantMatrix(c.typ, make([]byte, c.n), c.rows, c.cols); err == nil {
			t.Errorf("NewQuantMatrix(%s, %d bytes, %d×%d) accepted", c.typ, c.n, c.rows, c.cols)
		}
	}
}

// TestQuantizeQ8BlocksAgree checks the assembly quantization of Q8_0/Q8_1 activations against quantizeQ8_0Block,
// bit for bit: random blocks, a zero block, halves that round to even (max 127, so x·127/max is x), and tiny
// and huge magnitudes.
func TestQuantizeQ8BlocksAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var x []float32
	for range 40 {
		for range 32 {
			x = append(x, float32(rng.NormFloat64()*math.Pow(10, float64(rng.IntN(9)-4))))
		}
	}
	x = append(x, make([]float32, 32)...)
	for i := range 32 {
		x = append(x, float32(i-16)+0.5)
	}
	x[len(x)-1] = 127
	for i := range 32 {
		x = append(x, float32(i+1)*1e-38, float32(i+1)*3e37)
	}
	nb := len(x) / 32
	q, d, sums := make([]int8, len(x)), make([]float32, nb), make([]int32, nb)
	if !quantizeQ8Blocks(q, x, d, sums) {
		t.Skip("no assembly quantization on this CPU")
	}
	wq := make([]int8, 32)
	for b := range nb {
		var s float32
		wd := quantizeQ8_0Block(wq, x[32*b:32*b+32], &s)
		if got := roundHalf(d[b]); math.Float32bits(got) != math.Float32bits(wd) {
			t.Fatalf("block %d: scale %g, want %g", b, got, wd)
		}
		if got := roundHalf(d[b] * float32(sums[b])); math.Float32bits(got) != math.Float32bits(s) {
			t.Fatalf("block %d: scaled sum %g, want %g", b, got, s)
		}
		for i, v := range wq {
			if q[32*b+i] != v {
				t.Fatalf("block %d value %d (%g): %d, want %d", b, i, x[32*b+i], q[32*b+i], v)
			}
		}
	}
	// A NaN anywhere in a block makes its scale NaN, as in the portable code (VMAXPS alone drops a NaN unless
	// it is in the lane the reduction keeps), so that it reaches the products and the engine's NaN checks.
	for _, at := range []int{0, 5, 16, 31} {
		y := make([]float32, 32)
		for i := range y {
			y[i] = float32(i) - 10
		}
		y[at] = float32(math.NaN())
		var s float32
		quantizeQ8Blocks(q[:32], y, d[:1], sums[:1])
		if wd := quantizeQ8_0Block(wq, y, &s); !math.IsNaN(float64(d[0])) || !math.IsNaN(float64(wd)) {
			t.Errorf("NaN at %d: scale %g (portable %g), want NaN", at, d[0], wd)
		}
	}
}

func TestQuantizeQ8KBlocksAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var x []float32
	for range 24 {
		scale := math.Pow(10, float64(rng.IntN(9)-4))
		for range quant.QKK {
			x = append(x, float32(rng.NormFloat64()*scale))
		}
	}
	x = append(x, make([]float32, quant.QKK)...) // zeros
	for i := range quant.QKK {                   // ties: halves, and the largest magnitude twice with both signs
		x = append(x, float32(i%64-32)+0.5)
	}
	x[len(x)-200], x[len(x)-100] = -300, 300
	for i := range quant.QKK { // the largest magnitude last, then first
		x = append(x, float32(i))
	}
	for i := range quant.QKK {
		x = append(x, -float32(quant.QKK-i)*1e-30)
	}
	for _, at := range []int{-1, 0, 7, 100, 255} { // one NaN (or none) in a block of an infinity
		b := make([]float32, quant.QKK)
		for i := range b {
			b[i] = float32(i) - 100
		}
		if at >= 0 {
			b[at] = float32(math.NaN())
		} else {
			b[3] = float32(math.Inf(-1))
		}
		x = append(x, b...)
	}
	nb := len(x) / quant.QKK
	q, bsums, d := make([]int8, len(x)), make([]int16, len(x)/16), make([]float32, nb)
	if !quantizeQ8KBlocks(q, bsums, x, d) {
		t.Skip("no assembly quantization on this CPU")
	}
	wq, wbs := make([]int8, quant.QKK), make([]int16, 16)
	for b := range nb {
		wd := quantizeQ8_KBlock(wq, wbs, x[quant.QKK*b:quant.QKK*(b+1)])
		if math.Float32bits(d[b]) != math.Float32bits(wd) && !(math.IsNaN(float64(d[b])) && math.IsNaN(float64(wd))) {
			t.Fatalf("block %d: scale %g, want %g", b, d[b], wd)
		}
		if !slices.Equal(q[quant.QKK*b:quant.QKK*(b+1)], wq) {
			t.Fatalf("block %d: values differ", b)
		}
		if !slices.Equal(bsums[16*b:16*(b+1)], wbs) {
			t.Fatalf("block %d: sums of 16 %v, want %v", b, bsums[16*b:16*(b+1)], wbs)
		}
	}
	if !math.IsNaN(float64(d[nb-1])) {
		t.Errorf("a block holding a NaN has scale %g, want NaN", d[nb-1])
	}
}

// TestLinearQuantTwoPart checks Q8_0's two-part inputs (TwoPart): LinearQuant and LinearQuantPrompt within 2⁻¹² of Σ|w·x|
// of the float64 product of the dequantized weights with the unquantized inputs (8-bit inputs, the one-part
// product, miss by 2⁻⁶ here: checked to fail that bound, so the test tells the two apart), on inputs with an
// outlier of 3000 in one block, as SmolLM2's down projections get; and a row's outputs the same alone and in a
// batch.
func TestLinearQuantTwoPart(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const in, out, rows = 512, 70, 9
	w := randomQuantMatrix(t, rng, quant.Q8_0, out, in)
	x := make([]float32, rows*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for r := range rows {
		x[r*in+37] = 3000
	}
	// Without TwoPart, the one-part product.
	y1, y2 := make([]float32, rows*out), make([]float32, rows*out)
	LinearQuant(y1, x, w, nil)
	if f := rowsKernels[quant.Q8_0]; f != nil {
		linearQuantRows(y2, x, w, nil, f) // the one-part product in the tiled order (rows.go)
	} else {
		linearQuant(y2, x, w, nil)
	}
	if !slices.Equal(y1, y2) {
		t.Error("a Q8_0 matrix without TwoPart: LinearQuant differs from the one-part product")
	}
	w.TwoPart = true
	bias := make([]float32, out)
	for i := range bias {
		bias[i] = float32(rng.NormFloat64())
	}
	row := make([]float32, in)
	check := func(name string, linear func(y, x []float32, w QuantMatrix, bias []float32), tol float64) (worst float64) {
		y := make([]float32, rows*out)
		linear(y, x, w, bias)
		for r := range rows {
			alone := make([]float32, out)
			linear(alone, x[r*in:(r+1)*in], w, bias)
			for o := range out {
				if math.Float32bits(alone[o]) != math.Float32bits(y[r*out+o]) {
					t.Fatalf("%s: row %d output %d is %g alone, %g in a batch", name, r, o, alone[o], y[r*out+o])
				}
				w.DequantizeRow(row, o)
				want, mag := float64(bias[o]), 0.0
				for i, v := range row {
					want += float64(v) * float64(x[r*in+i])
					mag += math.Abs(float64(v) * float64(x[r*in+i]))
				}
				worst = max(worst, math.Abs(float64(y[r*out+o])-want)/mag)
			}
		}
		if tol > 0 && worst > tol {
			t.Errorf("%s: error up to %.3g of Σ|w·x|, want ≤ %.3g", name, worst, tol)
		}
		t.Logf("%s: error up to %.3g of Σ|w·x|", name, worst)
		return worst
	}
	const tol = 1.0 / (1 << 12)
	check("LinearQuant", LinearQuant, tol)
	check("LinearQuantPrompt", LinearQuantPrompt, tol)
	f := tiledFormats[quant.Q8_0] // the tiled path with the Go kernel, which CPUs without AVX-512 VNNI never reach above
	check("tiled (Go)", func(y, x []float32, w QuantMatrix, bias []float32) {
		linearTwoPart(y, x, w, bias, func(y, x []float32, w QuantMatrix, bias []float32) { linearTiled(y, x, w, bias, f, f.goKernel) })
	}, tol)
	if one := check("one-part inputs", linearQuant, 0); one <= tol {
		t.Errorf("one-part inputs: error %.3g is within the two-part bound %.3g: the test cannot tell them apart", one, tol)
	}
}
