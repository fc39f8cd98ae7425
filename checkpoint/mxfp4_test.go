package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// TestMXFP4Pairs: an MXFP4 pair (blocks [E, out, in/32, 16] and scales [E, out, in/32], met in either order)
// becomes one MXFP4 tensor [out, in] per expert whose bytes read back as ggml blocks of that expert's rows, the
// interleaved gate/up rows put in halves; a half without its other, or any other uint8 tensor, is refused by name.
func TestMXFP4Pairs(t *testing.T) {
	const experts, out, in = 2, 4, 64 // 2 blocks per row
	nb := out * in / 32               // blocks per expert
	blocks, scales := make([]byte, experts*nb*16), make([]byte, experts*nb)
	for i := range blocks {
		blocks[i] = byte(i * 7)
	}
	for i := range scales {
		scales[i] = byte(100 + i)
	}
	path := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(path, append(append(make([]byte, 8), blocks...), scales...), 0o644); err != nil {
		t.Fatal(err)
	}
	bt := TensorInfo{Name: "model.layers.3.mlp.experts.gate_up_proj_blocks", DType: U8, Shape: []int64{experts, out, in / 32, 16},
		File: path, Offset: 8, Length: int64(len(blocks))}
	st := TensorInfo{Name: "model.layers.3.mlp.experts.gate_up_proj_scales", DType: U8, Shape: []int64{experts, out, in / 32},
		File: path, Offset: 8 + int64(len(blocks)), Length: int64(len(scales))}
	fused := []FusedExperts{{Name: "mlp.experts.gate_up_proj_blocks", Scales: "mlp.experts.gate_up_proj_scales",
		Expert: "mlp.experts.%d.gate_up_proj.weight", Interleaved: true}}
	for _, order := range [][2]TensorInfo{{bt, st}, {st, bt}} {
		p := newMXFP4Pairs(fused)
		if ts, paired, err := p.add(order[0]); !paired || err != nil || ts != nil {
			t.Fatalf("first half: %v %v %v", ts, paired, err)
		}
		ts, paired, err := p.add(order[1])
		if !paired || err != nil || len(ts) != experts || p.unpaired() != nil {
			t.Fatalf("second half: %d tensors, %v, %v", len(ts), paired, err)
		}
		for e, x := range ts {
			if x.DType != MXFP4 || x.Shape[0] != out || x.Shape[1] != in || !strings.HasSuffix(x.Name, ".experts."+string(rune('0'+e))+".gate_up_proj.weight") {
				t.Fatalf("expert %d: %+v", e, x)
			}
			got := make([]byte, x.Length)
			if err := ReadTensorAt(x, got); err != nil {
				t.Fatal(err)
			}
			rb := in / 32 * 17
			for r := range out {
				stored := 2 * r // row r < out/2 is gate row r, stored at 2r; row out/2 + i is up row i, stored at 2i+1
				if r >= out/2 {
					stored = 2*(r-out/2) + 1
				}
				b0 := (e*out + stored) * (in / 32)
				want := make([]byte, rb)
				if err := quant.MXFP4FromSplit(want, blocks[b0*16:(b0+in/32)*16], scales[b0:b0+in/32]); err != nil {
					t.Fatal(err)
				}
				if string(got[r*rb:(r+1)*rb]) != string(want) {
					t.Fatalf("expert %d row %d: %x, want %x", e, r, got[r*rb:(r+1)*rb], want)
				}
			}
		}
	}
	p := newMXFP4Pairs(fused)
	p.add(bt)
	if err := p.unpaired(); err == nil || !strings.Contains(err.Error(), "gate_up_proj_blocks") {
		t.Errorf("blocks without scales: %v", err)
	}
	if _, _, err := p.add(TensorInfo{Name: "model.layers.0.mlp.other", DType: U8, Shape: []int64{4}}); err == nil || !strings.Contains(err.Error(), "mlp.other") {
		t.Errorf("another uint8 tensor: %v", err)
	}
}
