package checkpoint

// gpt-oss (GptOssConfig): its registration and keys live here, apart from families.go, so that families added
// beside it touch different lines.
func init() {
	// experts_per_token (a second spelling of num_experts_per_tok) and initial_context_length (the rope dict's
	// original_max_position_embeddings) are in OpenAI's released config.json; transformers reads neither (the
	// family refuses an experts_per_token that disagrees with num_experts_per_tok). hidden_act is read and
	// unused: the experts' clamped SwiGLU is fixed (GptOssExperts).
	RegisterArchitecture(Architecture{Name: "GptOssForCausalLM", ModelType: "gpt_oss",
		Keys: []string{"attention_bias", "sliding_window", "layer_types", "num_experts", "num_local_experts", "num_experts_per_tok",
			"swiglu_alpha", "swiglu_limit", "experts_per_token", "initial_context_length"},
		Defaults: map[string]any{"rms_norm_eps": 1e-5, "head_dim": 64, "num_experts_per_tok": 4, "sliding_window": 128,
			"attention_bias": true, "swiglu_alpha": 1.702, "swiglu_limit": 7.0},
		DefaultRopeTheta: 150000.0,
		// The experts saved fused and input-major ([E, hidden, 2·inter], [E, inter, hidden]), gate and up columns
		// interleaved (GptOssExperts): opened as one [out, in] tensor per expert, gate rows then up rows.
		FusedExperts: []FusedExperts{
			{Name: "mlp.experts.gate_up_proj", Expert: "mlp.experts.%d.gate_up_proj.weight", Transposed: true, Interleaved: true},
			{Name: "mlp.experts.gate_up_proj_bias", Expert: "mlp.experts.%d.gate_up_proj.bias", Interleaved: true},
			{Name: "mlp.experts.down_proj", Expert: "mlp.experts.%d.down_proj.weight", Transposed: true},
			{Name: "mlp.experts.down_proj_bias", Expert: "mlp.experts.%d.down_proj.bias"},
			// OpenAI's released checkpoints: the two matrices in MXFP4, [out, in] already (gate and up rows
			// interleaved), read as ggml's MXFP4 blocks.
			{Name: "mlp.experts.gate_up_proj_blocks", Scales: "mlp.experts.gate_up_proj_scales", Expert: "mlp.experts.%d.gate_up_proj.weight", Interleaved: true},
			{Name: "mlp.experts.down_proj_blocks", Scales: "mlp.experts.down_proj_scales", Expert: "mlp.experts.%d.down_proj.weight"},
		},
		QuantMethods: []string{"mxfp4"},
		DefaultRope: map[string]any{"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false,
			"original_max_position_embeddings": 4096}})
}

// GptOss are gpt-oss's own keys: the experts' clamped SwiGLU (swiglu_alpha, the sigmoid's gain; swiglu_limit,
// the clamp of the gate from above and of the up projection on both sides) and OpenAI's second spelling of the
// experts per token (0 when absent).
type GptOss struct {
	SwigluAlpha     float64 `json:"swiglu_alpha"`
	SwigluLimit     float64 `json:"swiglu_limit"`
	ExpertsPerToken int     `json:"experts_per_token"`
}
