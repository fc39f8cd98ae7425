package quant

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"math/bits"
	"os"
	"testing"
)

type vectorCase struct {
	Type        string `json:"type"`
	Rows        int    `json:"rows"`
	Cols        int    `json:"cols"`
	Input       string `json:"input"`
	Blocks      string `json:"blocks"`
	Dequantized string `json:"dequantized"`
}

// TestGrids checks every point of every codebook against gguf-py's own copy of it (built from its hex tables,
// not from ggml-common.h, which grids.go is generated from; vectors.json "grids").
func TestGrids(t *testing.T) {
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Grids map[string]string }
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	for name, points := range map[string][]uint64{"IQ2_XXS": IQ2XXSGrid[:], "IQ2_XS": IQ2XSGrid[:], "IQ2_S": IQ2SGrid[:], "IQ1_S": IQ1SGrid[:],
		"IQ3_XXS": widen32(IQ3XXSGrid[:]), "IQ3_S": widen32(IQ3SGrid[:])} {
		want := unb64(t, v.Grids[name])
		width := len(want) / len(points)
		if width != 8 && width != 4 || len(want)%len(points) != 0 {
			t.Fatalf("%s: gguf-py's grid has %d bytes for %d points", name, len(want), len(points))
		}
		for i, p := range points {
			for j := range width {
				if got := byte(p >> (8 * j)); got != want[i*width+j] {
					t.Fatalf("%s point %d value %d: %d, gguf-py %d", name, i, j, int8(got), int8(want[i*width+j]))
				}
			}
		}
	}
	for s := range 128 { // ksigns_iq2xs: 0, 129, 130, 3, 132, ...
		if n := bits.OnesCount8(KSigns(s)); n%2 != 0 || KSigns(s)&127 != uint8(s) {
			t.Fatalf("KSigns(%d) = %d: want the 7 bits and an even number of set bits", s, KSigns(s))
		}
	}
}

func widen32(g []uint32) []uint64 {
	w := make([]uint64, len(g))
	for i, v := range g {
		w[i] = uint64(v)
	}
	return w
}

func loadVectors(t *testing.T) []vectorCase {
	t.Helper()
	b, err := os.ReadFile("testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Cases []vectorCase }
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) < len(formats) {
		t.Fatalf("testdata/vectors.json has %d cases, want one per supported type (%d)", len(v.Cases), len(formats))
	}
	return v.Cases
}

