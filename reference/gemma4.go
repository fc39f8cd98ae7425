package reference

import (
	"fmt"
	"math"
	"slices"

	"github.com/layerstream/layerstream/checkpoint"
)

// gemma4 is what the reference keeps of a Gemma 4 model (Gemma4TextModel, transformers 5.24
// models/gemma4/modeling_gemma4.py): each layer's head size, key/value heads and rotation, the layer whose keys
// and values a shared layer attends with, the per-layer inputs of the pass, and the keys and values of the
// layers others attend with.
type gemma4 struct {
	dims   []checkpoint.LayerDims
	source []int      // the layer whose keys and values layer l attends with (itself unless shared)
	rot    []rotation // by layer
	inter  []int      // by layer: the MLP's width (twice intermediate_size for a shared layer with use_double_wide_mlp)
	// pli[p][l] is layer l's per-layer input at position p (nil without per-layer inputs).
	pli [][][]float64
	// kv[l] are layer l's keys and values by position, kept for the layers sharing them.
	kv map[int][2][][]float64
	// embedAs are the token ids embedded as the pad token (Gemma4ForConditionalGeneration's placeholders).
	embedAs map[int]int
}

// gemma4Model configures m for Gemma 4's text decoder.
func (m *model) gemma4Model() error {
	c := m.cfg
	switch {
	case c.EnableMoEBlock && (c.NumExperts <= 0 || c.TopKExperts <= 0 || c.TopKExperts > c.NumExperts || c.MoEIntermediateSize <= 0):
		return fmt.Errorf("enable_moe_block with num_experts %d, top_k_experts %d, moe_intermediate_size %d is not implemented by the reference", c.NumExperts, c.TopKExperts, c.MoEIntermediateSize)
	case c.AttentionBias:
		return fmt.Errorf("attention_bias is not implemented by the reference for Gemma 4")
	case c.LayerTypes == nil || c.SlidingWindow == nil:
		return fmt.Errorf("Gemma 4 without layer_types or sliding_window is not implemented by the reference")
	case c.UseBidirectionalAttention != nil && *c.UseBidirectionalAttention != "vision":
		return fmt.Errorf("use_bidirectional_attention %q is not implemented by the reference for Gemma 4", *c.UseBidirectionalAttention)
	}
	dims, err := c.Gemma4LayerDims()
	if err != nil {
		return err
	}
	L := c.NumHiddenLayers
	g := &gemma4{dims: dims, source: make([]int, L), rot: make([]rotation, L), inter: make([]int, L), kv: map[int][2][][]float64{}}
	first := L - c.NumKVSharedLayers
	for l := range L {
		g.source[l], g.inter[l] = l, c.IntermediateSize
		if m.window[l] = 0; c.LayerTypes[l] == "sliding_attention" {
			m.window[l] = *c.SlidingWindow
		}
		r, ok := c.RopeByLayerType[c.LayerTypes[l]]
		if !ok {
			return fmt.Errorf("rope_parameters has no %s entry", c.LayerTypes[l])
		}
		if g.rot[l], err = gemma4Rotation(r, dims[l].HeadDim); err != nil {
			return err
		}
		if l < first {
			continue
		}
		if c.UseDoubleWideMLP {
			g.inter[l] *= 2
		}
		g.source[l] = -1
		for j := first - 1; j >= 0; j-- { // the last unshared layer of its type (Gemma4TextConfig.kv_sharing_modes)
			if c.LayerTypes[j] == c.LayerTypes[l] {
				g.source[l] = j
				break
			}
		}
		if g.source[l] < 0 {
			return fmt.Errorf("layer %d shares keys and values that no earlier layer of its type computes", l)
		}
	}
	if c.Arch.Name == "Gemma4ForConditionalGeneration" { // Gemma4Model.forward without images, video or audio
		g.embedAs = map[int]int{}
		for _, id := range []*int{c.ImageTokenID, c.VideoTokenID, c.AudioTokenID} {
			if id != nil {
				g.embedAs[*id] = c.PadTokenID
			}
		}
	}
	m.g4, m.norms, m.act = g, "both", "gelu_tanh"
	if c.HiddenActivation != "gelu_pytorch_tanh" {
		return fmt.Errorf("hidden_activation %q is not implemented by the reference for Gemma 4", c.HiddenActivation)
	}
	if c.FinalLogitSoftcapping != nil {
		m.logitSoftCap = *c.FinalLogitSoftcapping
	}
	m.embedScale, err = gemmaNormalizer(c.HiddenSize, c.TorchDType)
	return err
}

