package reference

import (
	"fmt"
	"math"
	"slices"
)

// experts is a mixture-of-experts MLP as transformers' sparse MoE blocks compute it (Mixtral, Qwen2-MoE,
// Qwen3-MoE, OLMoE, GLM-4.5, MiniMax-M2), written from their modeling code: router logits r = W_gate·h, scores
// p = softmax(r) over the experts (GLM-4.5, MiniMax-M2: sigmoid(r_i)), the k experts of highest p (+ the
// e_score_correction_bias), weights p_i (divided by Σ_topk p when renormalized, times routed_scaling_factor), the
// output Σ_i w_i·expert_i(h) with expert(h) = down(silu(gate(h)) ⊙ up(h)); plus a shared expert, for Qwen2-MoE
// times sigmoid(g·h).
type experts struct {
	n, k, inter int
	renorm      bool
	// sigmoid: scores are each logit's sigmoid (GLM-4.5, MiniMax-M2), chosen by score + the bias tensor (""
	// for none), the weights times scale.
	sigmoid bool
	bias    string
	scale   float64
	// groups > 1: the choice is among the experts of the topGroups groups (of consecutive experts) whose two best
	// choice scores sum highest (DeepSeek-V3).
	groups, topGroups int
	// Tensor names relative to the layer: router weight, expert e's gate, up and down weights (gate nil: up is
	// the gate and up projections in one, [2·inter, hidden], gate rows first).
	router         string
	gate, up, down func(e int) string
	// onInput (Llama 4): the experts are the top k of the logits themselves, and expert e computes on
	// sigmoid(logit_e)·h, its output added as it is.
	onInput bool
	// gpt-oss: the router's bias (routerBias, "" for none) added to its logits, the k largest logits chosen and
	// weighted by their softmax (topKSoftmax); each expert one gate_up_proj (gateUp: [2·inter, hidden], the gate
	// rows then the up rows) with biases on its projections, combined by the clamped SwiGLU
	// (up + 1)·g·σ(alpha·g), g = min(gate, limit), up clamped to ±limit (glu).
	routerBias         string
	topKSoftmax        bool
	gateUp             func(e int) string
	alpha              float64
	limit              float64
	shared, sharedGate string // "" for none
	sharedInter        int
	// sparse[l]: layer l has the experts (else a dense MLP of intermediate_size).
	sparse []bool
}

