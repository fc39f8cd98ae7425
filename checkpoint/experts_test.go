package checkpoint

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSplitExperts: a fused [experts, in, out] tensor with interleaved gate/up columns (gpt-oss's gate_up_proj)
// reads back, expert by expert, as Linear's [out, in] with the gate rows first; a bias [experts, 2I] likewise; an
// un-transposed [experts, out, in] tensor (Gemma 4's) as plain slices.
func TestSplitExperts(t *testing.T) {
	const experts, in, out = 3, 4, 6 // out = 2·I, I = 3
	value := func(e, i, o int) float32 { return float32(100*e + 10*i + o) }
	var data []byte
	for e := range experts {
		for i := range in {
			for o := range out {
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(value(e, i, o)))
			}
		}
	}
	path := filepath.Join(t.TempDir(), "w.bin")
	const base = 16
	if err := os.WriteFile(path, append(make([]byte, base), data...), 0o644); err != nil {
		t.Fatal(err)
	}
	fused := TensorInfo{Name: "model.layers.7.mlp.experts.gate_up_proj", DType: F32, Shape: []int64{experts, in, out},
		File: path, Offset: base, Length: int64(len(data))}
	check := func(name string, f FusedExperts, want func(e, r, c int) float32, rows, cols int) {
		t.Helper()
		ts, err := expandFused(fused, []FusedExperts{f})
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != experts {
			t.Fatalf("%s: %d tensors, want %d", name, len(ts), experts)
		}
		for e, x := range ts {
			if want := "model.layers.7.mlp.experts." + string(rune('0'+e)) + ".gate_up_proj.weight"; x.Name != want {
				t.Fatalf("%s: expert %d is named %q, want %q", name, e, x.Name, want)
			}
			if x.Shape[0] != int64(rows) || x.Shape[1] != int64(cols) {
				t.Fatalf("%s: expert %d has shape %v, want [%d %d]", name, e, x.Shape, rows, cols)
			}
			b := make([]byte, x.Length)
			if err := ReadTensorAt(x, b); err != nil {
				t.Fatal(err)
			}
			for r := range rows {
				for c := range cols {
					got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*(r*cols+c):]))
					if w := want(e, r, c); got != w {
						t.Fatalf("%s: expert %d [%d, %d] = %v, want %v", name, e, r, c, got, w)
					}
				}
			}
		}
	}
	// gpt-oss: stored [in, out], out = gate/up interleaved. Row r < I is gate column 2r, row I+r up column 2r+1.
	check("transposed, interleaved", FusedExperts{Name: "mlp.experts.gate_up_proj", Expert: "mlp.experts.%d.gate_up_proj.weight", Transposed: true, Interleaved: true},
		func(e, r, c int) float32 {
			col := 2 * r
			if r >= out/2 {
				col = 2*(r-out/2) + 1
			}
			return value(e, c, col)
		}, out, in)
	// Llama 4: stored [in, out], gate then up halves already.
	check("transposed", FusedExperts{Name: "mlp.experts.gate_up_proj", Expert: "mlp.experts.%d.gate_up_proj.weight", Transposed: true},
		func(e, r, c int) float32 { return value(e, c, r) }, out, in)
	// Gemma 4: stored [out, in] already (here the stored axes read as rows in, columns out).
	check("plain", FusedExperts{Name: "mlp.experts.gate_up_proj", Expert: "mlp.experts.%d.gate_up_proj.weight"},
		func(e, r, c int) float32 { return value(e, r, c) }, in, out)
	// A bias [experts, 2I] interleaved.
	bias := fused
	bias.Name, bias.Shape, bias.Length = "model.layers.7.mlp.experts.gate_up_proj_bias", []int64{experts * in, out}, int64(len(data))
	ts, err := expandFused(bias, []FusedExperts{{Name: "mlp.experts.gate_up_proj_bias", Expert: "mlp.experts.%d.gate_up_proj.bias", Interleaved: true}})
	if err != nil || len(ts) != experts*in {
		t.Fatalf("bias: %d tensors, %v", len(ts), err)
	}
	b := make([]byte, ts[1].Length)
	if err := ReadTensorAt(ts[1], b); err != nil {
		t.Fatal(err)
	}
	for r, col := range []int{0, 2, 4, 1, 3, 5} {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*r:])); got != value(0, 1, col) {
			t.Fatalf("bias value %d = %v, want %v", r, got, value(0, 1, col))
		}
	}
	// Tensors of no fused entry, or outside the layers, pass through.
	for _, name := range []string{"model.layers.7.mlp.router.weight", "model.mlp.experts.gate_up_proj"} {
		other := fused
		other.Name = name
		if ts, err := expandFused(other, []FusedExperts{{Name: "mlp.experts.gate_up_proj", Expert: "x.%d"}}); err != nil || len(ts) != 1 || ts[0].Name != name {
			t.Fatalf("%s: expanded to %v (%v), want it unchanged", name, ts, err)
		}
	}
}

// TestSplitExpertsRefusals: what cannot be cut per expert is refused naming the tensor.
func TestSplitExpertsRefusals(t *testing.T) {
	for _, c := range []struct {
		t          TensorInfo
		transposed bool
		interleave bool
		want       string
	}{
		{TensorInfo{Name: "a", DType: F32, Shape: []int64{4}, Length: 16}, false, false, "stacked on the first axis"},
		{TensorInfo{Name: "b", DType: Q8_0, Shape: []int64{2, 32, 32}, Length: 2 * 32 * 34}, true, false, "must be float32"},
		{TensorInfo{Name: "c", DType: F32, Shape: []int64{2, 4, 3}, Length: 96}, true, true, "interleaved"},
		{TensorInfo{Name: "d", DType: F32, Shape: []int64{2, 2, 2, 2}, Length: 64}, true, false, "only matrices"},
		{TensorInfo{Name: "e", DType: F32, Shape: []int64{2, 2}, Length: 16, Shift: 1}, false, false, "reordered on reading"},
	} {
		if _, err := SplitExperts(c.t, "x.%d", c.transposed, c.interleave); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"`+c.t.Name+`"`) {
			t.Errorf("%s: got %v, want an error naming it and saying %q", c.t.Name, err, c.want)
		}
	}
}