// gemma4Rotation is a layer type's rotation: default rope, or proportional (the first partial_rotary_factor of
// the head_dim/2 frequencies, the others 0: those dimensions turn by nothing).
func gemma4Rotation(r checkpoint.Rope, hd int) (rotation, error) {
	angles := hd / 2
	switch r.Type {
	case "default":
	case "proportional":
		if f := r.PartialRotaryFactor; f != 0 {
			angles = int(math.Floor(f * float64(hd) / 2))
		}
	default:
		return rotation{}, fmt.Errorf("rope type %q is not implemented by the reference for Gemma 4", r.Type)
	}
	inv := make([]float64, hd/2)
	for i := range angles {
		inv[i] = math.Pow(r.Theta, -2*float64(i)/float64(hd))
		if r.Factor != 0 {
			inv[i] /= r.Factor
		}
	}
	return rotation{invFreq: inv, scale: 1}, nil
}

// gemma4Tensors are layer l's tensors.
func (m *model) gemma4Tensors(l int) map[string][]int {
	c, g := m.cfg, m.g4
	h, hd, nkv, nq, ff := c.HiddenSize, g.dims[l].HeadDim, g.dims[l].KVHeads, c.NumAttentionHeads, g.inter[l]
	p := fmt.Sprintf("model.layers.%d.", l)
	t := map[string][]int{p + "self_attn.q_proj.weight": {nq * hd, h}, p + "self_attn.q_norm.weight": {hd},
		p + "self_attn.o_proj.weight": {h, nq * hd}, p + "mlp.gate_proj.weight": {ff, h}, p + "mlp.up_proj.weight": {ff, h},
		p + "mlp.down_proj.weight": {h, ff}, p + "layer_scalar": {1}}
	for _, n := range []string{"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"} {
		t[p+n+".weight"] = []int{h}
	}
	if g.source[l] == l {
		t[p+"self_attn.k_proj.weight"], t[p+"self_attn.k_norm.weight"] = []int{nkv * hd, h}, []int{hd}
		if !(c.AttentionKEqV && m.window[l] == 0) {
			t[p+"self_attn.v_proj.weight"] = []int{nkv * hd, h}
		}
	}
	if P := c.HiddenSizePerLayerInput; P > 0 {
		t[p+"per_layer_input_gate.weight"], t[p+"per_layer_projection.weight"] = []int{P, h}, []int{h, P}
		t[p+"post_per_layer_input_norm.weight"] = []int{h}
	}
	if c.EnableMoEBlock {
		E, I := c.NumExperts, c.MoEIntermediateSize
		t[p+"router.proj.weight"], t[p+"router.scale"], t[p+"router.per_expert_scale"] = []int{E, h}, []int{h}, []int{E}
		for _, n := range []string{"pre_feedforward_layernorm_2", "post_feedforward_layernorm_1", "post_feedforward_layernorm_2"} {
			t[p+n+".weight"] = []int{h}
		}
		for e := range E {
			t[fmt.Sprintf("%sexperts.%d.gate_up_proj.weight", p, e)] = []int{2 * I, h}
			t[fmt.Sprintf("%sexperts.%d.down_proj.weight", p, e)] = []int{h, I}
		}
	}
	return t
}

// gemma4Experts is the experts' branch on the residual r (Gemma4TextRouter, Gemma4TextExperts): softmax of
// proj(RMSNorm(r)·scale/√hidden), the top_k_experts by probability (ties to the lower index), renormalized and
// times per_expert_scale, each expert down(gelu_tanh(gate)·up) on pre_feedforward_layernorm_2(r), then
// post_feedforward_layernorm_2.
func (m *model) gemma4Experts(w *layerWeights, r []float64) []float64 {
	c := m.cfg
	E, I, h := c.NumExperts, c.MoEIntermediateSize, c.HiddenSize
	in := rmsNorm(r, nil, c.RMSNormEps, 0)
	for i, s := range w.vec("router.scale") {
		in[i] *= float64(s) / math.Sqrt(float64(h))
	}
	logits := make([]float64, E)
	linear(logits, w.get("router.proj.weight"), nil, in)
	p := logits
	softmax(p)
	chosen := make([]int, 0, c.TopKExperts)
	var chosenSum float64
	for range c.TopKExperts {
		best := -1
		for e, v := range p {
			if !slices.Contains(chosen, e) && (best < 0 || v > p[best]) {
				best = e
			}
		}
		chosen, chosenSum = append(chosen, best), chosenSum+p[best]
	}
	x := m.norm(r, w.vec("pre_feedforward_layernorm_2.weight"))
	out := make([]float64, h)
	for _, e := range chosen {
		weight := p[e] / chosenSum * float64(w.vec("router.per_expert_scale")[e])
		gu := make([]float64, 2*I)
		linear(gu, w.get(fmt.Sprintf("experts.%d.gate_up_proj.weight", e)), nil, x)
		for i := range I {
			gu[i] = m.activate(gu[i]) * gu[I+i]
		}
		y := make([]float64, h)
		linear(y, w.get(fmt.Sprintf("experts.%d.down_proj.weight", e)), nil, gu[:I])
		for i := range out {
			out[i] += weight * y[i]
		}
	}
	return m.norm(out, w.vec("post_feedforward_layernorm_2.weight"))
}