func unb64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func floats(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

// TestVectorsDequantize checks every supported type's decoding against gguf-py's, bit for bit (NaN = NaN).
func TestVectorsDequantize(t *testing.T) {
	for _, c := range loadVectors(t) {
		typ, err := Parse(c.Type)
		if err != nil {
			t.Fatal(err)
		}
		blocks, want := unb64(t, c.Blocks), floats(unb64(t, c.Dequantized))
		if len(want) != c.Rows*c.Cols {
			t.Fatalf("%s: %d values, want %d", c.Type, len(want), c.Rows*c.Cols)
		}
		got := make([]float32, len(want))
		if err := Dequantize(typ, got, blocks); err != nil {
			t.Fatalf("%s: %v", c.Type, err)
		}
		for i := range got {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
				t.Fatalf("%s: element %d = %g (%08x), gguf-py %g (%08x)", c.Type, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
	}
}

// TestVectorsQuantize checks the encoders against gguf-py's encoding of the same rows, byte for byte.
func TestVectorsQuantize(t *testing.T) {
	checked := 0
	for _, c := range loadVectors(t) {
		typ, _ := Parse(c.Type)
		if c.Input == "" || encoders[typ] == nil {
			continue
		}
		x, want := floats(unb64(t, c.Input)), unb64(t, c.Blocks)
		got := make([]byte, len(want))
		if err := Quantize(typ, got, x); err != nil {
			t.Fatalf("%s: %v", c.Type, err)
		}
		f, _ := typ.Format()
		for i := range got {
			if got[i] != want[i] {
				blk := i / f.BlockBytes
				t.Fatalf("%s: block %d byte %d = %#02x, gguf-py %#02x\n got %x\nwant %x", c.Type, blk, i%f.BlockBytes, got[i], want[i],
					got[blk*f.BlockBytes:(blk+1)*f.BlockBytes], want[blk*f.BlockBytes:(blk+1)*f.BlockBytes])
			}
		}
		checked++
	}
	if checked != 3 {
		t.Fatalf("checked %d encoders against gguf-py, want 3 (Q8_0, Q4_0, Q4_1)", checked)
	}
}

func TestHalfRoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		f := HalfToFloat32(uint16(h))
		if f != f {
			if g := HalfToFloat32(Float32ToHalf(f)); g == g {
				t.Fatalf("NaN %04x came back as %g", h, g)
			}
			continue
		}
		if got := Float32ToHalf(f); got != uint16(h) {
			t.Fatalf("half %04x = %g came back as %04x", h, f, got)
		}
	}
}

// TestHalfRounding checks rounding to the nearest half, ties to even, against float64 arithmetic on every
// midpoint and its neighbours.
func TestHalfRounding(t *testing.T) {
	for h := range 0x7c00 - 1 { // positive finite halves and the next one up
		lo, hi := float64(HalfToFloat32(uint16(h))), float64(HalfToFloat32(uint16(h+1)))
		mid := float32((lo + hi) / 2)
		want := uint16(h)
		if h&1 == 1 {
			want = uint16(h + 1)
		}
		if got := Float32ToHalf(mid); got != want {
			t.Fatalf("midpoint %g of %04x and %04x rounded to %04x, want %04x", mid, h, h+1, got, want)
		}
		above := math.Nextafter32(mid, float32(math.Inf(1)))
		if got := Float32ToHalf(above); got != uint16(h+1) {
			t.Fatalf("%g just above the midpoint of %04x, %04x rounded to %04x", above, h, h+1, got)
		}
		below := math.Nextafter32(mid, 0)
		if got := Float32ToHalf(below); got != uint16(h) {
			t.Fatalf("%g just below the midpoint of %04x, %04x rounded to %04x", below, h, h+1, got)
		}
		if got := Float32ToHalf(-mid); got != want|0x8000 {
			t.Fatalf("-%g rounded to %04x, want %04x", mid, got, want|0x8000)
		}
	}
	if got := Float32ToHalf(65520); got != 0x7c00 {
		t.Fatalf("65520 (the midpoint past the largest half) rounded to %04x, want Inf", got)
	}
	if got := Float32ToHalf(1e-9); got != 0 {
		t.Fatalf("1e-9 rounded to %04x, want 0", got)
	}
}

// TestQ4KRoundTrip checks the Q4_K encoder's error: each element within half a quantization step of its
// sub-block (plus the scale's own rounding), and a relative RMS error typical of 4-bit formats.
func TestQ4KRoundTrip(t *testing.T) {
	x := make([]float32, 4*QKK)
	s := uint64(1)
	for i := range x {
		s = s*6364136223846793005 + 1442695040888963407
		x[i] = float32(int64(s>>11)%2000-1000) / 1000 * 0.05
	}
	x[7] = 0.4 // an outlier
	b := make([]byte, 4*144)
	if err := Quantize(Q4_K, b, x); err != nil {
		t.Fatal(err)
	}
	y := make([]float32, len(x))
	if err := Dequantize(Q4_K, y, b); err != nil {
		t.Fatal(err)
	}
	var se, sx float64
	for i := range x {
		d := float64(y[i] - x[i])
		se += d * d
		sx += float64(x[i]) * float64(x[i])
	}
	if rel := math.Sqrt(se / sx); rel > 0.12 || rel == 0 {
		t.Fatalf("Q4_K relative RMS error %.4f, want in (0, 0.12]", rel)
	}
}

func TestFormatErrors(t *testing.T) {
	if err := Dequantize(Q4_K, make([]float32, 100), make([]byte, 144)); err == nil {
		t.Fatal("a partial block decoded")
	}
	if err := Dequantize(Type(99), make([]float32, 1), make([]byte, 4)); err == nil {
		t.Fatal("an unknown type decoded")
	}
	if err := Quantize(Q6_K, make([]byte, 210), make([]float32, 256)); err == nil {
		t.Fatal("Q6_K encoded (no encoder)")
	}
	if _, err := Parse("TQ1_0"); err == nil {
		t.Fatal("TQ1_0 parsed as supported")
	}
	if IQ2_XXS.String() != "IQ2_XXS" || Type(5).String() != "type(5)" {
		t.Fatal("type names")
	}
}
