package imatrix

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCollectWriteRead(t *testing.T) {
	c := NewCollector()
	c.Observe("a.weight", []float32{1, 2, 3, 4, 5, 6}, 3) // two rows of 3
	c.Observe("a.weight", []float32{0, 0, 3}, 3)
	c.Observe("b.weight", []float32{-2, 2}, 2)
	m := c.Matrix()
	want := map[string][]float32{"a.weight": {17.0 / 3, 29.0 / 3, 54.0 / 3}, "b.weight": {4, 4}}
	for n, w := range want {
		for j := range w {
			if math.Abs(float64(m.Columns[n][j]-w[j])) > 1e-6 {
				t.Fatalf("%s: %v, want %v", n, m.Columns[n], w)
			}
		}
	}
	path := filepath.Join(t.TempDir(), "m.imatrix")
	if err := m.Write(path, map[string]string{"dataset": "x.txt"}); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	for n := range want {
		if !slices.Equal(got.Columns[n], m.Columns[n]) {
			t.Errorf("%s read back as %v, wrote %v", n, got.Columns[n], m.Columns[n])
		}
	}
	if got.Hash() != m.Hash() || len(got.Hash()) != 64 {
		t.Errorf("hash %q after the round trip, %q before", got.Hash(), m.Hash())
	}
	m.Columns["b.weight"][1] = 4.5
	if got.Hash() == m.Hash() {
		t.Error("a changed value keeps the hash")
	}
}

// writeRaw writes a safetensors file with the given header entries and data.
func writeRaw(t *testing.T, header map[string]any, data []byte) string {
	t.Helper()
	js, _ := json.Marshal(header)
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	b = append(append(b, js...), data...)
	path := filepath.Join(t.TempDir(), "m.imatrix")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReadErrors(t *testing.T) {
	f32 := func(v ...float32) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		return b
	}
	entry := func(dtype string, shape []int, n int) map[string]any {
		return map[string]any{"dtype": dtype, "shape": shape, "data_offsets": []int{0, n}}
	}
	for _, c := range []struct {
		name   string
		header map[string]any
		data   []byte
		want   string
	}{
		{"not a weight", map[string]any{"a.bias": entry("F32", []int{1}, 4)}, f32(1), `"a.bias": want the name of a weight`},
		{"matrix", map[string]any{"a.weight": entry("F32", []int{1, 1}, 4)}, f32(1), "want a non-empty F32 vector"},
		{"bf16", map[string]any{"a.weight": entry("BF16", []int{2}, 4)}, f32(1), "want a non-empty F32 vector"},
		{"negative", map[string]any{"a.weight": entry("F32", []int{2}, 8)}, f32(1, -1), "column 1 is -1"},
		{"NaN", map[string]any{"a.weight": entry("F32", []int{1}, 4)}, f32(float32(math.NaN())), "column 0 is NaN"},
		{"infinite", map[string]any{"a.weight": entry("F32", []int{1}, 4)}, f32(float32(math.Inf(1))), "column 0 is +Inf"},
		{"empty", map[string]any{}, nil, "no tensors"},
		{"short", map[string]any{"a.weight": entry("F32", []int{2}, 8)}, f32(1), "outside the data section"},
	} {
		_, err := Read(writeRaw(t, c.header, c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := Read(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file was read")
	}
}

// FuzzReadImatrix: any bytes as an importance matrix file are read or refused, never a panic.
func FuzzReadImatrix(f *testing.F) {
	m := &Matrix{Columns: map[string][]float32{"model.layers.0.mlp.down_proj.weight": {1, 2, 3}}}
	path := filepath.Join(f.TempDir(), "seed")
	if err := m.Write(path, map[string]string{"dataset": "seed"}); err != nil {
		f.Fatal(err)
	}
	seed, _ := os.ReadFile(path)
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "m")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if m, err := Read(p); err == nil {
			for n, v := range m.Columns {
				if len(v) == 0 || !strings.HasSuffix(n, ".weight") {
					t.Fatalf("accepted %q %v", n, v)
				}
			}
		}
	})
}
