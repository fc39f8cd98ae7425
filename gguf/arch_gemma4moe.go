package gguf

import "fmt"

// Gemma 4's experts (enable_moe_block: beside every layer's MLP), as llama.cpp's converter writes them
// (conversion/gemma.py, Gemma4Model): the fused experts under their own names with Hugging Face's layout
// (ffn_gate_up_exps: per expert [2·moe_intermediate_size, hidden], gate rows first; ffn_down_exps: per expert
// [hidden, moe_intermediate_size]), cut per expert as the safetensors checkpoint's are; the router (ffn_gate_inp) with its
// input scale (ffn_gate_inp.scale, Hugging Face's router.scale), the per-expert output scale (ffn_down_exps.scale,
// router.per_expert_scale), and the experts' own norms. expert_count experts, expert_used_count of them per token,
// each expert_feed_forward_length wide; a file without expert_count is the dense model.
var (
	gemma4Experts = &moeInfo{countKey: "num_experts", optional: true, experts: map[string]string{
		"ffn_gate_up_exps.weight": "experts.%d.gate_up_proj.weight", "ffn_down_exps.weight": "experts.%d.down_proj.weight"}}
	gemma4ExpertNames = map[string]string{
		"ffn_gate_inp.weight":    "router.proj.weight",
		"ffn_gate_inp.scale":     "router.scale",
		"ffn_down_exps.scale":    "router.per_expert_scale",
		"pre_ffw_norm_2.weight":  "pre_feedforward_layernorm_2.weight",
		"post_ffw_norm_1.weight": "post_feedforward_layernorm_1.weight",
		"post_ffw_norm_2.weight": "post_feedforward_layernorm_2.weight",
	}
)

// gemma4MoEConfig writes enable_moe_block, top_k_experts and moe_intermediate_size where the file has experts
// (moeConfig has read expert_count and expert_used_count into num_experts and num_experts_per_tok).
func gemma4MoEConfig(m archMeta, cfg map[string]any) error {
	inter, hasInter, err := m.Int(m.key("expert_feed_forward_length"))
	if err != nil {
		return err
	}
	used, experts := cfg["num_experts_per_tok"].(int)
	switch {
	case !experts && hasInter:
		return fmt.Errorf("metadata %s is set without %s: refusing the contradiction", m.key("expert_feed_forward_length"), m.key("expert_count"))
	case !experts:
		return nil
	case !hasInter || inter <= 0:
		return fmt.Errorf("metadata %s is missing or not positive (llama.cpp's gemma4 requires it with experts)", m.key("expert_feed_forward_length"))
	}
	delete(cfg, "num_experts_per_tok")
	cfg["enable_moe_block"], cfg["top_k_experts"], cfg["moe_intermediate_size"] = true, used, inter
	return nil
}
