package gguf

// Qwen3: the Llama tensors plus an RMSNorm over each head of q and k (attn_q_norm, attn_k_norm: [head_dim]), in
// Hugging Face's rotary order (the converter's Qwen3Model does not permute q/k; llama.cpp ropes them NEOX-style).
// head_dim comes from attention.key_length (Qwen3-0.6B and 4B: 128, not hidden/heads). llama.cpp's qwen3 loader
// reads no key of its own beyond the shared ones (layer_norm_rms_epsilon); a reranker's cls.output.weight and
// classifier.output_labels are refused by name.
func init() {
	register("qwen3", archInfo{hf: "Qwen3ForCausalLM", names: map[string]string{
		"attn_q_norm.weight": "self_attn.q_norm.weight",
		"attn_k_norm.weight": "self_attn.k_norm.weight",
	}})
}
