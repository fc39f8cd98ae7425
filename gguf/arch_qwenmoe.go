package gguf

// Qwen2-MoE (Qwen1.5-MoE, Qwen2-57B-A14B) and Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B, Qwen3-Coder): every layer a
// mixture of experts, softmax router scores, in Hugging Face's rotary order. llama.cpp's graphs fix what
// transformers reads from the config: qwen2moe never renormalizes the chosen experts' weights, qwen3moe always
// does (norm_topk_prob false and true), and neither has dense layers (decoder_sparse_step 1, no
// mlp_only_layers). Qwen2-MoE adds a shared expert (ffn_*_shexp) scaled by sigmoid(ffn_gate_inp_shexp·x).
// The experts' width is expert_feed_forward_length, or as llama.cpp takes it, feed_forward_length divided by
// expert_used_count; the shared expert's expert_shared_feed_forward_length, or feed_forward_length.
func init() {
	register("qwen2moe", archInfo{hf: "Qwen2MoeForCausalLM", names: map[string]string{
		"ffn_gate_inp.weight":       "mlp.gate.weight",
		"ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
		"ffn_gate_shexp.weight":     "mlp.shared_expert.gate_proj.weight",
		"ffn_up_shexp.weight":       "mlp.shared_expert.up_proj.weight",
		"ffn_down_shexp.weight":     "mlp.shared_expert.down_proj.weight",
	}, keys: []string{"expert_feed_forward_length", "expert_shared_feed_forward_length"},
		moe: &moeInfo{countKey: "num_experts", experts: qwenExperts},
		config: func(m archMeta, cfg map[string]any) error {
			_, bias := m.Tensor("blk.0.attn_q.bias")
			cfg["model_type"], cfg["qkv_bias"], cfg["norm_topk_prob"] = "qwen2_moe", bias, false
			shared, err := m.intOr("expert_shared_feed_forward_length", cfg["intermediate_size"].(int))
			if err != nil {
				return err
			}
			cfg["shared_expert_intermediate_size"] = shared
			return qwenMoEConfig(m, cfg)
		}})
	register("qwen3moe", archInfo{hf: "Qwen3MoeForCausalLM", names: map[string]string{
		"attn_q_norm.weight":  "self_attn.q_norm.weight",
		"attn_k_norm.weight":  "self_attn.k_norm.weight",
		"ffn_gate_inp.weight": "mlp.gate.weight",
	}, keys: []string{"expert_feed_forward_length"}, moe: &moeInfo{countKey: "num_experts", experts: qwenExperts},
		config: func(m archMeta, cfg map[string]any) error {
			cfg["model_type"], cfg["norm_topk_prob"] = "qwen3_moe", true
			return qwenMoEConfig(m, cfg)
		}})
}

// qwenMoEConfig writes what the two Qwen mixtures share: the experts' width, and every layer sparse.
func qwenMoEConfig(m archMeta, cfg map[string]any) error {
	inter, err := m.intOr("expert_feed_forward_length", cfg["intermediate_size"].(int)/cfg["num_experts_per_tok"].(int))
	if err != nil {
		return err
	}
	cfg["moe_intermediate_size"], cfg["decoder_sparse_step"], cfg["mlp_only_layers"] = inter, 1, []int{}
	return nil
}

// intOr reads the architecture's integer key k, or def where the file lacks it.
func (m archMeta) intOr(k string, def int) (int, error) {
	v, ok, err := m.Int(m.key(k))
	if err != nil || !ok {
		return def, err
	}
	return v, nil
}
