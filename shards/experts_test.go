package shards

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/hffixture"
)

// shardedFusedCheckpoint is the llama4_text fixture (fused experts: feed_forward.experts.gate_up_proj and
// down_proj, [experts, in, out]) saved over two weight files and an index, as a large checkpoint is: layers 0-1
// and the embedding in the first, the rest in the second.
func shardedFusedCheckpoint(t *testing.T) *checkpoint.Checkpoint {
	t.Helper()
	dir := hffixture.Checkpoint(t, "llama4_text", hffixture.V5)
	whole := filepath.Join(dir, "model.safetensors")
	b, err := os.ReadFile(whole)
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(b)
	var header map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	data := b[8+n:]
	type entry struct {
		DType       string  `json:"dtype"`
		Shape       []int64 `json:"shape"`
		DataOffsets [2]int  `json:"data_offsets"`
	}
	files := [2]string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
	heads := [2]map[string]any{{}, {}}
	var bodies [2][]byte
	weightMap := map[string]string{}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range header {
			if k != "__metadata__" && !yield(k) {
				return
			}
		}
	}) {
		var e entry
		if err := json.Unmarshal(header[name], &e); err != nil {
			t.Fatal(err)
		}
		f := 1
		if strings.HasPrefix(name, "model.embed_tokens.") || strings.Contains(name, ".layers.0.") || strings.Contains(name, ".layers.1.") {
			f = 0
		}
		from := len(bodies[f])
		bodies[f] = append(bodies[f], data[e.DataOffsets[0]:e.DataOffsets[1]]...)
		heads[f][name] = entry{DType: e.DType, Shape: e.Shape, DataOffsets: [2]int{from, len(bodies[f])}}
		weightMap[name] = files[f]
	}
	for f := range files {
		h, err := json.Marshal(heads[f])
		if err != nil {
			t.Fatal(err)
		}
		for len(h)%8 != 0 {
			h = append(h, ' ')
		}
		out := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		if err := os.WriteFile(filepath.Join(dir, files[f]), append(append(out, h...), bodies[f]...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoint.IndexFile), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(whole); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

// TestSplitFusedExperts: a checkpoint over two files whose experts are fused ([experts, in, out], opened as one
// transposed view per expert) splits into shards holding each expert's [out, in] matrix, raw and quantized, which
// split --verify checks against the checkpoint; a change to one expert's bytes in place re-splits that layer's
// unit alone, and the shards hold the new values. The router stays float32 in the quantized split.
func TestSplitFusedExperts(t *testing.T) {
	ck := shardedFusedCheckpoint(t)
	const expert = "model.layers.3.feed_forward.experts.2.down_proj.weight"
	ti, ok := ck.Tensor(expert)
	if !ok || !ti.Transposed || filepath.Base(ti.File) != "model-00002-of-00002.safetensors" {
		t.Fatalf("%s: %+v (found %v), want a transposed view into the second file", expert, ti, ok)
	}
	for _, q := range []Quantization{None, Q8} {
		t.Run(fmt.Sprint(q), func(t *testing.T) {
			out := t.TempDir()
			s, err := Split(context.Background(), ck, SplitOptions{Out: out, Quantize: q, DiskRate: -1})
			if err != nil {
				t.Fatal(err)
			}
			if q == None {
				checkIdentical(t, s, ck)
			}
			if u := s.mustUnit(t, "layer.3"); !slices.ContainsFunc(u.Tensors, func(t TensorInfo) bool { return t.Name == expert }) {
				t.Fatalf("layer.3 holds %v, no %s", u.Tensors, expert)
			}
			for _, t2 := range s.mustUnit(t, "layer.1").Tensors {
				if kept := t2.DType == checkpoint.F32; strings.HasSuffix(t2.Name, ".feed_forward.router.weight") && !kept {
					t.Errorf("%s quantized to %s: the router keeps its dtype", t2.Name, t2.DType)
				}
			}
			r, err := s.Verify(context.Background(), ck)
			if err != nil || !r.OK() {
				t.Fatalf("verify: %v %v", err, r.Problems)
			}
		})
	}
	out := t.TempDir()
	split(t, ck, out, Raw)
	before := identities(t, out)
	flipTensor(t, ck, expert)
	ck, err := checkpoint.Open(ck.Dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Split(context.Background(), ck, SplitOptions{Out: out, DiskRate: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := rewritten(before, identities(t, out)); !slices.Equal(got, []string{"layer.3.shard"}) {
		t.Fatalf("rewrote %v, want only layer.3.shard", got)
	}
	checkIdentical(t, s, ck)
	if r, err := s.Verify(context.Background(), ck); err != nil || !r.OK() {
		t.Fatalf("verify after the re-split: %v %v", err, r.Problems)
	}
}
