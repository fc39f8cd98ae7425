package checkpoint

// The newest dense families (issue #35): OLMo 3 and Ministral 3. Their registrations live here, apart from
// families.go, so that families added beside them touch different lines.
func init() {
	// OLMo 3: OLMo 2's decoder with sliding-window layers (layer_types; absent: every fourth layer full, as
	// Olmo3Config derives them) and rope per layer type. transformers 5's Olmo3Config gives a missing rope_theta
	// its default_theta 500000 in both entries of rope_parameters; transformers 4's Olmo3Config defaults
	// rope_theta to 10000 (the flat spelling), which the family compares with 500000 (engine/model/olmo3.go).
	RegisterArchitecture(Architecture{Name: "Olmo3ForCausalLM", ModelType: "olmo3",
		Keys:                      []string{"attention_bias", "sliding_window", "layer_types"},
		Defaults:                  map[string]any{"rms_norm_eps": 1e-5, "sliding_window": 4096},
		DefaultLayerTypeRopeTheta: map[string]float64{"full_attention": 500000.0, "sliding_attention": 500000.0}})
	// Ministral 3: Mistral's decoder with yarn rope and queries scaled by position (rope_parameters'
	// llama_4_scaling_beta). Its rope dict also carries max_position_embeddings, which transformers' yarn does
	// not read (it takes config.json's; Ministral3Config skips the key at rope validation): accepted, unused.
	// Without rope_parameters, Ministral3Config's default yarn dict applies.
	RegisterArchitecture(Architecture{Name: "Ministral3ForCausalLM", ModelType: "ministral3",
		Keys:     []string{"sliding_window"},
		RopeKeys: []string{"llama_4_scaling_beta", "max_position_embeddings"},
		Defaults: map[string]any{"rms_norm_eps": 1e-5, "head_dim": 128, "sliding_window": nil,
			"rope_parameters": map[string]any{"type": "yarn", "rope_theta": 1000000.0, "factor": 16.0,
				"original_max_position_embeddings": 16384, "beta_fast": 32.0, "beta_slow": 1.0, "mscale_all_dim": 1.0,
				"mscale": 1.0, "llama_4_scaling_beta": 0.1}}})
}