// newExperts reads the mixture of experts of the families the reference implements.
func (m *model) newExperts() error {
	c := m.cfg
	L := c.NumHiddenLayers
	x := &experts{n: c.NumExperts, k: c.NumExpertsPerTok, inter: c.IntermediateSize, renorm: c.NormTopKProb,
		router: "mlp.gate.weight", sparse: make([]bool, L), scale: 1}
	named := func(prefix, g, u, d string) {
		x.gate = func(e int) string { return fmt.Sprintf("%s.%d.%s.weight", prefix, e, g) }
		x.up = func(e int) string { return fmt.Sprintf("%s.%d.%s.weight", prefix, e, u) }
		x.down = func(e int) string { return fmt.Sprintf("%s.%d.%s.weight", prefix, e, d) }
	}
	named("mlp.experts", "gate_proj", "up_proj", "down_proj")
	for l := range L {
		x.sparse[l] = true
	}
	switch c.ModelType {
	case "mixtral": // MixtralTopKRouter always renormalizes
		x.renorm, x.router = true, "block_sparse_moe.gate.weight"
		named("block_sparse_moe.experts", "w1", "w3", "w2")
	case "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text":
		// Qwen2MoeDecoderLayer (Qwen3NextDecoderLayer alike): mlp_only_layers and decoder_sparse_step; Qwen3.5-MoE:
		// every layer, always renormalized. All but Qwen3-MoE add a sigmoid-gated shared expert.
		x.inter = c.MoEIntermediateSize
		if c.ModelType != "qwen3_moe" {
			x.shared, x.sharedGate, x.sharedInter = "mlp.shared_expert", "mlp.shared_expert_gate.weight", c.SharedExpertIntermediateSize
		}
		if c.ModelType == "qwen3_5_moe_text" {
			x.renorm = true
			break
		}
		if c.DecoderSparseStep <= 0 {
			return fmt.Errorf("decoder_sparse_step %d is not implemented by the reference", c.DecoderSparseStep)
		}
		for l := range L {
			x.sparse[l] = !slices.Contains(c.MLPOnlyLayers, l) && (l+1)%c.DecoderSparseStep == 0
		}
	case "olmoe":
	case "glm4_moe", "deepseek_v3": // Glm4MoeTopkRouter, DeepseekV3TopkRouter: groups; ungated shared experts; dense first layers
		if c.NGroup < 1 || c.NumExperts%c.NGroup != 0 || c.TopKGroup < 1 || c.TopKGroup > c.NGroup ||
			(c.NGroup > 1 && c.NumExperts/c.NGroup < 2) || c.NumExpertsPerTok > c.TopKGroup*c.NumExperts/c.NGroup {
			return fmt.Errorf("n_group %d, topk_group %d of %d experts is not implemented by the reference", c.NGroup, c.TopKGroup, c.NumExperts)
		}
		x.groups, x.topGroups = c.NGroup, c.TopKGroup
		x.inter, x.sigmoid, x.bias, x.scale = c.MoEIntermediateSize, true, "mlp.gate.e_score_correction_bias", c.RoutedScalingFactor
		if c.NSharedExperts > 0 {
			x.shared, x.sharedInter = "mlp.shared_experts", c.NSharedExperts*c.MoEIntermediateSize
		}
		for l := range L {
			x.sparse[l] = l >= c.FirstKDenseReplace
		}
	case "minimax_m2": // MiniMaxM2TopKRouter: sigmoid, biased choice, always renormalized
		x.renorm, x.sigmoid, x.bias, x.router = true, true, "block_sparse_moe.e_score_correction_bias", "block_sparse_moe.gate.weight"
		named("block_sparse_moe.experts", "w1", "w3", "w2")
	case "gpt_oss": // GptOssTopKRouter and GptOssExperts, the experts as checkpoint.Open expands them
		x.router, x.routerBias, x.topKSoftmax, x.renorm = "mlp.router.weight", "mlp.router.bias", true, true
		x.alpha, x.limit = c.SwigluAlpha, c.SwigluLimit
		x.gateUp = func(e int) string { return fmt.Sprintf("mlp.experts.%d.gate_up_proj", e) }
		x.down = func(e int) string { return fmt.Sprintf("mlp.experts.%d.down_proj", e) }
	case "llama4_text": // Llama4TextMoe
		x.router, x.onInput, x.gate = "feed_forward.router.weight", true, nil
		x.up = func(e int) string { return fmt.Sprintf("feed_forward.experts.%d.gate_up_proj.weight", e) }
		x.down = func(e int) string { return fmt.Sprintf("feed_forward.experts.%d.down_proj.weight", e) }
		x.shared, x.sharedInter = "feed_forward.shared_expert", c.IntermediateSize
		for l := range L {
			x.sparse[l] = m.llama4Sparse(l)
		}
	default:
		return fmt.Errorf("experts of %s are not implemented by the reference", c.ModelType)
	}
	if x.n <= 0 || x.k <= 0 || x.k > x.n {
		return fmt.Errorf("%d of %d experts per token is not implemented by the reference", x.k, x.n)
	}
	m.experts = x
	return nil
}

// tensors adds layer l's router and expert tensors (names relative to the layer) to t, when the layer is sparse.
func (x *experts) tensors(l, hidden int, t map[string][]int) bool {
	if !x.sparse[l] {
		return false
	}
	t[x.router] = []int{x.n, hidden}
	if x.bias != "" {
		t[x.bias] = []int{x.n}
	}
	if x.routerBias != "" {
		t[x.routerBias] = []int{x.n}
	}
	for e := range x.n {
		if x.gateUp != nil {
			t[x.gateUp(e)+".weight"], t[x.gateUp(e)+".bias"] = []int{2 * x.inter, hidden}, []int{2 * x.inter}
			t[x.down(e)+".weight"], t[x.down(e)+".bias"] = []int{hidden, x.inter}, []int{hidden}
			continue
		}
		if x.gate == nil {
			t[x.up(e)], t[x.down(e)] = []int{2 * x.inter, hidden}, []int{hidden, x.inter}
			continue
		}
		t[x.gate(e)], t[x.up(e)], t[x.down(e)] = []int{x.inter, hidden}, []int{x.inter, hidden}, []int{hidden, x.inter}
	}
	if x.shared != "" {
		t[x.shared+".gate_proj.weight"], t[x.shared+".up_proj.weight"] = []int{x.sharedInter, hidden}, []int{x.sharedInter, hidden}
		t[x.shared+".down_proj.weight"] = []int{hidden, x.sharedInter}
		if x.sharedGate != "" {
			t[x.sharedGate] = []int{1, hidden}
		}
	}
	return true
}

