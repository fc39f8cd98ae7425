package checkpoint

// The newest dense families (issue #35): OLMo 3 and Ministral 3. Their registrations live here, apart from
// families.go, so that families added beside them touch different lines.
func init() {
	// OLMo 3: OLMo 2's decoder with sliding-window layers (layer_types; absent: every fourth layer full, as
	// Olmo3Config derives them) and rope per layer type. transformers 5's Olmo3Config gives a missing rope_theta
	// its default_theta 500000 in both entries of rope_parameters; transformers 4's Olmo3Config defaults
	// rope_theta to 10000 (the flat spelling), which the family compares with 500000 (engine/model/olmo3.go).
	RegisterArchitecture(Architecture{Name: "Olmo3ForCausalLM", ModelType: "olmo3",
		Keys:     []string{"attention_bias", "sliding_window", "layer_types"},
		Defaults: map[string]any{"rms_norm_eps": 1e-5, "sliding_window": 4096},
		DefaultLayerTypeRopeTheta: map[string]float64{"full_attention": 500000.0, "sliding_attention": 500000.0}})
}
