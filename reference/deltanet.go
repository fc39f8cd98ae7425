package reference

import (
	"fmt"
	"math"
)

// The Gated DeltaNet hybrids (Qwen3.5): linear-attention layers (a depthwise causal conv1d, then the gated delta
// rule, a recurrence over the positions) and full-attention layers with an output gate; every RMSNorm
// zero-centred ((1 + w)) but the DeltaNet's gated one. Written from transformers' Qwen3_5GatedDeltaNet and
// torch_recurrent_gated_delta_rule (docs/family-notes.md), in float64.

// deltaNetLayers reads layer_types and the DeltaNet's sizes.
func (m *model) deltaNetLayers() error {
	c := m.cfg
	if c.LayerTypes == nil {
		return fmt.Errorf("layer_types is missing")
	}
	if c.LinearNumKeyHeads <= 0 || c.LinearNumValueHeads%c.LinearNumKeyHeads != 0 || c.LinearKeyHeadDim <= 0 ||
		c.LinearValueHeadDim <= 0 || c.LinearConvKernelDim <= 0 {
		return fmt.Errorf("linear attention sizes not implemented by the reference")
	}
	m.linear = make([]bool, c.NumHiddenLayers)
	if c.ModelType == "qwen3_5_moe_text" || c.ModelType == "qwen3_next" && c.NumExperts > 0 {
		if err := m.newExperts(); err != nil {
			return err
		}
	}
	for l, t := range c.LayerTypes {
		switch t {
		case "linear_attention":
			m.linear[l] = true
		case "full_attention":
		default:
			return fmt.Errorf("config.json layer_types[%d] %q is not implemented by the reference", l, t)
		}
	}
	return nil
}

// hybridTensors lists layer l's tensors.
func (m *model) hybridTensors(l int) map[string][]int {
	c := m.cfg
	h, hd, ff := c.HiddenSize, c.HeadDim, c.IntermediateSize
	p := fmt.Sprintf("model.layers.%d.", l)
	t := map[string][]int{p + "input_layernorm.weight": {h}, p + "post_attention_layernorm.weight": {h}}
	moe := map[string][]int{}
	if m.experts == nil || !m.experts.tensors(l, h, moe) {
		moe = map[string][]int{"mlp.gate_proj.weight": {ff, h}, "mlp.up_proj.weight": {ff, h}, "mlp.down_proj.weight": {h, ff}}
	}
	for name, shape := range moe {
		t[p+name] = shape
	}
	if !m.linear[l] {
		a := p + "self_attn."
		t[a+"q_proj.weight"], t[a+"k_proj.weight"] = []int{2 * c.NumAttentionHeads * hd, h}, []int{c.NumKeyValueHeads * hd, h}
		t[a+"v_proj.weight"], t[a+"o_proj.weight"] = []int{c.NumKeyValueHeads * hd, h}, []int{h, c.NumAttentionHeads * hd}
		t[a+"q_norm.weight"], t[a+"k_norm.weight"] = []int{hd}, []int{hd}
		return t
	}
	a := p + "linear_attn."
	kd, vd, nv := c.LinearNumKeyHeads*c.LinearKeyHeadDim, c.LinearNumValueHeads*c.LinearValueHeadDim, c.LinearNumValueHeads
	switch {
	case c.ModelType == "qwen3_next" && !c.LinearGroupedBA:
		t[a+"in_proj_qkvz.weight"], t[a+"in_proj_ba.weight"] = []int{2*kd + 2*vd, h}, []int{2 * nv, h}
	case c.LinearGroupedBA: // llama.cpp's Qwen3-Next: qkv and z split, ba grouped
		t[a+"in_proj_qkv.weight"], t[a+"in_proj_z.weight"] = []int{2*kd + vd, h}, []int{vd, h}
		t[a+"in_proj_ba.weight"] = []int{2 * nv, h}
	default:
		t[a+"in_proj_qkv.weight"], t[a+"in_proj_z.weight"] = []int{2*kd + vd, h}, []int{vd, h}
		t[a+"in_proj_b.weight"], t[a+"in_proj_a.weight"] = []int{nv, h}, []int{nv, h}
	}
	t[a+"conv1d.weight"] = []int{2*kd + vd, 1, c.LinearConvKernelDim}
	t[a+"A_log"], t[a+"dt_bias"], t[a+"norm.weight"] = []int{nv}, []int{nv}, []int{c.LinearValueHeadDim}
	t[a+"out_proj.weight"] = []int{h, vd}
	return t
}

