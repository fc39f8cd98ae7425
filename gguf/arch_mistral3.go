package gguf

import "fmt"

// mistral3: llama.cpp's converter writes Ministral 3 (Ministral3ForCausalLM, and the text model of
// Mistral3ForConditionalGeneration) as Llama's tensors, q/k rows in the interleaved rotary order, under this
// architecture (src/models/mistral3.cpp). Ministral 3's queries are multiplied after rotation by
// 1 + β·ln(1 + ⌊p / o⌋) at position p: β attention.temperature_scale, o llama.cpp's n_ctx_orig_yarn
// (rope.scaling.original_context_length) — Hugging Face's llama_4_scaling_beta. rope.scaling.yarn_log_multiplier
// is YaRN's mscale_all_dim (llama.cpp takes mscale as 1): cos and sin are multiplied by
// get_mscale(factor, 1) / get_mscale(factor, mscale_all_dim), as transformers computes with both set. A file
// without a temperature scale (Mistral Small 3.x's text model) is Mistral's decoder (MistralForCausalLM).
//
// The graph reads no sliding window (every layer attends to the whole context), has no biases but the output
// projection's, which Ministral 3 does not have (refused), and takes rope_freqs factors, which are refused with
// every architecture but llama's.
func init() {
	register("mistral3", archInfo{hf: "Ministral3ForCausalLM", interleavedRotary: true,
		keys: []string{"rope.scaling.yarn_log_multiplier", "attention.temperature_scale"},
		names: map[string]string{"attn_q.bias": "", "attn_k.bias": "", "attn_v.bias": "", "attn_output.bias": "",
			"ffn_gate.bias": "", "ffn_up.bias": "", "ffn_down.bias": ""},
		config: mistral3Config})
}

// mistral3Config writes Ministral 3's (or Mistral's) rope_parameters from the shared keys and its own two.
func mistral3Config(m archMeta, cfg map[string]any) error {
	if w, ok := cfg["sliding_window"]; ok {
		return fmt.Errorf("metadata %s is %v: llama.cpp's mistral3 graph ignores it (every layer attends to the whole context); refusing the contradiction", m.key("attention.sliding_window"), w)
	}
	rope := map[string]any{"rope_type": "default", "rope_theta": cfg["rope_theta"]}
	rs, yarn := cfg["rope_scaling"].(map[string]any)
	for k, v := range rs {
		rope[k] = v
	}
	yarn = yarn && rs["rope_type"] == "yarn"
	if v, ok, err := m.Float(m.key("rope.scaling.yarn_log_multiplier")); err != nil {
		return err
	} else if ok && v != 0 {
		if !yarn {
			return fmt.Errorf("metadata %s is %g without yarn rope scaling: llama.cpp ignores it; refusing the contradiction", m.key("rope.scaling.yarn_log_multiplier"), v)
		}
		rope["mscale"], rope["mscale_all_dim"] = 1.0, float32JSON(v)
	}
	cfg["architectures"], cfg["model_type"] = []string{"MistralForCausalLM"}, "mistral"
	if beta, ok, err := m.Float(m.key("attention.temperature_scale")); err != nil {
		return err
	} else if ok && beta != 0 {
		if !yarn {
			// transformers reads the divisor from the rope's original_max_position_embeddings, which only a
			// scaled rope carries.
			return fmt.Errorf("metadata %s is %g without yarn rope scaling: not supported (Ministral 3's query scale divides positions by the yarn rope's original context)", m.key("attention.temperature_scale"), beta)
		}
		if _, ok := rope["original_max_position_embeddings"]; !ok {
			rope["original_max_position_embeddings"] = cfg["max_position_embeddings"] // llama.cpp's n_ctx_orig_yarn default
		}
		rope["llama_4_scaling_beta"] = float32JSON(beta)
		cfg["architectures"], cfg["model_type"] = []string{"Ministral3ForCausalLM"}, "ministral3"
	}
	cfg["rope_parameters"] = rope
	delete(cfg, "rope_theta")
	delete(cfg, "rope_scaling")
	return nil
}
