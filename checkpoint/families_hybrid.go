package checkpoint

// The hybrid linear-attention families (issue #35): three of every four layers Gated DeltaNet (layer_types
// "linear_attention"), the others full attention with an output gate. Their registrations live here, apart from
// families.go, so that families added beside them touch different lines.
func init() {
	linear := []string{"attention_bias", "layer_types", "linear_num_key_heads", "linear_num_value_heads",
		"linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim"}
	// Qwen3.5 (dense MLP; Qwen3_5TextConfig). Its partial_rotary_factor lives in rope_parameters.
	RegisterArchitecture(Architecture{Name: "Qwen3_5ForCausalLM", ModelType: "qwen3_5_text", Keys: linear,
		RopeKeys: []string{"mrope_section", "mrope_interleaved"},
		Defaults: map[string]any{"head_dim": 256, "linear_conv_kernel_dim": 4}})
}
