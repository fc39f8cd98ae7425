package reference

import (
	"fmt"
	"math"
)

// DeepSeek-V3's multi-head latent attention, written from transformers' DeepseekV3Attention as it computes it:
// the compressed latent expanded through kv_b_proj into every head's keys and values (docs/family-notes.md,
// "DeepSeek-V3 multi-head latent attention"), in float64. The engine absorbs kv_b_proj instead; this is the
// independent answer.

// latent holds the attention's sizes: qk_nope_head_dim, qk_rope_head_dim, v_head_dim, kv_lora_rank,
// q_lora_rank (0: null, a q_proj); whether the rotated dimensions are interleaved pairs; the scores' scale.
type latent struct {
	nope, rope, v, rank, qRank int
	interleave                 bool
	scale                      float64
}

// newLatent reads the attention's settings, refusing what the reference does not implement.
func (m *model) newLatent() error {
	c := m.cfg
	if c.AttentionBias || c.ScoringFunc != "sigmoid" || c.TopKMethod != "noaux_tc" || c.MoELayerFreq != 1 ||
		c.NumKeyValueHeads != c.NumAttentionHeads {
		return fmt.Errorf("deepseek_v3 with attention_bias, scoring_func other than sigmoid, topk_method other than noaux_tc, moe_layer_freq other than 1 or fewer key/value heads than heads is not implemented by the reference")
	}
	a := &latent{nope: c.QKNopeHeadDim, rope: c.QKRopeHeadDim, v: c.VHeadDim, rank: c.KVLoraRank, interleave: c.RopeInterleave}
	if c.QLoraRank != nil { // else one q_proj
		a.qRank = *c.QLoraRank
	}
	// yarn_apply_mscale: (nope + rope)^-½, times mscale(factor, mscale_all_dim)² for a scaled rope.
	a.scale = 1 / math.Sqrt(float64(a.nope+a.rope))
	if r := c.Rope; r.Type != "default" && r.MscaleAllDim != 0 && r.Factor > 1 {
		ms := 0.1*r.MscaleAllDim*math.Log(r.Factor) + 1
		a.scale *= ms * ms
	}
	m.latent = a
	return nil
}

// latentTensors lists layer l's tensors: the usual norms and MLP (or experts), the latent attention's
// projections.
func (m *model) latentTensors(l int) map[string][]int {
	c, a := m.cfg, m.latent
	h, H := c.HiddenSize, c.NumAttentionHeads
	p := fmt.Sprintf("model.layers.%d.", l)
	rel := map[string][]int{"input_layernorm.weight": {h}, "post_attention_layernorm.weight": {h}} // names in the layer
	if !m.experts.tensors(l, h, rel) {
		ff := c.IntermediateSize
		rel["mlp.gate_proj.weight"], rel["mlp.up_proj.weight"], rel["mlp.down_proj.weight"] = []int{ff, h}, []int{ff, h}, []int{h, ff}
	}
	t := map[string][]int{}
	for name, shape := range rel {
		t[p+name] = shape
	}
	s := p + "self_attn."
	if a.qRank == 0 {
		t[s+"q_proj.weight"] = []int{H * (a.nope + a.rope), h}
	} else {
		t[s+"q_a_proj.weight"], t[s+"q_a_layernorm.weight"], t[s+"q_b_proj.weight"] = []int{a.qRank, h}, []int{a.qRank}, []int{H * (a.nope + a.rope), a.qRank}
	}
	t[s+"kv_a_proj_with_mqa.weight"], t[s+"kv_a_layernorm.weight"] = []int{a.rank + a.rope, h}, []int{a.rank}
	// kv_b_proj as checkpoint.Open gives it: its key rows per head transposed (k_b_proj), its value rows (v_b_proj).
	t[s+"k_b_proj.weight"], t[s+"v_b_proj.weight"] = []int{H * a.rank, a.nope}, []int{H * a.v, a.rank}
	t[s+"o_proj.weight"] = []int{h, H * a.v}
	return t
}

