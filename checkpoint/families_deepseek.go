package checkpoint

// DeepSeek-V3 (and Kimi K2, which reuses its architecture): multi-head latent attention, and GLM-4.5's router with
// its groups. Its registration lives here, apart from families.go, so that families added beside it touch
// different lines.
func init() {
	RegisterArchitecture(Architecture{Name: "DeepseekV3ForCausalLM", ModelType: "deepseek_v3",
		Keys: []string{"attention_bias", "moe_intermediate_size", "n_routed_experts", "num_local_experts", "n_shared_experts",
			"routed_scaling_factor", "n_group", "topk_group", "first_k_dense_replace", "norm_topk_prob", "num_experts_per_tok",
			"num_nextn_predict_layers", "num_mtp_layers", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
			"v_head_dim", "qk_head_dim", "rope_interleave",
			// DeepSeek's own config.json: the choices of its remote code that transformers' class hard-codes (sigmoid
			// scores, the bias-corrected group-limited choice, every layer past first_k_dense_replace sparse), read
			// and refused at other values by engine/model; and training or parallelism settings (the auxiliary
			// loss, expert parallelism) that do not change the forward pass.
			"scoring_func", "topk_method", "moe_layer_freq", "aux_loss_alpha", "seq_aux", "ep_size"},
		// DeepseekV3Config's defaults (transformers 4.57 and 5 alike); head_dim is not among them: both versions set
		// it to qk_rope_head_dim whatever config.json says, and the family reads qk_rope_head_dim.
		Defaults: map[string]any{"moe_intermediate_size": 2048, "n_shared_experts": 1, "routed_scaling_factor": 2.5,
			"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "v_head_dim": 128, "qk_nope_head_dim": 128,
			"n_group": 8, "topk_group": 4, "num_experts_per_tok": 8, "first_k_dense_replace": 3, "norm_topk_prob": true,
			"rope_interleave": true, "num_nextn_predict_layers": 1, "scoring_func": "sigmoid", "topk_method": "noaux_tc",
			"moe_layer_freq": 1},
		HeadParts: latentHeadParts})
}

// LatentAttention are DeepSeek-V3's multi-head latent attention keys: the ranks of the low-rank query (nil: null,
// a full q_proj) and key/value projections, each head's query/key split into a part without rotary embeddings
// and a rotated part (one rotated key shared by every head), the value's size, whether the rotated dimensions
// are interleaved pairs; and the router settings of DeepSeek's remote code (ScoringFunc, TopKMethod,
// MoELayerFreq), which transformers fixes at sigmoid, noaux_tc and 1.
type LatentAttention struct {
	KVLoraRank     int    `json:"kv_lora_rank"`
	QLoraRank      *int   `json:"q_lora_rank"`
	QKRopeHeadDim  int    `json:"qk_rope_head_dim"`
	QKNopeHeadDim  int    `json:"qk_nope_head_dim"`
	QKHeadDim      int    `json:"qk_head_dim"`
	VHeadDim       int    `json:"v_head_dim"`
	RopeInterleave bool   `json:"rope_interleave"`
	ScoringFunc    string `json:"scoring_func"`
	TopKMethod     string `json:"topk_method"`
	MoELayerFreq   int    `json:"moe_layer_freq"`
}

// latentHeadParts cuts DeepSeek-V3's kv_b_proj [heads·(nope + v), kv_lora_rank] into its key rows, stored per
// head transposed (k_b_proj [heads·kv_lora_rank, nope]: the absorbed query's product reads whole rows), and its
// value rows (v_b_proj [heads·v, kv_lora_rank]), the names and layouts of llama.cpp's attn_k_b and attn_v_b.
func latentHeadParts(c *Config) []HeadParts {
	return []HeadParts{{Name: "self_attn.kv_b_proj.weight", Heads: c.NumAttentionHeads, Parts: []HeadPart{
		{Name: "self_attn.k_b_proj.weight", Rows: c.QKNopeHeadDim, Transposed: true},
		{Name: "self_attn.v_b_proj.weight", Rows: c.VHeadDim}}}}
}
