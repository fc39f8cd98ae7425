package kernels

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// quantTypes are the block formats the kernels serve.
var quantTypes = []quant.Type{quant.Q8_0, quant.Q4_0, quant.Q4_1, quant.Q5_0, quant.Q5_1, quant.Q2_K, quant.Q3_K,
	quant.Q4_K, quant.Q5_K, quant.Q6_K}

// randomQuantMatrix makes a [rows, cols] matrix of type t: encoded from N(0, 0.02) weights where quant can
// encode t, else random blocks whose float16 scales are set to sane values (as gguf-py's test vectors do).
func randomQuantMatrix(t *testing.T, rng *rand.Rand, typ quant.Type, rows, cols int) QuantMatrix {
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
		half := func(off int) {
			binary.LittleEndian.PutUint16(data[off:], quant.Float32ToHalf(float32(1e-4+rng.Float64()*1e-2)))
		}
		for b := 0; b < len(data); b += f.BlockBytes {
			switch typ {
			case quant.Q5_0:
				half(b)
			case quant.Q5_1:
				half(b)
				half(b + 2)
			case quant.Q2_K:
				half(b + 80)
				half(b + 82)
			case quant.Q3_K:
				half(b + 108)
			case quant.Q5_K:
				half(b)
				half(b + 2)
			case quant.Q6_K:
				half(b + 208)
			}
		}
	}
	m, err := NewQuantMatrix(typ, data, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// refDot is x · the dequantized row in float64, and Σ|x·w| (the scale of its rounding error).
func refDot(x []float32, w QuantMatrix, o int) (dot, mag float64) {
	row := make([]float32, w.Cols)
	w.DequantizeRow(row, o)
	for i, v := range row {
		p := float64(x[i]) * float64(v)
		dot += p
		mag += math.Abs(p)
	}
	return dot, mag
}

// TestQuantKernels checks every format's kernels (assembly where the CPU has them, and the portable ones)
// against a float64 dot product with the dequantized rows, and that the three-row kernels give each row's
// one-row result bit for bit.
func TestQuantKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, typ := range quantTypes {
		for _, cols := range []int{256, 768} {
			const rows = 7
			w := randomQuantMatrix(t, rng, typ, 5, cols)
			x := make([]float32, rows*cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			for name, k := range map[string]*quantKernel{"selected": quantKernelFor(typ), "portable": portableQuantKernel(typ)} {
				for o := range w.Rows {
					row := w.Row(o)
					y := make([]float32, 2*rows)
					k.dot3(x, cols, 2, row, y, 2) // rows 0..5 at stride 2
					for r := range rows {
						got := k.dot1(x[r*cols:(r+1)*cols], row)
						want, mag := refDot(x[r*cols:(r+1)*cols], w, o)
						if d := math.Abs(float64(got) - want); d > 1e-6*mag+1e-12 {
							t.Fatalf("%s %s cols %d row %d input %d: %g, float64 %g (|x·w| %g)", name, typ, cols, o, r, got, want, mag)
						}
						if r < 6 && math.Float32bits(y[2*r]) != math.Float32bits(got) {
							t.Fatalf("%s %s cols %d: three-row kernel gives input %d %g, one-row %g", name, typ, cols, r, y[2*r], got)
						}
					}
				}
			}
		}
	}
}

// TestLinearQuant checks LinearQuant against per-row dot products (with bias), and that a row's outputs are the
// same alone and in a batch.
func TestLinearQuant(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, typ := range []quant.Type{quant.Q8_0, quant.Q4_K, quant.Q6_K} {
		const in, out, rows = 512, 130, 8
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
		for r := range rows {
			alone := make([]float32, out)
			LinearQuant(alone, x[r*in:(r+1)*in], w, bias)
			for o := range out {
				if math.Float32bits(alone[o]) != math.Float32bits(y[r*out+o]) {
					t.Fatalf("%s: row %d output %d is %g alone, %g in a batch", typ, r, o, alone[o], y[r*out+o])
				}
				want, mag := refDot(x[r*in:(r+1)*in], w, o)
				if d := math.Abs(float64(y[r*out+o]) - float64(bias[o]) - want); d > 1e-6*mag+1e-5 {
					t.Fatalf("%s: y[%d, %d] = %g, want %g + %g", typ, r, o, y[r*out+o], want, bias[o])
				}
			}
		}
	}
}

// TestQuantKernelsPortable runs the tests with the portable kernels, which CPUs without AVX2 use.
func TestQuantKernelsPortable(t *testing.T) {
	defer func(v bool) { useAVX2 = v }(useAVX2)
	useAVX2 = false
	TestLinearQuant(t)
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
		{quant.IQ2_XXS, 66, 1, 256},
	} {
		if _, err := NewQuantMatrix(c.typ, make([]byte, c.n), c.rows, c.cols); err == nil {
			t.Errorf("NewQuantMatrix(%s, %d bytes, %d×%d) accepted", c.typ, c.n, c.rows, c.cols)
		}
	}
}
