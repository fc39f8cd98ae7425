package synth

import (
	"maps"
)

// qwen35Dense is the dense Qwen3.5 shape of transformers 5.24's Qwen3_5TextConfig defaults (8.95B parameters: 24
// Gated DeltaNet layers, 8 full-attention ones, a 248,320-token vocabulary).
var qwen35Dense = Shape{HiddenSize: 4096, IntermediateSize: 12288, NumLayers: 32, NumHeads: 16, NumKVHeads: 4, HeadDim: 256,
	VocabSize: 248320, MaxPositionEmbeddings: 32768, RopeTheta: 10000000, RMSNormEps: 1e-6, BOSTokenID: 1,
	EOSTokenID: 2, Hybrid: &Hybrid{LinearKeyHeads: 16, LinearValueHeads: 32, LinearKeyDim: 128, LinearValueDim: 128,
		ConvKernel: 4, FullAttentionInterval: 4, PartialRotary: 0.25}}

// Hybrid is a Qwen3.5 shape's linear attention: every FullAttentionInterval-th layer is full attention (q_proj
// giving per head the query and an output gate, per-head q/k norms, rotary on PartialRotary of each head), the
// others Gated DeltaNet layers of LinearKeyHeads key heads of LinearKeyDim and LinearValueHeads value heads of
// LinearValueDim, after a causal conv of ConvKernel.
type Hybrid struct {
	LinearKeyHeads, LinearValueHeads, LinearKeyDim, LinearValueDim int
	ConvKernel, FullAttentionInterval                              int
	PartialRotary                                                  float64
}

// full reports whether layer l is a full-attention layer.
func (h *Hybrid) full(l int) bool { return (l+1)%h.FullAttentionInterval == 0 }

// hybridLayer lists the tensors of a Qwen3.5 layer l (names under p).
func (s *Shape) hybridLayer(p string, l int) []tensorSpec {
	h, hd, y := int64(s.HiddenSize), int64(s.HeadDim), s.Hybrid
	m := func(name string, shape ...int64) tensorSpec { return tensorSpec{name: p + name, shape: shape} }
	norm := func(name string, n int64) tensorSpec {
		return tensorSpec{name: p + name, shape: []int64{n}, ones: true}
	}
	out := []tensorSpec{norm("input_layernorm.weight", h), norm("post_attention_layernorm.weight", h),
		m("mlp.gate_proj.weight", int64(s.IntermediateSize), h), m("mlp.up_proj.weight", int64(s.IntermediateSize), h),
		m("mlp.down_proj.weight", h, int64(s.IntermediateSize))}
	if y.full(l) {
		return append(out, m("self_attn.q_proj.weight", 2*int64(s.NumHeads)*hd, h),
			m("self_attn.k_proj.weight", int64(s.NumKVHeads)*hd, h), m("self_attn.v_proj.weight", int64(s.NumKVHeads)*hd, h),
			m("self_attn.o_proj.weight", h, int64(s.NumHeads)*hd), norm("self_attn.q_norm.weight", hd), norm("self_attn.k_norm.weight", hd))
	}
	nv, vd := int64(y.LinearValueHeads), int64(y.LinearValueHeads*y.LinearValueDim)
	c := 2*int64(y.LinearKeyHeads*y.LinearKeyDim) + vd
	return append(out, m("linear_attn.in_proj_qkv.weight", c, h), m("linear_attn.in_proj_z.weight", vd, h),
		m("linear_attn.in_proj_b.weight", nv, h), m("linear_attn.in_proj_a.weight", nv, h),
		m("linear_attn.conv1d.weight", c, 1, int64(y.ConvKernel)), m("linear_attn.A_log", nv), m("linear_attn.dt_bias", nv),
		norm("linear_attn.norm.weight", int64(y.LinearValueDim)), m("linear_attn.out_proj.weight", h, vd))
}

// hybridConfig writes a Qwen3.5 shape's config.json keys into cfg: its architecture, layer types and linear
// attention's sizes, and its rope with the partial rotary factor (rope_parameters).
func (s *Shape) hybridConfig(cfg map[string]any) {
	y := s.Hybrid
	types := make([]string, s.NumLayers)
	for l := range types {
		types[l] = "linear_attention"
		if y.full(l) {
			types[l] = "full_attention"
		}
	}
	delete(cfg, "rope_theta")
	maps.Copy(cfg, map[string]any{"architectures": []string{"Qwen3_5ForCausalLM"}, "model_type": "qwen3_5_text",
		"layer_types": types, "linear_num_key_heads": y.LinearKeyHeads, "linear_num_value_heads": y.LinearValueHeads,
		"linear_key_head_dim": y.LinearKeyDim, "linear_value_head_dim": y.LinearValueDim, "linear_conv_kernel_dim": y.ConvKernel,
		"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": s.RopeTheta, "partial_rotary_factor": y.PartialRotary}})
}