// hybridLayer updates x with layer l: x += mixer(norm(x)); x += down(silu(gate(h)) ⊙ up(h)), h = norm(x).
func (m *model) hybridLayer(l int, w *layerWeights, x [][]float64) {
	c := m.cfg
	hs := make([][]float64, len(x))
	for p := range x {
		hs[p] = m.norm(x[p], w.vec("input_layernorm.weight"))
	}
	var y [][]float64
	if m.linear[l] {
		y = m.deltaNet(w, hs)
	} else {
		y = m.gatedAttention(w, hs)
	}
	parallel(len(x), func(p int) {
		for i := range x[p] {
			x[p][i] += y[p][i]
		}
		h := m.norm(x[p], w.vec("post_attention_layernorm.weight"))
		var d []float64
		if m.experts != nil && m.experts.sparse[l] {
			d = m.moe(w, h)
		} else {
			d = m.gatedMLP(w, h, "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", c.IntermediateSize)
		}
		for i := range d {
			x[p][i] += d[i]
		}
	})
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// gatedAttention is causal attention whose q_proj gives per head the query (head_dim values) then a gate on
// the head's output; per-head (1 + w) q/k norms, rotary on the first dimensions.
func (m *model) gatedAttention(w *layerWeights, hs [][]float64) [][]float64 {
	c := m.cfg
	T, hd, nq, nkv := len(hs), c.HeadDim, c.NumAttentionHeads, c.NumKeyValueHeads
	q, gate, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T), make([][]float64, T)
	for p, h := range hs {
		qg := make([]float64, 2*nq*hd)
		linear(qg, w.get("self_attn.q_proj.weight"), nil, h)
		q[p], gate[p] = make([]float64, nq*hd), make([]float64, nq*hd)
		for i := range nq {
			copy(q[p][i*hd:], m.norm(qg[2*i*hd:(2*i+1)*hd], w.vec("self_attn.q_norm.weight")))
			copy(gate[p][i*hd:(i+1)*hd], qg[(2*i+1)*hd:(2*i+2)*hd])
		}
		k[p], v[p] = make([]float64, nkv*hd), make([]float64, nkv*hd)
		linear(k[p], w.get("self_attn.k_proj.weight"), nil, h)
		linear(v[p], w.get("self_attn.v_proj.weight"), nil, h)
		for i := range nkv {
			copy(k[p][i*hd:], m.norm(k[p][i*hd:(i+1)*hd], w.vec("self_attn.k_norm.weight")))
		}
		m.rotate(q[p], nq, p, m.ropes[0])
		m.rotate(k[p], nkv, p, m.ropes[0])
	}
	out := make([][]float64, T)
	parallel(T, func(p int) {
		att := make([]float64, nq*hd)
		for h := range nq {
			kv := h / (nq / nkv)
			s := make([]float64, p+1)
			for t := range s {
				for i := range hd {
					s[t] += q[p][h*hd+i] * k[t][kv*hd+i]
				}
				s[t] /= math.Sqrt(float64(hd))
			}
			softmax(s)
			for t := range s {
				for i := range hd {
					att[h*hd+i] += s[t] * v[t][kv*hd+i]
				}
			}
		}
		for i := range att {
			att[i] *= sigmoid(gate[p][i])
		}
		out[p] = make([]float64, c.HiddenSize)
		linear(out[p], w.get("self_attn.o_proj.weight"), nil, att)
	})
	return out
}