// gemma4ModelTensors are the tensors of the per-layer inputs, beside the embedding.
func (m *model) gemma4ModelTensors() map[string][]int {
	c := m.cfg
	P := c.HiddenSizePerLayerInput
	if P == 0 {
		return nil
	}
	n := c.NumHiddenLayers * P
	return map[string][]int{"model.embed_tokens_per_layer.weight": {c.VocabSizePerLayerInput, n},
		"model.per_layer_model_projection.weight": {n, c.HiddenSize}, "model.per_layer_projection_norm.weight": {P}}
}

// gemma4Inputs computes the per-layer inputs of ids, whose scaled embeddings are x (get_per_layer_inputs and
// project_per_layer_inputs): (norm(projection(x)/√hidden) + table[id]·√P) / √2, per layer's P values.
func (m *model) gemma4Inputs(ck *checkpoint.Checkpoint, ids []int, x [][]float64) error {
	c := m.cfg
	P, L := c.HiddenSizePerLayerInput, c.NumHiddenLayers
	if P == 0 {
		return nil
	}
	ts := m.gemma4ModelTensors()
	table, err := load(ck, "model.embed_tokens_per_layer.weight", ts["model.embed_tokens_per_layer.weight"]...)
	if err != nil {
		return err
	}
	proj, err := load(ck, "model.per_layer_model_projection.weight", ts["model.per_layer_model_projection.weight"]...)
	if err != nil {
		return err
	}
	norm, err := load(ck, "model.per_layer_projection_norm.weight", P)
	if err != nil {
		return err
	}
	scale, err := gemmaNormalizer(P, c.TorchDType)
	if err != nil {
		return err
	}
	m.g4.pli = make([][][]float64, len(ids))
	for p, id := range ids {
		id = m.embedID(id)
		if id >= table.rows {
			return fmt.Errorf("token id %d has no row in model.embed_tokens_per_layer.weight", id)
		}
		all := make([]float64, L*P)
		proj.apply(all, x[p])
		m.g4.pli[p] = make([][]float64, L)
		for l := range L {
			y := all[l*P : (l+1)*P]
			for i := range y {
				y[i] /= math.Sqrt(float64(c.HiddenSize))
			}
			y = m.norm(y, norm.data)
			for i, v := range table.row(id)[l*P : (l+1)*P] {
				y[i] = (y[i] + float64(v)*scale) / math.Sqrt2
			}
			m.g4.pli[p][l] = y
		}
	}
	return nil
}

// embedID is the token whose embeddings token id takes.
func (m *model) embedID(id int) int {
	if m.g4 == nil {
		return id
	}
	if to, ok := m.g4.embedAs[id]; ok {
		return to
	}
	return id
}

