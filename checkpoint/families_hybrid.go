package checkpoint

import "slices"

// The hybrid linear-attention families (issue #35): three of every four layers Gated DeltaNet (layer_types
// "linear_attention"), the others full attention with an output gate. Their registrations live here, apart from
// families.go, so that families added beside them touch different lines.
func init() {
	linear := []string{"attention_bias", "layer_types", "linear_num_key_heads", "linear_num_value_heads",
		"linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "linear_tiled_value_heads",
		// The released checkpoints' multi-token-prediction layers (mtp.*, left unread: UnreadLayers), which
		// transformers' classes do not compute.
		"mtp_num_hidden_layers"}
	// Qwen3.5 (dense MLP; Qwen3_5TextConfig). Its partial_rotary_factor lives in rope_parameters; its mrope keys
	// give text positions plain rope.
	qwen35 := Architecture{Name: "Qwen3_5ForCausalLM", ModelType: "qwen3_5_text", Keys: linear,
		RopeKeys: []string{"mrope_section", "mrope_interleaved"},
		Defaults: map[string]any{"head_dim": 256, "linear_conv_kernel_dim": 4}}
	RegisterArchitecture(qwen35)
	RegisterArchitecture(qwen35VisionLanguage(qwen35, "Qwen3_5ForConditionalGeneration", "qwen3_5"))
	experts := []string{"num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
		"output_router_logits", "router_aux_loss_coef"}
	// Qwen3.5-MoE (Qwen3_5MoeTextConfig): the same hybrid with a mixture of experts and a gated shared expert on
	// every layer, always renormalized (no norm_topk_prob, decoder_sparse_step nor mlp_only_layers). The config
	// class has no intermediate_size (no layer is dense): a config.json giving one is read and unused; absent, it
	// is a placeholder (512, unused) so that the shape checks hold.
	qwen35MoE := Architecture{Name: "Qwen3_5MoeForCausalLM", ModelType: "qwen3_5_moe_text", Keys: slices.Concat(linear, experts),
		RopeKeys: []string{"mrope_section", "mrope_interleaved"},
		Defaults: map[string]any{"head_dim": 256, "linear_conv_kernel_dim": 4, "moe_intermediate_size": 512,
			"intermediate_size": 512, "shared_expert_intermediate_size": 512, "num_experts_per_tok": 8, "num_experts": 256}}
	RegisterArchitecture(qwen35MoE)
	RegisterArchitecture(qwen35VisionLanguage(qwen35MoE, "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe"))
	// Qwen3-Next: the same hybrid with grouped in_proj_qkvz / in_proj_ba, and a mixture of experts on the layers
	// num_experts, decoder_sparse_step and mlp_only_layers make sparse (Qwen3NextConfig's defaults).
	RegisterArchitecture(Architecture{Name: "Qwen3NextForCausalLM", ModelType: "qwen3_next",
		Keys: slices.Concat(linear, experts, []string{"partial_rotary_factor", "decoder_sparse_step", "mlp_only_layers", "norm_topk_prob",
			"linear_grouped_ba"}),
		Defaults: map[string]any{"head_dim": 256, "linear_conv_kernel_dim": 4, "intermediate_size": 5632, "num_experts": 512,
			"num_experts_per_tok": 10, "decoder_sparse_step": 1, "moe_intermediate_size": 512,
			"shared_expert_intermediate_size": 512, "norm_topk_prob": true}})
}

// qwen35VisionLanguage is a released Qwen3.5 checkpoint's architecture (Qwen3_5ForConditionalGeneration,
// Qwen3_5MoeForConditionalGeneration) read as a text model: text's decoder from text_config and under
// model.language_model.*, lm_head.weight, the vision tower (model.visual.*) left out, the image and video token
// ids accepted by name. transformers computes its text-only forward as the text class does (the same logits, 0
// difference, on the qwen3_5_moe fixture's weights saved by Qwen3_5MoeForConditionalGeneration.save_pretrained).
func qwen35VisionLanguage(text Architecture, name, modelType string) Architecture {
	a := visionLanguage(text, name, modelType, "vision_config", "image_token_id", "video_token_id",
		"vision_start_token_id", "vision_end_token_id")
	a.SkippedTensorPrefixes = []string{"model.visual."}
	return a
}
