package gguf

// gpt-oss (llama.cpp's gpt-oss, its LLM_ARCH_OPENAI_MOE): attention with q/k/v/o biases and sinks (attn_sinks),
// its even layers sliding (attention.sliding_window; llama.cpp's swa pattern 2, as GptOssConfig derives
// layer_types), yarn rope in Hugging Face's rotate-half order (llama.cpp rounds yarn's correction range, so the
// file means truncate true, whatever the checkpoint said); every layer a mixture of experts of
// expert_feed_forward_length whose router (ffn_gate_inp, with a bias) picks the top experts_per_token logits and
// weighs them by their softmax (llama.cpp's softmax_weight gating, fixed for this architecture), each expert the
// clamped SwiGLU with llama.cpp's fixed alpha 1.702 and limit 7 (transformers' defaults) and biases. The fused
// gate and up experts (ffn_gate_exps, ffn_up_exps: MXFP4 in the released files) read as one gate_up_proj per
// expert, gate rows first, as the family binds them.
func init() {
	register("gpt-oss", archInfo{hf: "GptOssForCausalLM", names: map[string]string{
		"post_attention_norm.weight": "post_attention_layernorm.weight",
		"ffn_norm.weight":            "",
		"attn_sinks.weight":          "self_attn.sinks",
		"ffn_gate_inp.weight":        "mlp.router.weight",
		"ffn_gate_inp.bias":          "mlp.router.bias",
	}, keys: []string{"expert_feed_forward_length"},
		moe: &moeInfo{countKey: "num_local_experts", experts: map[string]string{
			"ffn_gate_exps.weight": "mlp.experts.%d.gate_up_proj.weight", "ffn_up_exps.weight": "",
			"ffn_gate_exps.bias": "mlp.experts.%d.gate_up_proj.bias", "ffn_up_exps.bias": "",
			"ffn_down_exps.weight": "mlp.experts.%d.down_proj.weight", "ffn_down_exps.bias": "mlp.experts.%d.down_proj.bias",
		}, gateUp: map[string]string{"ffn_gate_exps.weight": "ffn_up_exps.weight", "ffn_gate_exps.bias": "ffn_up_exps.bias"}},
		config: func(m archMeta, cfg map[string]any) error {
			inter, err := m.intOr("expert_feed_forward_length", cfg["intermediate_size"].(int))
			if err != nil {
				return err
			}
			cfg["model_type"], cfg["intermediate_size"], cfg["attention_bias"] = "gpt_oss", inter, true
			return nil
		}})
}
