package model

import (
	"fmt"
	"math"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
)

// DeepSeek-V3 and Kimi K2 (DeepseekV3ForCausalLM): multi-head latent attention (below) and GLM-4.5's mixture of
// experts with its groups (newSigmoidMoE); Llama's norms and dense MLP on the first first_k_dense_replace
// layers. docs/family-notes.md, "DeepSeek-V3 multi-head latent attention".
func init() { Register("DeepseekV3ForCausalLM", newDeepseekV3) }

// latentAttention is the decoder with multi-head latent attention (DeepseekV3Attention). Per position, x gives
// a query per head, q = q_b_proj(RMSNorm(q_a_proj(x))) of nope + rope dimensions, and one compressed latent
// c = RMSNorm(kv_a_proj_with_mqa(x)[:rank]) with one rotary key k_r = kv_a_proj_with_mqa(x)[rank:] that every
// head shares. transformers expands c through kv_b_proj into each head's key part k_h = W_UK_h·c (beside k_r)
// and value v_h = W_UV_h·c; here kv_b_proj is absorbed instead: q_h·k_h = (W_UK_hᵀ·q_nope_h)·c + q_rope_h·k_r,
// and Σ p·v_h = W_UV_h·(Σ p·c) (W_UK_hᵀ stored so by the split, k_b_proj). So attention runs as one key/value head of [c, k_r] (rank + rope dimensions)
// whose first rank dimensions are also its values, and the cache holds that one array per position (a Latent
// layer): (rank + rope) elements per layer and position instead of heads·(nope + rope + v).
type latentAttention struct {
	*decoder
	nope, rope, v, rank int // qk_nope_head_dim, qk_rope_head_dim, v_head_dim, kv_lora_rank
	qRank               int // q_lora_rank; 0: null, one q_proj
	interleave          bool
}

// latentNormEps is the epsilon of q_a_layernorm and kv_a_layernorm: DeepseekV3RMSNorm's default, which
// transformers gives them whatever rms_norm_eps says.
const latentNormEps = 1e-6

// newDeepseekV3 is the Architecture of a DeepseekV3ForCausalLM config, refusing what it does not implement.
func newDeepseekV3(c *checkpoint.Config) (Architecture, error) {
	act, err := ActivationFor("hidden_act", c.HiddenAct)
	if err != nil {
		return nil, err
	}
	if err := checkLatent(c); err != nil {
		return nil, err
	}
	rope, err := NewRope(c.Rope, c.QKRopeHeadDim, c.MaxPositionEmbeddings, RopeOptions{})
	if err != nil {
		return nil, err
	}
	a := &latentAttention{decoder: newDecoderWith(c, act, rope), nope: c.QKNopeHeadDim, rope: c.QKRopeHeadDim,
		v: c.VHeadDim, rank: c.KVLoraRank, interleave: c.RopeInterleave}
	if c.QLoraRank != nil {
		a.qRank = *c.QLoraRank
	}
	a.qkvBias, a.oBias = false, false
	if a.attn.Scale, err = latentScale(c); err != nil {
		return nil, err
	}
	m, sparse, err := newSigmoidMoE(c)
	if err != nil {
		return nil, err
	}
	a.sparseLayers(m, sparse)
	a.finish()
	a.plan.KVHeads, a.plan.HeadDim = 1, a.rank+a.rope
	for i := range a.plan.Layers {
		a.plan.Layers[i].Latent = true
	}
	a.weights()
	return a, nil
}

// checkLatent refuses the settings of c the family does not implement.
func checkLatent(c *checkpoint.Config) error {
	switch {
	case c.RopeByLayerType != nil:
		return fmt.Errorf("rope_parameters nested by layer type is not implemented for DeepSeek-V3")
	case c.AttentionBias:
		return fmt.Errorf("attention_bias true (biases on q_a_proj, kv_a_proj_with_mqa and o_proj) is not implemented")
	case c.NumKeyValueHeads != c.NumAttentionHeads:
		return fmt.Errorf("num_key_value_heads %d differs from num_attention_heads %d (multi-head latent attention has one key and value per head)", c.NumKeyValueHeads, c.NumAttentionHeads)
	case c.ScoringFunc != "sigmoid":
		return fmt.Errorf("scoring_func %q is not implemented (supported: sigmoid)", c.ScoringFunc)
	case c.TopKMethod != "noaux_tc":
		return fmt.Errorf("topk_method %q is not implemented (supported: noaux_tc, the choice biased by e_score_correction_bias)", c.TopKMethod)
	case c.MoELayerFreq != 1:
		return fmt.Errorf("moe_layer_freq %d is not implemented (supported: 1)", c.MoELayerFreq)
	case c.QKHeadDim != 0 && c.QKHeadDim != c.QKNopeHeadDim+c.QKRopeHeadDim:
		return fmt.Errorf("qk_head_dim %d is not qk_nope_head_dim %d + qk_rope_head_dim %d", c.QKHeadDim, c.QKNopeHeadDim, c.QKRopeHeadDim)
	}
	for _, v := range []struct {
		key string
		v   int
	}{{"kv_lora_rank", c.KVLoraRank}, {"qk_rope_head_dim", c.QKRopeHeadDim}, {"qk_nope_head_dim", c.QKNopeHeadDim},
		{"v_head_dim", c.VHeadDim}} {
		if v.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", v.key, v.v)
		}
	}
	if c.QLoraRank != nil && *c.QLoraRank <= 0 {
		return fmt.Errorf("q_lora_rank must be positive or null, got %d", *c.QLoraRank)
	}
	return nil
}

