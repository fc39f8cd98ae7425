package checkpoint

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSplitHeads: a matrix of 3 heads' rows (2 key rows then 1 value row per head, 4 columns) read as its parts:
// the key part per head transposed, the value part as rows, both from a file (ReadTensorAt) and each element
// where the layout says; a quantized or misshapen matrix is refused naming it.
func TestSplitHeads(t *testing.T) {
	const heads, nk, nv, cols = 3, 2, 1, 4
	per := nk + nv
	vals := make([]float32, heads*per*cols)
	b := make([]byte, 4*len(vals))
	for i := range vals {
		vals[i] = float32(i)
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(vals[i]))
	}
	path := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(path, append([]byte("pad!"), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	src := TensorInfo{Name: "model.layers.0.self_attn.kv_b_proj.weight", DType: F32, Shape: []int64{int64(heads * per), cols},
		File: path, Offset: 4, Length: int64(len(b))}
	p := latentHeadParts(&Config{NumAttentionHeads: heads, LatentAttention: LatentAttention{QKNopeHeadDim: nk, VHeadDim: nv}})
	parts, err := expandHeadParts(src, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != 2 || parts[0].Name != "model.layers.0.self_attn.k_b_proj.weight" || parts[1].Name != "model.layers.0.self_attn.v_b_proj.weight" {
		t.Fatalf("parts %+v", parts)
	}
	at := func(h, r, c int) float32 { return vals[(h*per+r)*cols+c] }
	for i, pt := range parts {
		got := make([]byte, pt.Length)
		if err := ReadTensorAt(pt, got); err != nil {
			t.Fatal(err)
		}
		for h := range heads {
			for r := range []int{nk, nv}[i] {
				for c := range cols {
					idx, want := (h*cols+c)*nk+r, at(h, r, c) // k_b_proj [heads·cols, nope]: head h's key rows transposed
					if i == 1 {
						idx, want = (h*nv+r)*cols+c, at(h, nk+r, c) // v_b_proj [heads·v, cols]
					}
					if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*idx:])); v != want {
						t.Errorf("%s head %d row %d col %d: %g, want %g", pt.Name, h, r, c, v, want)
					}
				}
			}
		}
	}
	if want := []int64{heads * cols, nk}; parts[0].Shape[0] != want[0] || parts[0].Shape[1] != want[1] {
		t.Errorf("k_b_proj shape %v, want %v", parts[0].Shape, want)
	}
	for _, c := range []struct {
		t    TensorInfo
		want string
	}{{TensorInfo{Name: src.Name, DType: Q8_0, Shape: src.Shape}, "needs float32"},
		{TensorInfo{Name: src.Name, DType: F32, Shape: []int64{int64(heads*per + 1), cols}}, "want [3 heads × 3 rows"}} {
		if _, err := expandHeadParts(c.t, p); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one saying %q", c.t.Shape, err, c.want)
		}
	}
}
