package gguf

import "fmt"

// Qwen3-Next (qwen3next: Qwen3NextForCausalLM) as llama.cpp's converter writes it (conversion/qwen.py,
// Qwen3NextModel) and its graph reads it (src/models/qwen3next.cpp): Qwen3.5-MoE's hybrid (arch_qwen35.go,
// arch_qwen35moe.go: norms stored as 1 + w but ssm_norm, ssm_a = -exp(A_log), the squeezed conv1d, experts cut from
// ffn_*_exps with the gated shared expert) with Qwen3-Next's own DeltaNet projections: the converter splits
// in_proj_qkvz, grouped per key head, into Qwen3.5's separate attn_qkv and attn_gate (value heads in Hugging
// Face's grouped order: this converter does not tile them) but keeps in_proj_ba grouped as ssm_ba
// (linear_grouped_ba); an older file's ssm_in is in_proj_qkvz itself. llama.cpp routes every layer through the
// experts, renormalizing the chosen ones' weights (norm_topk_prob), so the file has no dense layer.
func init() {
	a := qwen35MoEInfo()
	a.hf = "Qwen3NextForCausalLM"
	delete(a.names, "ssm_beta.weight")
	delete(a.names, "ssm_alpha.weight")
	a.names["ssm_ba.weight"] = "linear_attn.in_proj_ba.weight"
	a.names["ssm_in.weight"] = "linear_attn.in_proj_qkvz.weight"
	a.config = qwen3NextConfig
	register("qwen3next", a)
}

// qwen3NextConfig is qwen35MoEConfig with Qwen3-Next's model type, projections and sparse-layer keys.
func qwen3NextConfig(m archMeta, cfg map[string]any) error {
	if err := qwen35MoEConfig(m, cfg); err != nil {
		return err
	}
	var legacy, split bool
	for _, t := range m.Tensors {
		if n, part, ok := layerOf(t.Name); ok && n < cfg["num_hidden_layers"].(int) {
			legacy = legacy || part == "ssm_in.weight"
			split = split || part == "attn_qkv.weight" || part == "attn_gate.weight"
		}
	}
	if legacy && split {
		return fmt.Errorf("the file has both ssm_in (in_proj_qkvz) and attn_qkv/attn_gate: one layout or the other")
	}
	delete(cfg, "linear_tiled_value_heads")
	cfg["model_type"], cfg["linear_grouped_ba"] = "qwen3_next", !legacy
	cfg["decoder_sparse_step"], cfg["mlp_only_layers"], cfg["norm_topk_prob"] = 1, []int{}, true
	return nil
}