// moe computes the mixture of experts of one position's normalized hidden state h, in float64.
func (m *model) moe(w *layerWeights, h []float64) []float64 {
	x := m.experts
	r := make([]float64, x.n)
	linear(r, w.get(x.router), w.vec(x.routerBias), h)
	p := make([]float64, x.n)
	if x.topKSoftmax {
		copy(p, r) // chosen by logit; their weights below
	} else if x.sigmoid || x.onInput {
		for i, v := range r {
			p[i] = sigmoid(v)
		}
	} else {
		copy(p, r)
		softmax(p)
	}
	choice := slices.Clone(p)
	if x.onInput {
		choice = slices.Clone(r)
	}
	if x.bias != "" {
		for i, b := range w.vec(x.bias) {
			choice[i] += float64(b)
		}
	}
	if x.groups > 1 {
		keepGroups(choice, x.groups, x.topGroups)
	}
	chosen := topExperts(choice, x.k)
	if x.topKSoftmax { // softmax over the chosen logits: chosen[0]'s is the largest
		top := p[chosen[0]]
		for _, e := range chosen {
			p[e] = math.Exp(p[e] - top) // divided by their sum below (renorm)
		}
	}
	var norm float64 = 1
	if x.renorm {
		norm = 0
		for _, e := range chosen {
			norm += p[e]
		}
	}
	out := make([]float64, len(h))
	for _, e := range chosen {
		in, weight := h, p[e]/norm*x.scale
		if x.onInput {
			in, weight = make([]float64, len(h)), 1
			for i, v := range h {
				in[i] = p[e] * v
			}
		}
		var y []float64
		if x.gateUp != nil {
			y = m.clampedExpert(w, in, e)
		} else {
			gate := ""
			if x.gate != nil {
				gate = x.gate(e)
			}
			y = m.gatedMLP(w, in, gate, x.up(e), x.down(e), x.inter)
		}
		for i, v := range y {
			out[i] += weight * v
		}
	}
	if x.shared != "" {
		s := 1.0
		if x.sharedGate != "" {
			g := make([]float64, 1)
			linear(g, w.get(x.sharedGate), nil, h)
			s = sigmoid(g[0])
		}
		y := m.gatedMLP(w, h, x.shared+".gate_proj.weight", x.shared+".up_proj.weight", x.shared+".down_proj.weight", x.sharedInter)
		for i, v := range y {
			out[i] += s * v
		}
	}
	return out
}

// topExperts is the indices of the k best scores, best first, the lower index first among equal ones (experts
// by their choice scores, or groups of them).
func topExperts(choice []float64, k int) []int {
	order := make([]int, len(choice))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case choice[a] > choice[b]:
			return -1
		case choice[a] < choice[b]:
			return 1
		}
		return 0
	})
	return order[:k]
}

// keepGroups sets the choice scores outside the top best of groups groups to -∞: a group scored by the sum of
// its two highest choice scores (DeepseekV3TopkRouter), the lower group first among equal ones.
func keepGroups(choice []float64, groups, top int) {
	size := len(choice) / groups
	score := make([]float64, groups)
	for g := range groups {
		c := slices.Clone(choice[g*size : (g+1)*size])
		slices.Sort(c)
		score[g] = c[size-1] + c[size-2]
	}
	for _, g := range topExperts(score, groups)[top:] {
		for i := range size {
			choice[g*size+i] = math.Inf(-1)
		}
	}
}

