package gguf

import "fmt"

// Qwen3.5-MoE (qwen35moe: Qwen3_5MoeForCausalLM, and the text model of Qwen3_5MoeForConditionalGeneration):
// Qwen3.5's hybrid (arch_qwen35.go, read the same way) with a mixture of experts on every layer and Qwen's gated
// shared expert (src/models/qwen35moe.cpp): softmax routing over expert_count, the top expert_used_count
// renormalized, experts of expert_feed_forward_length (llama.cpp's default: feed_forward_length over
// expert_used_count) cut from ffn_*_exps, a shared expert of expert_shared_feed_forward_length (default
// feed_forward_length) gated by sigmoid(ffn_gate_inp_shexp·x). No layer has a dense MLP.
func init() {
	register("qwen35moe", qwen35MoEInfo())
}

// qwen35MoEInfo is what Qwen3.5-MoE's files and Qwen3-Next's share.
func qwen35MoEInfo() archInfo {
	a := qwen35Info()
	a.hf = "Qwen3_5MoeForCausalLM"
	for k, v := range map[string]string{
		"ffn_gate_inp.weight":       "mlp.gate.weight",
		"ffn_gate_inp_shexp.weight": "mlp.shared_expert_gate.weight",
		"ffn_gate_shexp.weight":     "mlp.shared_expert.gate_proj.weight",
		"ffn_up_shexp.weight":       "mlp.shared_expert.up_proj.weight",
		"ffn_down_shexp.weight":     "mlp.shared_expert.down_proj.weight",
		"ffn_gate.weight":           "",
		"ffn_up.weight":             "",
		"ffn_down.weight":           "",
	} {
		a.names[k] = v
	}
	a.keys = append(a.keys, "expert_feed_forward_length", "expert_shared_feed_forward_length")
	a.moe = &moeInfo{countKey: "num_experts", experts: qwenExperts}
	a.config = qwen35MoEConfig
	return a
}

// qwen35MoEConfig is qwen35Config with the experts' widths.
func qwen35MoEConfig(m archMeta, cfg map[string]any) error {
	if err := qwen35Config(m, cfg); err != nil {
		return err
	}
	inter, err := m.intOr("expert_feed_forward_length", cfg["intermediate_size"].(int)/cfg["num_experts_per_tok"].(int))
	if err != nil {
		return err
	}
	shared, err := m.intOr("expert_shared_feed_forward_length", cfg["intermediate_size"].(int))
	if err != nil {
		return err
	}
	if inter <= 0 || shared <= 0 {
		return fmt.Errorf("metadata %s (%d) and %s (%d): want positive expert widths", m.key("expert_feed_forward_length"), inter, m.key("expert_shared_feed_forward_length"), shared)
	}
	cfg["model_type"], cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"] = "qwen3_5_moe_text", inter, shared
	return nil
}