// latentLayer updates x with layer l: x += o_proj(attention) on rmsnorm(x), then the MLP branch.
func (m *model) latentLayer(l int, w *layerWeights, x [][]float64) {
	c, a := m.cfg, m.latent
	T, H, dqk := len(x), c.NumAttentionHeads, a.nope+a.rope
	q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
	parallel(T, func(p int) {
		h := m.norm(x[p], w.vec("input_layernorm.weight"))
		q[p] = make([]float64, H*dqk)
		if a.qRank == 0 {
			linear(q[p], w.get("self_attn.q_proj.weight"), nil, h)
		} else {
			qa := make([]float64, a.qRank)
			linear(qa, w.get("self_attn.q_a_proj.weight"), nil, h)
			linear(q[p], w.get("self_attn.q_b_proj.weight"), nil, rmsNorm(qa, w.vec("self_attn.q_a_layernorm.weight"), 1e-6, 0))
		}
		ckv := make([]float64, a.rank+a.rope)
		linear(ckv, w.get("self_attn.kv_a_proj_with_mqa.weight"), nil, h)
		kv := a.expand(w, H, rmsNorm(ckv[:a.rank], w.vec("self_attn.kv_a_layernorm.weight"), 1e-6, 0))
		kr := ckv[a.rank:]
		a.rotate(kr, p, m.ropes[0])
		k[p], v[p] = make([]float64, H*dqk), make([]float64, H*a.v)
		for hd := range H {
			a.rotate(q[p][hd*dqk+a.nope:(hd+1)*dqk], p, m.ropes[0])
			copy(k[p][hd*dqk:], kv[hd*(a.nope+a.v):hd*(a.nope+a.v)+a.nope])
			copy(k[p][hd*dqk+a.nope:], kr)
			copy(v[p][hd*a.v:], kv[hd*(a.nope+a.v)+a.nope:(hd+1)*(a.nope+a.v)])
		}
	})
	parallel(T, func(p int) {
		att := make([]float64, H*a.v)
		s := make([]float64, p+1)
		for hd := range H {
			for t := range s {
				s[t] = 0
				for i := range dqk {
					s[t] += q[p][hd*dqk+i] * k[t][hd*dqk+i]
				}
				s[t] *= a.scale
			}
			softmax(s)
			for t := range s {
				for i := range a.v {
					att[hd*a.v+i] += s[t] * v[t][hd*a.v+i]
				}
			}
		}
		o := make([]float64, c.HiddenSize)
		linear(o, w.get("self_attn.o_proj.weight"), nil, att)
		for i := range o {
			x[p][i] += o[i]
		}
	})
	m.mlpBranch(l, w, x)
}

// rotate turns the rope dimensions vec of one head at position pos: interleaved pairs (vec[2i], vec[2i+1]) or,
// without rope_interleave, rotate-half pairs (vec[i], vec[i+rope/2]), pair i by pos·invFreq[i].
func (a *latent) rotate(vec []float64, pos int, r rotation) {
	for i, f := range r.invFreq {
		sin, cos := math.Sincos(float64(pos) * f)
		sin, cos = sin*r.scale, cos*r.scale
		x, y := &vec[i], &vec[i+len(r.invFreq)]
		if a.interleave {
			x, y = &vec[2*i], &vec[2*i+1]
		}
		*x, *y = *x*cos-*y*sin, *y*cos+*x*sin
	}
}

// expand is kv_b_proj(c), every head's key part then its value part, as transformers computes it: the key rows
// read from k_b_proj, which holds them transposed head by head.
func (a *latent) expand(w *layerWeights, H int, c []float64) []float64 {
	kb, vb := w.get("self_attn.k_b_proj.weight"), w.get("self_attn.v_b_proj.weight")
	kv, v := make([]float64, H*(a.nope+a.v)), make([]float64, H*a.v)
	linear(v, vb, nil, c)
	for h := range H {
		for j := range a.nope {
			var s float64
			for r := range a.rank {
				s += float64(kb.data[(h*a.rank+r)*a.nope+j]) * c[r]
			}
			kv[h*(a.nope+a.v)+j] = s
		}
		copy(kv[h*(a.nope+a.v)+a.nope:], v[h*a.v:(h+1)*a.v])
	}
	return kv
}
