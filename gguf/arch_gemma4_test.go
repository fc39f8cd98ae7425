package gguf

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/hffixture"
)

// TestGemma4Config: the gemma4 file llama.cpp's converter made of the gemma4_text fixture reads back as that
// checkpoint: the same layer types, head sizes and key/value heads per layer, shared layers, MLP widths, per-layer
// inputs and rotary embeddings by layer type (the full layers' proportional rope from rope_freqs.weight), and
// every tensor under its Hugging Face name with its shape.
func TestGemma4Config(t *testing.T) {
	g, err := Open("testdata/families/gemma4_text.gguf")
	if err != nil {
		t.Fatal(err)
	}
	ck, err := g.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := hffixture.Dir("gemma4_text")
	if err != nil {
		t.Fatal(err)
	}
	hf, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, want := ck.Config, hf.Config
	gotDims, err := got.Gemma4LayerDims()
	if err != nil {
		t.Fatal(err)
	}
	wantDims, _ := want.Gemma4LayerDims()
	if !slices.Equal(got.LayerTypes, want.LayerTypes) || !slices.Equal(gotDims, wantDims) ||
		got.NumKVSharedLayers != want.NumKVSharedLayers || got.UseDoubleWideMLP != want.UseDoubleWideMLP ||
		got.IntermediateSize != want.IntermediateSize || got.HiddenSizePerLayerInput != want.HiddenSizePerLayerInput ||
		got.VocabSizePerLayerInput != want.VocabSizePerLayerInput || got.AttentionKEqV != want.AttentionKEqV ||
		*got.SlidingWindow != *want.SlidingWindow || *got.FinalLogitSoftcapping != *want.FinalLogitSoftcapping ||
		!maps.EqualFunc(got.RopeByLayerType, want.RopeByLayerType, func(a, b checkpoint.Rope) bool {
			return a.Type == b.Type && a.Theta == b.Theta && a.PartialRotaryFactor == b.PartialRotaryFactor && a.Factor == b.Factor
		}) {
		t.Errorf("derived config %+v\nthe checkpoint's %+v", got, want)
	}
	shapes := map[string][]int64{}
	for _, ti := range hf.Tensors {
		shapes[ti.Name] = ti.Shape
	}
	for _, ti := range ck.Tensors {
		if want, ok := shapes[ti.Name]; !ok || !slices.Equal(ti.Shape, want) {
			t.Errorf("tensor %s %v: the checkpoint has %v (%v)", ti.Name, ti.Shape, want, ok)
		}
		delete(shapes, ti.Name)
	}
	if len(shapes) > 0 {
		t.Errorf("tensors of the checkpoint missing from the file: %v", slices.Sorted(maps.Keys(shapes)))
	}
}

// TestGemma4Refuses: metadata llama.cpp reads otherwise than transformers would, or that layerstream does not
// implement, is refused by name.
func TestGemma4Refuses(t *testing.T) {
	for _, c := range []struct {
		kv   KV
		want string
	}{
		{kvOf("gemma4.attention.shared_kv_layers", uint32(3)), "needs at least two layers computing keys and values"},
		// Layers 2 and 3 (full) would reuse layer 1 in llama.cpp, a sliding one.
		{kvOf("gemma4.attention.sliding_window_pattern", []bool{true, true, false, false}), "layer 2 reuses layer 1's keys and values"},
		{kvOf("gemma4.attention.sliding_window_pattern", []bool{true, false}), "want one flag per layer"},
		{kvOf("gemma4.rope.dimension_count_swa", uint32(8)), "partial rotary embeddings are not supported"},
		{kvOf("gemma4.feed_forward_length", []uint32{96, 96, 96, 192}), "widths other than"},
		{kvOf("gemma4.attention.head_count_kv", []uint32{2, 1, 1, 1}), "layers of one type with 2 and 1 key/value heads"},
		{kvOf("gemma4.attention.value_length_swa", uint32(8)), "values of another size than the keys"},
		{kvOf("gemma4.final_logit_softcapping", float32(-1)), "gemma4.final_logit_softcapping is -1: want a positive soft-cap"},
	} {
		g, err := Open("testdata/families/gemma4_text.gguf")
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(g.KVs, func(kv KV) bool { return kv.Key == c.kv.Key })
		if i < 0 {
			t.Fatalf("the file has no %s", c.kv.Key)
		}
		g.KVs[i].Value = c.kv.Value
		if _, err := g.Checkpoint(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.kv.Key, err, c.want)
		}
	}
}
