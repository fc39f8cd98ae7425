package gguf

import (
	"fmt"
	"maps"
)

// llama.cpp's expert_gating_func values (llama-hparams.h).
const (
	gatingNone    = 0
	gatingSoftmax = 1
	gatingSigmoid = 2
)

// GLM-4.5 and 4.6: the first leading_dense_block_count layers dense, the others a mixture of experts with
// sigmoid router scores (expert_gating_func, sigmoid where absent), the choice biased by exp_probs_b
// (e_score_correction_bias), the chosen experts' weights renormalized where expert_weights_norm says so and
// multiplied by expert_weights_scale (routed_scaling_factor; 0 or absent: 1), plus expert_shared_count shared
// experts fused as one MLP of that many times expert_feed_forward_length; group-limited routing from
// expert_group_count and expert_group_used_count (n_group, topk_group). The norm before the MLP is
// post_attention_norm; q/k biases and per-head q/k norms where the file has them; partial rotary embeddings in
// Hugging Face's rotate-half order (llama.cpp ropes glm4moe NEOX-style). The nextn_predict_layers blocks after
// the model's are multi-token-prediction layers, left out (archInfo.nextn); rope.dimension_sections (multimodal
// rotary sections) is refused by name.
func init() {
	register("glm4moe", archInfo{hf: "Glm4MoeForCausalLM", partialRotary: true, names: withSigmoidExperts(map[string]string{
		"post_attention_norm.weight": "post_attention_layernorm.weight",
		"ffn_norm.weight":            "",
		"attn_q_norm.weight":         "self_attn.q_norm.weight",
		"attn_k_norm.weight":         "self_attn.k_norm.weight",
	}), keys: sigmoidExpertKeys,
		moe: &moeInfo{countKey: "n_routed_experts", experts: qwenExperts, groups: true}, nextn: true, nextnKey: "num_nextn_predict_layers", config: glm4moeConfig})
}

// sigmoidExpertKeys are the expert keys sigmoidExperts reads (GLM-4.5's and DeepSeek-V3's).
var sigmoidExpertKeys = []string{"expert_feed_forward_length", "expert_shared_count", "leading_dense_block_count",
	"expert_weights_scale", "expert_weights_norm", "expert_gating_func"}

// withSigmoidExperts adds to names the router, choice bias and shared experts' tensors of GLM-4.5 and DeepSeek-V3.
func withSigmoidExperts(names map[string]string) map[string]string {
	maps.Copy(names, map[string]string{
		"ffn_gate_inp.weight":   "mlp.gate.weight",
		"exp_probs_b.bias":      "mlp.gate.e_score_correction_bias",
		"ffn_gate_shexp.weight": "mlp.shared_experts.gate_proj.weight",
		"ffn_up_shexp.weight":   "mlp.shared_experts.up_proj.weight",
		"ffn_down_shexp.weight": "mlp.shared_experts.down_proj.weight",
	})
	return names
}

// glm4moeConfig reads GLM-4.5's expert keys into Glm4MoeConfig's.
func glm4moeConfig(m archMeta, cfg map[string]any) error {
	_, bias := m.Tensor("blk.0.attn_q.bias")
	_, qkNorm := m.Tensor("blk.0.attn_q_norm.weight")
	cfg["model_type"], cfg["attention_bias"], cfg["use_qk_norm"] = "glm4_moe", bias, qkNorm
	return m.sigmoidExperts(cfg, true)
}

// sigmoidExperts reads the expert keys GLM-4.5 and DeepSeek-V3 share into their config's spelling: the experts'
// and shared experts' widths, the leading dense layers, expert_weights_scale and _norm, one group unless
// expertGroups read more, and sigmoid gating (orNone: see sigmoidGating).
func (m archMeta) sigmoidExperts(cfg map[string]any, orNone bool) error {
	if _, ok := cfg["n_group"]; !ok { // one group unless expertGroups read more
		cfg["n_group"], cfg["topk_group"] = 1, 1
	}
	for hf, k := range map[string]string{"moe_intermediate_size": "expert_feed_forward_length", "n_shared_experts": "expert_shared_count"} {
		v, ok, err := m.Int(m.key(k))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("metadata %s is missing (llama.cpp requires it)", m.key(k))
		}
		cfg[hf] = v
	}
	dense, err := m.intOr("leading_dense_block_count", 0)
	if err != nil {
		return err
	}
	cfg["first_k_dense_replace"] = dense
	scale := 1.0
	if v, ok, err := m.Float(m.key("expert_weights_scale")); err != nil {
		return err
	} else if ok && v != 0 {
		scale = v
	}
	cfg["routed_scaling_factor"] = float32JSON(scale)
	norm, _, err := m.Bool(m.key("expert_weights_norm"))
	if err != nil {
		return err
	}
	cfg["norm_topk_prob"] = norm
	return m.sigmoidGating(orNone)
}

// sigmoidGating refuses an expert_gating_func other than sigmoid (the routers these families' models compute);
// orNone accepts a file without it (or with "none"), which llama.cpp's glm4moe reads as sigmoid.
func (m archMeta) sigmoidGating(orNone bool) error {
	v, ok, err := m.Int(m.key("expert_gating_func"))
	if err != nil {
		return err
	}
	switch {
	case ok && v == gatingSigmoid, orNone && (!ok || v == gatingNone):
		return nil
	case !ok:
		return fmt.Errorf("metadata %s is missing (llama.cpp cannot route without it; this architecture's router is sigmoid, 2)", m.key("expert_gating_func"))
	case v == gatingSoftmax:
		return fmt.Errorf("metadata %s is 1 (softmax): only sigmoid router scores (2) are supported for %s", m.key("expert_gating_func"), m.arch)
	}
	return fmt.Errorf("metadata %s is %d: only sigmoid router scores (2) are supported for %s", m.key("expert_gating_func"), v, m.arch)
}