// deltaNet is the Gated DeltaNet mixer over the positions of hs, in order.
func (m *model) deltaNet(w *layerWeights, hs [][]float64) [][]float64 {
	c := m.cfg
	nk, nv, dk, dv, K := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.LinearConvKernelDim
	ch := 2*nk*dk + nv*dv
	conv, aLog, dtBias := w.get("linear_attn.conv1d.weight").data, w.vec("linear_attn.A_log"), w.vec("linear_attn.dt_bias")
	u := make([][]float64, len(hs)) // the conv's inputs
	S := make([]float64, nv*dk*dv)  // [nv, dk, dv]
	out := make([][]float64, len(hs))
	for p, h := range hs {
		var z, a, b []float64
		u[p], z, a, b = m.deltaNetInputs(w, h)
		x := make([]float64, ch) // silu(conv)
		for i := range ch {
			for j := range K {
				if t := p - K + 1 + j; t >= 0 {
					x[i] += float64(conv[i*K+j]) * u[t][i]
				}
			}
			x[i] /= 1 + math.Exp(-x[i])
		}
		q, k, v := x[:nk*dk], x[nk*dk:2*nk*dk], x[2*nk*dk:]
		o := make([]float64, nv*dv)
		for hv := range nv {
			kh := hv / (nv / nk)
			if m.cfg.LinearTiledValueHeads { // llama.cpp's tiled order: value head hv reads key head hv mod nk
				kh = hv % nk
			}
			qh, kk := unit(q[kh*dk:(kh+1)*dk], 1/math.Sqrt(float64(dk))), unit(k[kh*dk:(kh+1)*dk], 1)
			sp := a[hv] + float64(dtBias[hv])
			if sp <= 20 {
				sp = math.Log1p(math.Exp(sp))
			}
			decay, beta := math.Exp(-math.Exp(float64(aLog[hv]))*sp), sigmoid(b[hv])
			s := S[hv*dk*dv : (hv+1)*dk*dv]
			for i := range s {
				s[i] *= decay
			}
			for j := range dv {
				var mem float64
				for i := range dk {
					mem += s[i*dv+j] * kk[i]
				}
				d := (v[hv*dv+j] - mem) * beta
				for i := range dk {
					s[i*dv+j] += kk[i] * d
				}
			}
			oh := o[hv*dv : (hv+1)*dv]
			for i := range dk {
				for j := range dv {
					oh[j] += s[i*dv+j] * qh[i]
				}
			}
			copy(oh, rmsNorm(oh, w.vec("linear_attn.norm.weight"), c.RMSNormEps, 0))
			for j := range oh {
				g := z[hv*dv+j]
				oh[j] *= g / (1 + math.Exp(-g))
			}
		}
		out[p] = make([]float64, c.HiddenSize)
		linear(out[p], w.get("linear_attn.out_proj.weight"), nil, o)
	}
	return out
}

// unit is x / sqrt(Σx² + 1e-6) · scale.
func unit(x []float64, scale float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = v / math.Sqrt(ss+1e-6) * scale
	}
	return y
}

// deltaNetInputs projects h to the conv's input (q, k, v of all heads), z, a and b: from Qwen3.5's separate
// projections, or from Qwen3-Next's grouped per key head (in_proj_qkvz: per key head q, k, then v and z of its
// value heads; in_proj_ba: per key head b then a of its value heads), or with linear_grouped_ba (llama.cpp's
// Qwen3-Next) q, k, v and z separate and b, a grouped.
func (m *model) deltaNetInputs(w *layerWeights, h []float64) (u, z, a, b []float64) {
	c := m.cfg
	nk, nv, dk, dv := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim
	z, a, b = make([]float64, nv*dv), make([]float64, nv), make([]float64, nv)
	r := nv / nk
	if c.ModelType != "qwen3_next" || c.LinearGroupedBA {
		u = make([]float64, 2*nk*dk+nv*dv)
		linear(u, w.get("linear_attn.in_proj_qkv.weight"), nil, h)
		linear(z, w.get("linear_attn.in_proj_z.weight"), nil, h)
		if !c.LinearGroupedBA {
			linear(a, w.get("linear_attn.in_proj_a.weight"), nil, h)
			linear(b, w.get("linear_attn.in_proj_b.weight"), nil, h)
			return u, z, a, b
		}
		ungroupBA(w, h, a, b, nk, r)
		return u, z, a, b
	}
	qkvz := make([]float64, 2*nk*dk+2*nv*dv)
	linear(qkvz, w.get("linear_attn.in_proj_qkvz.weight"), nil, h)
	var q, k, v []float64
	for g := range nk {
		grp := qkvz[g*(2*dk+2*r*dv) : (g+1)*(2*dk+2*r*dv)]
		q, k = append(q, grp[:dk]...), append(k, grp[dk:2*dk]...)
		v = append(v, grp[2*dk:2*dk+r*dv]...)
		copy(z[g*r*dv:], grp[2*dk+r*dv:])
	}
	ungroupBA(w, h, a, b, nk, r)
	return append(append(q, k...), v...), z, a, b
}

// ungroupBA projects h by Qwen3-Next's in_proj_ba (per key head b then a of its r value heads) into a and b.
func ungroupBA(w *layerWeights, h, a, b []float64, nk, r int) {
	ba := make([]float64, 2*nk*r)
	linear(ba, w.get("linear_attn.in_proj_ba.weight"), nil, h)
	for g := range nk {
		copy(b[g*r:], ba[g*2*r:g*2*r+r])
		copy(a[g*r:], ba[g*2*r+r:(g+1)*2*r])
	}
}
