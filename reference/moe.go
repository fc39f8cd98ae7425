package reference

import (
	"fmt"
	"math"
	"slices"
)

// experts is a mixture-of-experts MLP as transformers' sparse MoE blocks compute it (Mixtral, Qwen2-MoE,
// Qwen3-MoE, OLMoE), written from their modeling code: router logits r = W_gate·h, probabilities p = softmax(r)
// over the experts, the k experts of highest p, weights p_i (divided by Σ_topk p when renormalized), the output
// Σ_i w_i·expert_i(h) with expert(h) = down(silu(gate(h)) ⊙ up(h)); plus, for Qwen2-MoE, sigmoid(g·h)·shared(h).
type experts struct {
	n, k, inter int
	renorm      bool
	// Tensor names relative to the layer: router weight, expert e's gate, up and down weights.
	router             string
	gate, up, down     func(e int) string
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
		router: "mlp.gate.weight", sparse: make([]bool, L)}
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
	case "qwen2_moe", "qwen3_moe": // Qwen2MoeDecoderLayer: mlp_only_layers and decoder_sparse_step
		x.inter = c.MoEIntermediateSize
		if c.DecoderSparseStep <= 0 {
			return fmt.Errorf("decoder_sparse_step %d is not implemented by the reference", c.DecoderSparseStep)
		}
		for l := range L {
			x.sparse[l] = !slices.Contains(c.MLPOnlyLayers, l) && (l+1)%c.DecoderSparseStep == 0
		}
		if c.ModelType == "qwen2_moe" {
			x.shared, x.sharedGate, x.sharedInter = "mlp.shared_expert", "mlp.shared_expert_gate.weight", c.SharedExpertIntermediateSize
		}
	case "olmoe":
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
	for e := range x.n {
		t[x.gate(e)], t[x.up(e)], t[x.down(e)] = []int{x.inter, hidden}, []int{x.inter, hidden}, []int{hidden, x.inter}
	}
	if x.shared != "" {
		t[x.shared+".gate_proj.weight"], t[x.shared+".up_proj.weight"] = []int{x.sharedInter, hidden}, []int{x.sharedInter, hidden}
		t[x.shared+".down_proj.weight"], t[x.sharedGate] = []int{hidden, x.sharedInter}, []int{1, hidden}
	}
	return true
}

// moe computes the mixture of experts of one position's normalized hidden state h, in float64.
func (m *model) moe(w *layerWeights, h []float64) []float64 {
	x := m.experts
	r := make([]float64, x.n)
	linear(r, w.get(x.router), nil, h)
	top := slices.Max(r)
	var sum float64
	p := make([]float64, x.n)
	for i, v := range r {
		p[i] = math.Exp(v - top)
		sum += p[i]
	}
	for i := range p {
		p[i] /= sum
	}
	// The k largest probabilities, the lower index first among equal ones.
	order := make([]int, x.n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case p[a] > p[b]:
			return -1
		case p[a] < p[b]:
			return 1
		}
		return 0
	})
	chosen := order[:x.k]
	var norm float64 = 1
	if x.renorm {
		norm = 0
		for _, e := range chosen {
			norm += p[e]
		}
	}
	out := make([]float64, len(h))
	for _, e := range chosen {
		y := m.gatedMLP(w, h, x.gate(e), x.up(e), x.down(e), x.inter)
		for i, v := range y {
			out[i] += p[e] / norm * v
		}
	}
	if x.shared != "" {
		g := make([]float64, 1)
		linear(g, w.get(x.sharedGate), nil, h)
		s := 1 / (1 + math.Exp(-g[0]))
		y := m.gatedMLP(w, h, x.shared+".gate_proj.weight", x.shared+".up_proj.weight", x.shared+".down_proj.weight", x.sharedInter)
		for i, v := range y {
			out[i] += s * v
		}
	}
	return out
}

// gatedMLP is down(act(gate·h) ⊙ up·h) with the named weights (no biases) of intermediate size inter.
func (m *model) gatedMLP(w *layerWeights, h []float64, gate, up, down string, inter int) []float64 {
	g, u := make([]float64, inter), make([]float64, inter)
	linear(g, w.get(gate), nil, h)
	linear(u, w.get(up), nil, h)
	for i := range g {
		g[i] = m.activate(g[i]) * u[i]
	}
	d := make([]float64, len(h))
	linear(d, w.get(down), nil, g)
	return d
}
