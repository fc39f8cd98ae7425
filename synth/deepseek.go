package synth

import (
	"fmt"
	"maps"
)

// DeepSeek makes a shape a DeepSeek-V3 (DeepseekV3ForCausalLM): multi-head latent attention in every layer, a
// dense MLP of IntermediateSize in the first FirstDense layers and a mixture of experts in the others (Experts
// routed experts of MoEIntermediateSize in Groups groups, TopGroups kept, ExpertsPerTok per token, one shared
// expert of SharedExperts × MoEIntermediateSize), a yarn rope of Factor over OriginalContext positions.
type DeepSeek struct {
	QLoraRank, KVLoraRank, QKNopeHeadDim, QKRopeHeadDim, VHeadDim int
	Experts, ExpertsPerTok, MoEIntermediateSize, SharedExperts    int
	Groups, TopGroups, FirstDense                                 int
	RoutedScaling, Factor                                         float64
	OriginalContext                                               int
}

// deepseekV3 is DeepSeek-V3's (and R1's) shape, from its config.json: 671B parameters (without the
// multi-token-prediction layer, which transformers does not compute).
var deepseekV3 = Shape{HiddenSize: 7168, IntermediateSize: 18432, NumLayers: 61, NumHeads: 128, NumKVHeads: 128,
	VocabSize: 129280, MaxPositionEmbeddings: 163840, RopeTheta: 10000, RMSNormEps: 1e-6, BOSTokenID: 0, EOSTokenID: 1,
	DeepSeek: &DeepSeek{QLoraRank: 1536, KVLoraRank: 512, QKNopeHeadDim: 128, QKRopeHeadDim: 64, VHeadDim: 128,
		Experts: 256, ExpertsPerTok: 8, MoEIntermediateSize: 2048, SharedExperts: 1, Groups: 8, TopGroups: 4, FirstDense: 3,
		RoutedScaling: 2.5, Factor: 40, OriginalContext: 4096}}

// deepseekLayer lists the tensors of DeepSeek-V3 layer l (names under p).
func (s *Shape) deepseekLayer(p string, l int) []tensorSpec {
	h, y := int64(s.HiddenSize), s.DeepSeek
	m := func(name string, shape ...int64) tensorSpec { return tensorSpec{name: p + name, shape: shape} }
	norm := func(name string, n int64) tensorSpec {
		return tensorSpec{name: p + name, shape: []int64{n}, ones: true}
	}
	heads, qk := int64(s.NumHeads), int64(y.QKNopeHeadDim+y.QKRopeHeadDim)
	out := []tensorSpec{norm("input_layernorm.weight", h), norm("post_attention_layernorm.weight", h),
		m("self_attn.q_a_proj.weight", int64(y.QLoraRank), h), norm("self_attn.q_a_layernorm.weight", int64(y.QLoraRank)),
		m("self_attn.q_b_proj.weight", heads*qk, int64(y.QLoraRank)),
		m("self_attn.kv_a_proj_with_mqa.weight", int64(y.KVLoraRank+y.QKRopeHeadDim), h),
		norm("self_attn.kv_a_layernorm.weight", int64(y.KVLoraRank)),
		m("self_attn.kv_b_proj.weight", heads*int64(y.QKNopeHeadDim+y.VHeadDim), int64(y.KVLoraRank)),
		m("self_attn.o_proj.weight", h, heads*int64(y.VHeadDim))}
	mlp := func(prefix string, inter int64) []tensorSpec {
		return []tensorSpec{m(prefix+"gate_proj.weight", inter, h), m(prefix+"up_proj.weight", inter, h), m(prefix+"down_proj.weight", h, inter)}
	}
	if l < y.FirstDense {
		return append(out, mlp("mlp.", int64(s.IntermediateSize))...)
	}
	out = append(out, m("mlp.gate.weight", int64(y.Experts), h), m("mlp.gate.e_score_correction_bias", int64(y.Experts)))
	for e := range y.Experts {
		out = append(out, mlp(fmt.Sprintf("mlp.experts.%d.", e), int64(y.MoEIntermediateSize))...)
	}
	return append(out, mlp("mlp.shared_experts.", int64(y.SharedExperts*y.MoEIntermediateSize))...)
}

// deepseekConfig adds a DeepSeek-V3 shape's keys to cfg (transformers 5's spelling).
func (s *Shape) deepseekConfig(cfg map[string]any) {
	y := s.DeepSeek
	delete(cfg, "rope_theta")
	maps.Copy(cfg, map[string]any{"architectures": []string{"DeepseekV3ForCausalLM"}, "model_type": "deepseek_v3",
		"q_lora_rank": y.QLoraRank, "kv_lora_rank": y.KVLoraRank, "qk_nope_head_dim": y.QKNopeHeadDim,
		"qk_rope_head_dim": y.QKRopeHeadDim, "v_head_dim": y.VHeadDim, "n_routed_experts": y.Experts,
		"num_experts_per_tok": y.ExpertsPerTok, "moe_intermediate_size": y.MoEIntermediateSize, "n_shared_experts": y.SharedExperts,
		"n_group": y.Groups, "topk_group": y.TopGroups, "first_k_dense_replace": y.FirstDense, "routed_scaling_factor": y.RoutedScaling,
		"norm_topk_prob": true, "rope_interleave": true, "num_nextn_predict_layers": 0,
		"rope_parameters": map[string]any{"rope_type": "yarn", "rope_theta": s.RopeTheta, "factor": y.Factor,
			"original_max_position_embeddings": y.OriginalContext, "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0}})
}