// gatedMLP is down(act(gate·h) ⊙ up·h) with the named weights (no biases) of intermediate size inter; gate ""
// when up is the gate and up projections in one (gate rows first).
func (m *model) gatedMLP(w *layerWeights, h []float64, gate, up, down string, inter int) []float64 {
	g, u := make([]float64, inter), make([]float64, inter)
	if gate == "" {
		gu := make([]float64, 2*inter)
		linear(gu, w.get(up), nil, h)
		copy(g, gu[:inter])
		copy(u, gu[inter:])
	} else {
		linear(g, w.get(gate), nil, h)
		linear(u, w.get(up), nil, h)
	}
	for i := range g {
		g[i] = m.activate(g[i]) * u[i]
	}
	d := make([]float64, len(h))
	linear(d, w.get(down), nil, g)
	return d
}

// clampedExpert is gpt-oss's expert e on h: gu = gate_up_proj·h + b (gate = its first inter values, up the
// rest), a = (clamp(up, ±limit) + 1)·g·σ(alpha·g) with g = min(gate, limit), then down_proj·a + b.
func (m *model) clampedExpert(w *layerWeights, h []float64, e int) []float64 {
	x := m.experts
	gu := make([]float64, 2*x.inter)
	linear(gu, w.get(x.gateUp(e)+".weight"), w.vec(x.gateUp(e)+".bias"), h)
	a := make([]float64, x.inter)
	for i := range a {
		g, u := math.Min(gu[i], x.limit), math.Max(math.Min(gu[x.inter+i], x.limit), -x.limit)
		a[i] = (u + 1) * g / (1 + math.Exp(-x.alpha*g))
	}
	d := make([]float64, len(h))
	linear(d, w.get(x.down(e)+".weight"), w.vec(x.down(e)+".bias"), a)
	return d
}

// moeFamily configures the attention of the mixture-of-experts families and their experts; known is false for
// another model_type. sliding sets the sliding layers by the family's rule; partial says whether the family
// rotates part of each head.
func (m *model) moeFamily(sliding func(rule func(l int) bool) error) (known, partial bool, err error) {
	c := m.cfg
	switch c.ModelType {
	case "mixtral": // Mistral's attention
		err = m.newExperts()
		if err == nil {
			err = sliding(func(int) bool { return c.SlidingWindow != nil })
		}
	case "qwen2_moe": // Qwen2's attention, q/k/v biases as qkv_bias says
		m.qkvBias, m.oBias = c.QKVBias, false
		err = m.newExperts()
		if err == nil {
			err = sliding(func(l int) bool { return c.UseSlidingWindow && c.SlidingWindow != nil && l >= c.MaxWindowLayers })
		}
	case "qwen3_moe": // Qwen3's attention; use_sliding_window slides every layer (Qwen3MoeConfig)
		m.qkNorm = "head"
		err = m.newExperts()
		if err == nil {
			err = sliding(func(int) bool { return c.UseSlidingWindow })
		}
	case "olmoe": // OLMo 2's q/k norms over the whole projections, Llama's pre-norms
		if c.ClipQKV != nil {
			return true, false, fmt.Errorf("clip_qkv is not implemented by the reference")
		}
		m.qkNorm = "whole"
		err = m.newExperts()
	case "glm4_moe": // q/k/v biases, per-head q/k norms with use_qk_norm, partial rotary
		m.qkvBias, m.oBias, partial = c.AttentionBias, false, true
		if c.UseQKNorm {
			m.qkNorm = "head"
		}
		err = m.newExperts()
	case "minimax_m2": // q/k norms over the whole projections, partial rotary
		m.qkNorm, partial = "whole", true
		err = m.newExperts()
	case "gpt_oss": // attention sinks, q/k/v/o biases (attention_bias), the even layers sliding without layer_types
		m.sinks = true
		err = m.newExperts()
		if err == nil {
			err = sliding(func(l int) bool { return l%2 == 0 })
		}
	case "deepseek_v3":
		if err = m.newLatent(); err == nil {
			err = m.newExperts()
		}
	default:
		return false, false, nil
	}
	return true, partial, err
}
