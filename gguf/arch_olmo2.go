package gguf

import "fmt"

// OLMo 2: norms after each branch instead of before (post_attention_norm, post_ffw_norm → Hugging Face's
// post_attention_layernorm, post_feedforward_layernorm), and an RMSNorm over the whole q and k projections
// (attn_q_norm [heads·head_dim], attn_k_norm [kv_heads·head_dim]), in Hugging Face's rotary order (the
// converter's Olmo2Model does not permute q/k; llama.cpp ropes them NEOX-style). The shared pre-norm names are
// refused: llama.cpp's olmo2 has none, and the shared ffn_norm would otherwise land on
// post_attention_layernorm.
func init() {
	register("olmo2", archInfo{hf: "Olmo2ForCausalLM", qkNormWhole: true, names: map[string]string{
		"post_attention_norm.weight": "post_attention_layernorm.weight",
		"post_ffw_norm.weight":       "post_feedforward_layernorm.weight",
		"attn_q_norm.weight":         "self_attn.q_norm.weight",
		"attn_k_norm.weight":         "self_attn.k_norm.weight",
		"attn_norm.weight":           "",
		"ffn_norm.weight":            "",
	}, config: olmo2Config})
}

// olmo2Config refuses OLMo 3's sliding-window layers, which the converter writes under the olmo2 architecture
// (attention.sliding_window with a sliding_window_pattern, and in llama.cpp no rope scaling on those layers).
func olmo2Config(m archMeta, _ map[string]any) error {
	if v, ok, err := m.Int(m.key("attention.sliding_window")); err != nil {
		return err
	} else if ok && v > 0 {
		return fmt.Errorf("metadata %s is %d: OLMo 3's sliding-window layers are not supported", m.key("attention.sliding_window"), v)
	}
	return nil
}
