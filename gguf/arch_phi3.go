package gguf

import "fmt"

// Phi-3, Phi-3.5 and Phi-4-mini (llama.cpp's "phi3", conversion/phi.py, src/models/phi3.cpp): the Llama decoder
// with Hugging Face's fused projections kept as they are (attn_qkv: q, k then v rows, Phi3's qkv_proj; ffn_up:
// gate then up rows, its gate_up_proj), rotary embeddings in Hugging Face's order on the first
// rope.dimension_count dimensions of each head (Phi-4-mini: partial_rotary_factor 0.75), and longrope scaling
// as two tensors of per-pair factors with an attention factor.
func init() {
	register("phi3", archInfo{
		hf:            "Phi3ForCausalLM",
		partialRotary: true,
		names: map[string]string{
			"attn_qkv.weight": "self_attn.qkv_proj.weight",
			"ffn_up.weight":   "mlp.gate_up_proj.weight",
			// llama.cpp also loads separate q/k/v projections and their biases for phi3; the converter writes the
			// fused one, which is what Hugging Face's Phi3 has. The shared gate and biases are no phi3 tensors.
			"attn_q.weight": "", "attn_k.weight": "", "attn_v.weight": "",
			"attn_q.bias": "", "attn_k.bias": "", "attn_v.bias": "", "attn_output.bias": "",
			"ffn_gate.weight": "", "ffn_gate.bias": "", "ffn_up.bias": "", "ffn_down.bias": "",
		},
		configTensors: []string{phi3LongFactors, phi3ShortFactors},
		keys:          []string{"rope.scaling.attn_factor"},
		config:        phi3Config,
	})
}

const (
	phi3LongFactors  = "rope_factors_long.weight"
	phi3ShortFactors = "rope_factors_short.weight"
)

// phi3Config maps what llama.cpp computes from a phi3 file onto Phi3Config.
//
// Longrope: the two factor tensors become rope_scaling's long_factor and short_factor, with
// rope.scaling.original_context_length (llama.cpp: context_length when absent) and rope.scaling.attn_factor (on
// cos and sin; llama.cpp: 1 when absent) as original_max_position_embeddings and attention_factor. llama.cpp picks
// one factor set per context, by the context size it allocates (the long one when that exceeds the original
// context); Hugging Face, and layerstream, by the length of the sequence: the short factors while it fits the
// original context, the long ones from then on. The two agree whenever they pick the same set
// (scripts/fixtures/gguf_families.py compares both).
//
// Sliding window: the converter writes Phi3Config's sliding_window, but llama.cpp's phi3 loader turns sliding
// attention off ("Phi SWA is currently disabled"): every layer attends to the whole context, and so does
// layerstream on these files.
func phi3Config(m archMeta, cfg map[string]any) error {
	delete(cfg, "sliding_window")
	attn := 1.0
	attnKey := m.key("rope.scaling.attn_factor")
	if v, ok, err := m.Float(attnKey); err != nil {
		return err
	} else if ok {
		attn = v
	}
	long, hasLong := m.Tensor(phi3LongFactors)
	short, hasShort := m.Tensor(phi3ShortFactors)
	switch {
	case !hasLong && !hasShort:
		if attn != 1 {
			return fmt.Errorf("metadata %s is %g without longrope factors (%s): an attention factor alone is not supported", attnKey, attn, phi3LongFactors)
		}
		return nil
	case !hasLong || !hasShort:
		have, missing := phi3LongFactors, phi3ShortFactors
		if hasShort {
			have, missing = missing, have
		}
		return fmt.Errorf("tensor %q without %q: longrope needs both factor sets", have, missing)
	}
	if rs, ok := cfg["rope_scaling"].(map[string]any); ok {
		return fmt.Errorf("metadata %s: %v scaling with longrope factors (%s) is not supported (llama.cpp applies both)", m.key("rope.scaling.*"), rs["rope_type"], phi3LongFactors)
	}
	rot, _ := cfg["head_dim"].(int)
	if v, ok, err := m.Int(m.key("rope.dimension_count")); err != nil {
		return err
	} else if ok {
		rot = v
	}
	orig, _ := cfg["max_position_embeddings"].(int)
	if v, ok, err := m.Int(m.key("rope.scaling.original_context_length")); err != nil {
		return err
	} else if ok {
		orig = v
	}
	longF, err := m.ropeFactors(long, rot/2)
	if err != nil {
		return err
	}
	shortF, err := m.ropeFactors(short, rot/2)
	if err != nil {
		return err
	}
	cfg["rope_scaling"] = map[string]any{"rope_type": "longrope", "long_factor": longF, "short_factor": shortF,
		"original_max_position_embeddings": orig, "attention_factor": attn}
	// Phi3Config has a top-level original_max_position_embeddings (4096 by default), which transformers prefers.
	cfg["original_max_position_embeddings"] = orig
	return nil
}
