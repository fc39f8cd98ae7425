package synth

import "maps"

// GptOss makes a shape a gpt-oss model (GptOssForCausalLM): attention with biases and one sink logit per head,
// sliding-window (SlidingWindow) and full attention alternating from the first layer, and in every layer a router
// with a bias over Experts experts of width IntermediateSize, ExpertsPerTok per token, whose fused gate_up and
// down projections are stored as OpenAI publishes them: MXFP4 blocks (U8 [experts, out, in/32, 16], two 4-bit
// codes a byte) and scales (U8 [experts, out, in/32], E8M0), with float biases; a yarn rope of Factor over
// OriginalContext positions.
type GptOss struct {
	Experts, ExpertsPerTok, SlidingWindow, OriginalContext int
	Factor                                                 float64
}

// mxfp4Scale is the E8M0 byte of every MXFP4 block of a synthetic gpt-oss shape: 2^(120-127), so that random
// 4-bit codes (E2M1, root mean square about 2.9) spread about as N(0, 0.02).
const mxfp4Scale = 120

// gptOss120b is gpt-oss-120b's shape, from its config.json: 36 layers, 128 experts of 2880, 4 a token.
var gptOss120b = Shape{HiddenSize: 2880, IntermediateSize: 2880, NumLayers: 36, NumHeads: 64, NumKVHeads: 8, HeadDim: 64,
	VocabSize: 201088, MaxPositionEmbeddings: 131072, RopeTheta: 150000, RMSNormEps: 1e-5, BOSTokenID: 199998,
	EOSTokenID: 200002, GptOss: &GptOss{Experts: 128, ExpertsPerTok: 4, SlidingWindow: 128, OriginalContext: 4096, Factor: 32}}

// gptossLayer lists the tensors of a gpt-oss layer (names under p).
func (s *Shape) gptossLayer(p string) []tensorSpec {
	h, hd, inter, e := int64(s.HiddenSize), int64(s.HeadDim), int64(s.IntermediateSize), int64(s.GptOss.Experts)
	q, kv := int64(s.NumHeads)*hd, int64(s.NumKVHeads)*hd
	m := func(name string, shape ...int64) tensorSpec { return tensorSpec{name: p + name, shape: shape} }
	mxfp4 := func(name string, out, in int64) []tensorSpec {
		return []tensorSpec{{name: p + name + "_blocks", shape: []int64{e, out, in / 32, 16}, bytes: true},
			{name: p + name + "_scales", shape: []int64{e, out, in / 32}, bytes: true, fill: mxfp4Scale},
			m(name+"_bias", e, out)}
	}
	out := []tensorSpec{{name: p + "input_layernorm.weight", shape: []int64{h}, ones: true},
		{name: p + "post_attention_layernorm.weight", shape: []int64{h}, ones: true},
		m("self_attn.q_proj.weight", q, h), m("self_attn.q_proj.bias", q),
		m("self_attn.k_proj.weight", kv, h), m("self_attn.k_proj.bias", kv),
		m("self_attn.v_proj.weight", kv, h), m("self_attn.v_proj.bias", kv),
		m("self_attn.o_proj.weight", h, q), m("self_attn.o_proj.bias", h),
		m("self_attn.sinks", int64(s.NumHeads)),
		m("mlp.router.weight", e, h), m("mlp.router.bias", e)}
	out = append(out, mxfp4("mlp.experts.gate_up_proj", 2*inter, h)...)
	return append(out, mxfp4("mlp.experts.down_proj", h, inter)...)
}

// gptossConfig adds a gpt-oss shape's keys to cfg (transformers 5's spelling, as the released config.json).
func (s *Shape) gptossConfig(cfg map[string]any) {
	g := s.GptOss
	types := make([]string, s.NumLayers)
	for l := range types {
		types[l] = map[bool]string{true: "sliding_attention", false: "full_attention"}[l%2 == 0]
	}
	delete(cfg, "rope_theta")
	maps.Copy(cfg, map[string]any{"architectures": []string{"GptOssForCausalLM"}, "model_type": "gpt_oss",
		"head_dim": s.HeadDim, "attention_bias": true, "layer_types": types, "sliding_window": g.SlidingWindow,
		"num_local_experts": g.Experts, "num_experts_per_tok": g.ExpertsPerTok, "swiglu_alpha": 1.702, "swiglu_limit": 7.0,
		"quantization_config": map[string]any{"quant_method": "mxfp4",
			"modules_to_not_convert": []string{"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
		"rope_parameters": map[string]any{"rope_type": "yarn", "rope_theta": s.RopeTheta, "factor": g.Factor,
			"original_max_position_embeddings": g.OriginalContext, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false}})
}
