package gguf

// OLMoE: every layer a mixture of experts of width feed_forward_length, softmax router scores, the chosen
// experts' weights not renormalized (llama.cpp's olmoe graph passes norm_w false, as OLMoE's norm_topk_prob
// false), and an RMSNorm over the whole q and k projections (as OLMo 2's), in Hugging Face's rotary order.
// llama.cpp adds the attention biases a file has (attention_bias, from the tensors present).
func init() {
	register("olmoe", archInfo{hf: "OlmoeForCausalLM", qkNormWhole: true, names: map[string]string{
		"attn_q_norm.weight":  "self_attn.q_norm.weight",
		"attn_k_norm.weight":  "self_attn.k_norm.weight",
		"ffn_gate_inp.weight": "mlp.gate.weight",
	}, moe: &moeInfo{countKey: "num_experts", experts: qwenExperts},
		config: func(m archMeta, cfg map[string]any) error {
			biasesFromTensors(m, cfg)
			cfg["norm_topk_prob"] = false
			return nil
		}})
}
