package gguf

import "fmt"

// MiniMax-M2: every layer a mixture of experts of width feed_forward_length (llama.cpp shapes them by it;
// expert_feed_forward_length, which the converter writes equal, is not used), sigmoid router scores
// (expert_gating_func, which llama.cpp's minimax-m2 requires), the choice biased by exp_probs_b
// (e_score_correction_bias), the chosen experts' unbiased scores renormalized (llama.cpp passes norm_w true and
// reads no expert_weights_scale); RMSNorms over the whole q and k projections; partial rotary embeddings in
// Hugging Face's rotate-half order (NEOX in llama.cpp). Names as transformers' MiniMaxM2 (block_sparse_moe,
// w1/w3/w2).
func init() {
	register("minimax-m2", archInfo{hf: "MiniMaxM2ForCausalLM", partialRotary: true, qkNormWhole: true, names: map[string]string{
		"attn_q_norm.weight":  "self_attn.q_norm.weight",
		"attn_k_norm.weight":  "self_attn.k_norm.weight",
		"ffn_gate_inp.weight": "block_sparse_moe.gate.weight",
		"exp_probs_b.bias":    "block_sparse_moe.e_score_correction_bias",
	}, keys: []string{"expert_feed_forward_length", "expert_gating_func"},
		moe: &moeInfo{countKey: "num_local_experts", experts: mixtralExperts},
		config: func(m archMeta, cfg map[string]any) error {
			cfg["model_type"] = "minimax_m2"
			if err := nestRope(m, cfg); err != nil {
				return err
			}
			return m.sigmoidGating(false)
		}})
}

// nestRope moves rope_theta and partial_rotary_factor into rope_parameters, where transformers 5's MiniMaxM2Config
// keeps them (it has no top-level partial_rotary_factor); rope scaling is refused by name.
func nestRope(m archMeta, cfg map[string]any) error {
	if rs, ok := cfg["rope_scaling"].(map[string]any); ok {
		return fmt.Errorf("metadata %s %q: rope scaling is not supported for %s", m.key("rope.scaling.type"), rs["rope_type"], m.arch)
	}
	rope := map[string]any{"rope_type": "default", "rope_theta": cfg["rope_theta"]}
	if f, ok := cfg["partial_rotary_factor"]; ok {
		rope["partial_rotary_factor"] = f
	}
	delete(cfg, "rope_theta")
	delete(cfg, "partial_rotary_factor")
	cfg["rope_parameters"] = rope
	return nil
}
