package checkpoint

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"
)

// TestTiledHeads: llama.cpp's tiled value heads ([perGroup][groups][size]) read back grouped
// ([groups][perGroup][size]), after an offset of rows or along the columns; column moves of quantized blocks are
// refused.
func TestTiledHeads(t *testing.T) {
	f32 := func(v ...float32) []byte {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	read := func(b []byte) []float32 {
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v
	}
	// Two key heads, two value heads each, one row per head after one leading row: stored v rows are
	// (g0 j0) (g1 j0) (g0 j1) (g1 j1).
	rows := TensorInfo{Name: "qkv", DType: F32, Shape: []int64{5, 1}, TiledHeads: TiledHeads{Groups: 2, PerGroup: 2, Size: 1, Offset: 1}}
	b := f32(9, 0, 2, 1, 3)
	if err := rows.Transform(b); err != nil || !slices.Equal(read(b), []float32{9, 0, 1, 2, 3}) {
		t.Errorf("rows: %v, %v", read(b), err)
	}
	cols := TensorInfo{Name: "out", DType: F32, Shape: []int64{2, 4}, TiledHeads: TiledHeads{Groups: 2, PerGroup: 2, Size: 1, Columns: true}}
	b = f32(0, 2, 1, 3, 4, 6, 5, 7)
	if err := cols.Transform(b); err != nil || !slices.Equal(read(b), []float32{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("columns: %v, %v", read(b), err)
	}
	q := TensorInfo{Name: "out", DType: Q8_0, Shape: []int64{1, 64}, TiledHeads: TiledHeads{Groups: 2, PerGroup: 2, Size: 16, Columns: true}}
	if err := q.Transform(make([]byte, 68)); err == nil || !strings.Contains(err.Error(), "blocks of quantized values span heads") {
		t.Errorf("quantized columns: %v", err)
	}
	bad := rows
	bad.Shape = []int64{6, 1}
	if err := bad.Transform(make([]byte, 24)); err == nil {
		t.Error("rows that do not match the heads accepted")
	}
}

// TestLogNeg: llama.cpp's ssm_a, -exp(A_log), reads back as A_log within an ulp; a value that cannot be -exp(x)
// is refused.
func TestLogNeg(t *testing.T) {
	ti := TensorInfo{Name: "A_log", DType: F32, Shape: []int64{3}, LogNeg: true}
	want := []float32{-1.5, 0, 2.25}
	b := make([]byte, 12)
	for i, v := range want {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(-float32(math.Exp(float64(v)))))
	}
	if err := ti.Transform(b); err != nil {
		t.Fatal(err)
	}
	for i, v := range want {
		got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		if math.Abs(float64(got-v)) > 2e-7*max(1, math.Abs(float64(v))) {
			t.Errorf("[%d] %g, want %g", i, got, v)
		}
	}
	binary.LittleEndian.PutUint32(b, math.Float32bits(0.5))
	if err := ti.Transform(b); err == nil || !strings.Contains(err.Error(), "finite negative") {
		t.Errorf("positive value: %v", err)
	}
}
