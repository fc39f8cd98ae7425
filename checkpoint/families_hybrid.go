package checkpoint

import "slices"

// The hybrid linear-attention families (issue #35): three of every four layers Gated DeltaNet (layer_types
// "linear_attention"), the others full attention with an output gate. Their registrations live here, apart from
// families.go, so that families added beside them touch different lines.
func init() {
	linear := []string{"attention_bias", "layer_types", "linear_num_key_heads", "linear_num_value_heads",
		"linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim"}
	// Qwen3.5 (dense MLP; Qwen3_5TextConfig). Its partial_rotary_factor lives in rope_parameters; its mrope keys
	// give text positions plain rope.
	RegisterArchitecture(Architecture{Name: "Qwen3_5ForCausalLM", ModelType: "qwen3_5_text", Keys: linear,
		RopeKeys: []string{"mrope_section", "mrope_interleaved"},
		Defaults: map[string]any{"head_dim": 256, "linear_conv_kernel_dim": 4}})
	// Qwen3-Next: the same hybrid with grouped in_proj_qkvz / in_proj_ba, and a mixture of experts on the layers
	// num_experts, decoder_sparse_step and mlp_only_layers make sparse (engine/model refuses those for now).
	RegisterArchitecture(Architecture{Name: "Qwen3NextForCausalLM", ModelType: "qwen3_next",
		Keys: slices.Concat(linear, []string{"partial_rotary_factor", "num_experts", "num_experts_per_tok", "decoder_sparse_step",
			"mlp_only_layers", "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob",
			"output_router_logits", "router_aux_loss_coef"}),
		Defaults: map[string]any{"head_dim": 256, "linear_conv_kernel_dim": 4, "num_experts": 512, "decoder_sparse_step": 1}})
}

// HybridExperts are the keys saying which of Qwen3-Next's layers have a mixture of experts rather than a dense
// MLP: layer i is sparse unless it is in MLPOnlyLayers, NumExperts is 0 or (i+1) is not a multiple of
// DecoderSparseStep (Qwen3NextDecoderLayer).
type HybridExperts struct {
	NumExperts        int   `json:"num_experts"`
	DecoderSparseStep int   `json:"decoder_sparse_step"`
	MLPOnlyLayers     []int `json:"mlp_only_layers"`
}