// latentScale is the attention's scale: (qk_nope_head_dim + qk_rope_head_dim)^-½, times mscale² where the rope
// scaling gives mscale_all_dim, mscale = 0.1·mscale_all_dim·ln(factor) + 1 (1 for a factor ≤ 1; yarn_apply_mscale).
func latentScale(c *checkpoint.Config) (float64, error) {
	s := 1 / math.Sqrt(float64(c.QKNopeHeadDim+c.QKRopeHeadDim))
	p := c.Rope
	if p.Type == "default" || p.MscaleAllDim == 0 {
		return s, nil
	}
	if p.Factor == 0 {
		return 0, fmt.Errorf("rope %s with mscale_all_dim %g but no factor: transformers would fail", p.Type, p.MscaleAllDim)
	}
	m := 1.0
	if p.Factor > 1 {
		m = 0.1*p.MscaleAllDim*math.Log(p.Factor) + 1
	}
	return s * m * m, nil
}

// LatentWeights are a multi-head latent attention layer's projections (DeepseekV3Attention's names under
// self_attn.): the query's down projection QA [q_lora_rank, hidden], its norm QANorm and up projection QB
// [heads·(nope+rope), q_lora_rank] (with q_lora_rank null, LayerWeights.Q, q_proj, instead); kv_a_proj_with_mqa
// KVA [kv_lora_rank+rope, hidden], the latent's norm KVANorm; and kv_b_proj's two parts as checkpoint.Open cuts
// them (checkpoint.HeadParts; llama.cpp's attn_k_b and attn_v_b): KeyB [heads·kv_lora_rank, nope], each head's
// key rows transposed, and ValueB [heads·v, kv_lora_rank], each head's value rows.
type LatentWeights struct {
	QA, QB, KVA, KeyB, ValueB Linear
	QANorm, KVANorm           Value
}

// weights replaces the decoder's attention tensors (self_attn.*) with the latent attention's.
func (a *latentAttention) weights() {
	var ws []WeightSpec
	for _, s := range a.plan.Weights {
		if !strings.HasPrefix(s.Name, "self_attn.") {
			ws = append(ws, s)
		}
	}
	add := func(name string, field func(*LayerWeights) *Value, shape ...int) {
		ws = append(ws, WeightSpec{Name: "self_attn." + name, Shape: shape, Field: field})
	}
	m := func(w *LayerWeights) *LatentWeights { return &w.MLA }
	h, heads := a.hidden, a.heads
	if a.qRank == 0 {
		add("q_proj.weight", func(w *LayerWeights) *Value { return &w.Q.W }, heads*(a.nope+a.rope), h)
	} else {
		add("q_a_proj.weight", func(w *LayerWeights) *Value { return &m(w).QA.W }, a.qRank, h)
		add("q_a_layernorm.weight", func(w *LayerWeights) *Value { return &m(w).QANorm }, a.qRank)
		add("q_b_proj.weight", func(w *LayerWeights) *Value { return &m(w).QB.W }, heads*(a.nope+a.rope), a.qRank)
	}
	add("kv_a_proj_with_mqa.weight", func(w *LayerWeights) *Value { return &m(w).KVA.W }, a.rank+a.rope, h)
	add("kv_a_layernorm.weight", func(w *LayerWeights) *Value { return &m(w).KVANorm }, a.rank)
	add("k_b_proj.weight", func(w *LayerWeights) *Value { return &m(w).KeyB.W }, heads*a.rank, a.nope)
	add("v_b_proj.weight", func(w *LayerWeights) *Value { return &m(w).ValueB.W }, heads*a.v, a.rank)
	add("o_proj.weight", func(w *LayerWeights) *Value { return &w.O.W }, h, heads*a.v)
	a.plan.Weights = ws
}

func (a *latentAttention) Layer(ops Ops, in LayerInputs) LayerOutputs {
	w := &in.W.MLA
	h := a.norm(ops, in.X, in.W.AttnNorm)
	var q Value
	if a.qRank == 0 {
		q = linear(ops, h, in.W.Q)
	} else {
		q = linear(ops, ops.RMSNorm(linear(ops, h, w.QA), w.QANorm, latentNormEps, 0), w.QB)
	}
	qs := ops.Split(ops.Heads(q, a.heads, a.nope+a.rope), a.nope, a.rope)
	ckv := ops.Split(linear(ops, h, w.KVA), a.rank, a.rope)
	qr, kr := qs[1], ops.Heads(ckv[1], 1, a.rope)
	if a.interleave {
		qr, kr = ops.Deinterleave(qr), ops.Deinterleave(kr)
	}
	// The cache's array [B, 1, T, rank+rope]: the latent, then the rotated shared key.
	kv := ops.Concat(ops.Heads(ops.RMSNorm(ckv[0], w.KVANorm, latentNormEps, 0), 1, a.rank), ops.Rotary(kr))
	// Each head's query in the latent's space: W_UK_hᵀ·q_nope_h, then its rotated part.
	qLat := ops.Concat(ops.HeadLinear(qs[0], w.KeyB.W), ops.Rotary(qr))
	o := ops.Heads(ops.Attention(qLat, kv, kv, a.attn), a.heads, a.rank+a.rope)
	o = ops.Split(o, a.rank, a.rope)[0] // Σ p·c per head (the rest is Σ p·k_r, which no value holds)
	y := linear(ops, ops.MergeHeads(ops.HeadLinear(o, w.ValueB.W)), in.W.O)
	return LayerOutputs{X: a.mlpBranch(ops, in, a.branch(ops, in.X, y)), K: kv, V: kv}
}
