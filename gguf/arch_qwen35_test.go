package gguf

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestQwen35PredictionBlocks: a qwen35 file holding a multi-token-prediction block after the decoder's (as the
// converter writes a checkpoint with mtp.*: block_count and attention.recurrent_layers counting it,
// nextn_predict_layers 1, blk.4.* with its nextn.* tensors) opens as the same checkpoint as the file without it
// (the converted qwen3_5 fixture): the same config, the same tensors; the block is left unread.
func TestQwen35PredictionBlocks(t *testing.T) {
	src := filepath.Join("testdata", "families", "qwen3_5.gguf")
	g, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f := &testFile{}
	for _, kv := range g.KVs {
		switch kv.Key {
		case "qwen35.block_count":
			f.kv(kv.Key, uint32(5))
		case "qwen35.attention.recurrent_layers":
			f.kv(kv.Key, append(slices.Clone(kv.Value.V.([]bool)), false))
		default:
			f.kvs = append(f.kvs, kv)
		}
	}
	f.kv("qwen35.nextn_predict_layers", uint32(1))
	dims := func(d []int64) []uint64 {
		out := make([]uint64, len(d))
		for i, v := range d {
			out[i] = uint64(v)
		}
		return out
	}
	for _, ti := range g.Tensors {
		data := raw[ti.Offset : ti.Offset+ti.Size]
		f.tensor(ti.Name, ti.Type, data, dims(ti.Dims)...)
		if rest, ok := strings.CutPrefix(ti.Name, "blk.3."); ok { // the prediction block: a full layer's tensors
			f.tensor("blk.4."+rest, ti.Type, data, dims(ti.Dims)...)
		}
	}
	for _, n := range []string{"nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight"} {
		f.tensor("blk.4."+n, 0, f32Bytes(make([]float32, 64)...), 64)
	}
	f.tensor("blk.4.nextn.eh_proj.weight", 0, f32Bytes(make([]float32, 128*64)...), 128, 64)
	path := filepath.Join(t.TempDir(), "mtp.gguf")
	if err := os.WriteFile(path, f.bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := OpenCheckpoint(src)
	if err != nil {
		t.Fatal(err)
	}
	got, err := OpenCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Config.NumHiddenLayers != 4 || fmt.Sprint(got.Config.LayerTypes) != fmt.Sprint(want.Config.LayerTypes) {
		t.Errorf("config: %d layers %v, want 4 %v", got.Config.NumHiddenLayers, got.Config.LayerTypes, want.Config.LayerTypes)
	}
	var gotNames, wantNames []string
	for _, ti := range got.Tensors {
		gotNames = append(gotNames, ti.Name)
	}
	for _, ti := range want.Tensors {
		wantNames = append(wantNames, ti.Name)
	}
	slices.Sort(gotNames)
	slices.Sort(wantNames)
	if !slices.Equal(gotNames, wantNames) {
		t.Errorf("tensors %v, want %v", gotNames, wantNames)
	}
}