// gemma4Layer updates x with Gemma 4's decoder layer l (Gemma4TextDecoderLayer.forward).
func (m *model) gemma4Layer(l int, w *layerWeights, x [][]float64) {
	c, g := m.cfg, m.g4
	T, hd, nkv, nq := len(x), g.dims[l].HeadDim, g.dims[l].KVHeads, c.NumAttentionHeads
	heads := func(v []float64, n int, weight []float32) { // an RMSNorm over each head (weightless: nil)
		for h := range n {
			copy(v[h*hd:(h+1)*hd], m.norm(v[h*hd:(h+1)*hd], weight))
		}
	}
	q := make([][]float64, T)
	kv := [2][][]float64{make([][]float64, T), make([][]float64, T)}
	parallel(T, func(p int) {
		h := m.norm(x[p], w.vec("input_layernorm.weight"))
		q[p] = make([]float64, nq*hd)
		linear(q[p], w.get("self_attn.q_proj.weight"), nil, h)
		heads(q[p], nq, w.vec("self_attn.q_norm.weight"))
		gemma4Rotate(q[p], nq, hd, p, g.rot[l])
		if g.source[l] != l {
			return
		}
		k, v := make([]float64, nkv*hd), make([]float64, nkv*hd)
		linear(k, w.get("self_attn.k_proj.weight"), nil, h)
		if c.AttentionKEqV && m.window[l] == 0 {
			copy(v, k)
		} else {
			linear(v, w.get("self_attn.v_proj.weight"), nil, h)
		}
		heads(k, nkv, w.vec("self_attn.k_norm.weight"))
		gemma4Rotate(k, nkv, hd, p, g.rot[l])
		heads(v, nkv, nil)
		kv[0][p], kv[1][p] = k, v
	})
	if g.source[l] != l {
		kv = g.kv[g.source[l]]
	} else {
		g.kv[l] = kv
	}
	parallel(T, func(p int) {
		att := attend(q[p], kv[0], kv[1], p, m.window[l], nq, nkv, hd)
		o := make([]float64, c.HiddenSize)
		linear(o, w.get("self_attn.o_proj.weight"), nil, att)
		addTo(x[p], m.norm(o, w.vec("post_attention_layernorm.weight")))
		hm := m.norm(x[p], w.vec("pre_feedforward_layernorm.weight"))
		gt, up := make([]float64, g.inter[l]), make([]float64, g.inter[l])
		linear(gt, w.get("mlp.gate_proj.weight"), nil, hm)
		linear(up, w.get("mlp.up_proj.weight"), nil, hm)
		for i := range gt {
			gt[i] = m.activate(gt[i]) * up[i]
		}
		d := make([]float64, c.HiddenSize)
		linear(d, w.get("mlp.down_proj.weight"), nil, gt)
		if c.EnableMoEBlock { // the experts beside the MLP, both on the residual stream
			d = m.norm(d, w.vec("post_feedforward_layernorm_1.weight"))
			addTo(d, m.gemma4Experts(w, x[p]))
		}
		addTo(x[p], m.norm(d, w.vec("post_feedforward_layernorm.weight")))
		if g.pli != nil {
			gate := make([]float64, c.HiddenSizePerLayerInput)
			linear(gate, w.get("per_layer_input_gate.weight"), nil, x[p])
			for i := range gate {
				gate[i] = m.activate(gate[i]) * g.pli[p][l][i]
			}
			y := make([]float64, c.HiddenSize)
			linear(y, w.get("per_layer_projection.weight"), nil, gate)
			addTo(x[p], m.norm(y, w.vec("post_per_layer_input_norm.weight")))
		}
		s := float64(w.vec("layer_scalar")[0])
		for i := range x[p] {
			x[p][i] *= s
		}
	})
}

// attend is causal grouped-query attention of query q (nq heads of hd) at position p over keys and values k, v
// (by position, nkv heads), within window (0: none), scores unscaled (Gemma 4's scaling 1).
func attend(q []float64, k, v [][]float64, p, window, nq, nkv, hd int) []float64 {
	first := 0
	if window > 0 {
		first = max(0, p-window+1)
	}
	att := make([]float64, nq*hd)
	scores := make([]float64, p+1)
	for h := range nq {
		kvh := h / (nq / nkv)
		maxS := math.Inf(-1)
		for t := first; t <= p; t++ {
			var s float64
			for i, qv := range q[h*hd : (h+1)*hd] {
				s += qv * k[t][kvh*hd+i]
			}
			scores[t], maxS = s, max(maxS, s)
		}
		var sum float64
		for t := first; t <= p; t++ {
			scores[t] = math.Exp(scores[t] - maxS)
			sum += scores[t]
		}
		for t := first; t <= p; t++ {
			for i := range hd {
				att[h*hd+i] += scores[t] / sum * v[t][kvh*hd+i]
			}
		}
	}
	return att
}

// gemma4Rotate turns each of the heads (hd values each) of vec by position pos, rotate-half style.
func gemma4Rotate(vec []float64, heads, hd, pos int, r rotation) {
	k := len(r.invFreq)
	for i, f := range r.invFreq {
		sin, cos := math.Sincos(float64(pos) * f)
		for h := range heads {
			a, b := &vec[h*hd+i], &vec[h*hd+i+k]
			*a, *b = *a*cos-*b*sin, *b*cos+*a*sin
		}
	}
}

// addTo adds y to x.
func addTo(x, y []float64) {
	for i := range y {
		x[i] += y[i]
	}
}
