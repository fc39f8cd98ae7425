package checkpoint_test

import (
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/hffixture"
)

// TestLlama4Tensors: opening the llama4_text fixture marks the q and k projections (over the query and the
// key/value heads) to be read in rotate-half order and no other tensor, and expands the fused experts into one
// gate_up_proj [2·inter, hidden] and one down_proj [hidden, inter] per expert, transposed on reading.
func TestLlama4Tensors(t *testing.T) {
	ck, err := checkpoint.Open(hffixture.Checkpoint(t, "llama4_text", hffixture.V5))
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range ck.Tensors {
		want := 0
		switch {
		case strings.HasSuffix(ti.Name, ".self_attn.q_proj.weight"):
			want = ck.Config.NumAttentionHeads
		case strings.HasSuffix(ti.Name, ".self_attn.k_proj.weight"):
			want = ck.Config.NumKeyValueHeads
		}
		if ti.InterleavedRotaryHeads != want {
			t.Errorf("%s: InterleavedRotaryHeads %d, want %d", ti.Name, ti.InterleavedRotaryHeads, want)
		}
	}
	for name, shape := range map[string][]int64{
		"model.layers.1.feed_forward.experts.3.gate_up_proj.weight": {96, 64},
		"model.layers.3.feed_forward.experts.0.down_proj.weight":    {64, 48},
	} {
		ti, ok := ck.Tensor(name)
		if !ok || !ti.Transposed || len(ti.Shape) != 2 || ti.Shape[0] != shape[0] || ti.Shape[1] != shape[1] {
			t.Errorf("%s: %+v (found %v), want shape %v, transposed", name, ti, ok, shape)
		}
	}
}

// TestTruthy: attn_temperature_tuning reads as Python tests it for truth: booleans, and numbers (Scout's 4).
func TestTruthy(t *testing.T) {
	for in, want := range map[string]bool{"true": true, "false": false, "4": true, "0": false, "0.5": true} {
		var v checkpoint.Truthy
		if err := v.UnmarshalJSON([]byte(in)); err != nil || bool(v) != want {
			t.Errorf("%s: %v (%v), want %v", in, v, err, want)
		}
	}
	var v checkpoint.Truthy
	if err := v.UnmarshalJSON([]byte(`"yes"`)); err == nil {
		t.Errorf(`"yes" read as %v, want an error`, v)
	}
}
