package gguf

import "fmt"

// OLMo 2: norms after each branch instead of before (post_attention_norm, post_ffw_norm → Hugging Face's
// post_attention_layernorm, post_feedforward_layernorm), and an RMSNorm over the whole q and k projections
// (attn_q_norm [heads·head_dim], attn_k_norm [kv_heads·head_dim]), in Hugging Face's rotary order (the
// converter's Olmo2Model does not permute q/k; llama.cpp ropes them NEOX-style). The shared pre-norm names are
// refused: llama.cpp's olmo2 has none, and the shared ffn_norm would otherwise land on
// post_attention_layernorm. OLMo 3's files are olmo2 files with sliding-window layers (olmo3Config).
func init() {
	register("olmo2", archInfo{hf: "Olmo2ForCausalLM", qkNormWhole: true, keys: []string{"attention.sliding_window_pattern", "rope.freq_base_swa"}, names: map[string]string{
		"post_attention_norm.weight": "post_attention_layernorm.weight",
		"post_ffw_norm.weight":       "post_feedforward_layernorm.weight",
		"attn_q_norm.weight":         "self_attn.q_norm.weight",
		"attn_k_norm.weight":         "self_attn.k_norm.weight",
		"attn_norm.weight":           "",
		"ffn_norm.weight":            "",
	}, config: olmo2Config})
}

// olmo2Config reads a file with a positive attention.sliding_window as OLMo 3 (the converter writes Olmo3ForCausalLM
// checkpoints under the olmo2 architecture), and refuses OLMo 3's keys in a file without one, which llama.cpp
// ignores there.
func olmo2Config(m archMeta, cfg map[string]any) error {
	if v, ok, err := m.Int(m.key("attention.sliding_window")); err != nil {
		return err
	} else if ok && v > 0 {
		return olmo3Config(m, cfg)
	}
	for _, k := range []string{"attention.sliding_window_pattern", "rope.freq_base_swa"} {
		if _, ok := m.Get(m.key(k)); ok {
			return fmt.Errorf("metadata %s is set without a sliding window (%s): llama.cpp ignores it; refusing the contradiction", m.key(k), m.key("attention.sliding_window"))
		}
	}
	return nil
}
