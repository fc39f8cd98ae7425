package model

import (
	"fmt"
	"slices"

	"github.com/layerstream/layerstream/checkpoint"
)

// moeMLP is the mixture of experts that replaces the dense MLP of a sparse layer (LayerKind.MoE): a router (a
// projection to one logit per expert, Ops.Route), num_experts gated MLPs each computing the rows routed to it,
// summed with their routing weights (Ops.Combine), and optionally a shared expert every row goes through, gated by
// sigmoid(shared_expert_gate·x) where the family has that gate (Qwen2-MoE).
//
// Each expert's weights are bound to LayerWeights.Experts[e], so that a later step can stream a layer's experts
// apart from it and load only those the router chose: the computation already asks for one expert at a time.
type moeMLP struct {
	experts, inter int // the routed experts and their intermediate size
	route          RouteOptions
	// Tensor names, relative to the layer: the router ("mlp.gate"), the experts ("mlp.experts", expert e under
	// "mlp.experts.e.") and their projections (gate_proj/up_proj/down_proj, Mixtral's w1/w3/w2).
	router, prefix, gate, up, down string
	// fusedGateUp: each expert has one gate_up_proj ([2·inter, hidden], the gate rows then the up rows; named by
	// gate) instead of separate gate and up projections (Llama 4's and gpt-oss's, as checkpoint.Open expands
	// their fused tensors).
	fusedGateUp bool
	// The shared expert ("" for none), its intermediate size and its gate ("" for none).
	shared, sharedGate string
	sharedInter        int
	// bias is the router's choice bias, e_score_correction_bias ("" for none).
	bias string
	// routerBias: the router's projection has a bias (gpt-oss's mlp.router.bias); expertBias: the experts'
	// projections have biases (gpt-oss's).
	routerBias, expertBias bool
	// glu, when set, replaces act(gate) ⊙ up in the routed experts (gpt-oss's clamped SwiGLU).
	glu func(ops Ops, gate, up Value) Value
	// expertScale, when set, names the router's per-expert factor on the routing weights [experts]
	// (RouteOptions.ExpertScale: Gemma 4's router.per_expert_scale).
	expertScale string
}

// newMoE reads the routed experts of c: num_experts (or num_local_experts), num_experts_per_tok, each expert of
// width inter; names are Qwen-MoE's (mlp.gate, mlp.experts.e.{gate,up,down}_proj), which families change.
func newMoE(c *checkpoint.Config, inter int, norm bool) (*moeMLP, error) {
	if c.NumExperts <= 0 {
		return nil, fmt.Errorf("num_experts (or num_local_experts) is %d: a mixture of experts needs at least one", c.NumExperts)
	}
	if c.NumExpertsPerTok <= 0 || c.NumExpertsPerTok > c.NumExperts {
		return nil, fmt.Errorf("num_experts_per_tok %d is not between 1 and num_experts %d", c.NumExpertsPerTok, c.NumExperts)
	}
	if inter <= 0 {
		return nil, fmt.Errorf("the experts' intermediate size is %d", inter)
	}
	return &moeMLP{experts: c.NumExperts, inter: inter, route: RouteOptions{K: c.NumExpertsPerTok, Score: SoftmaxScores, Norm: norm},
		router: "mlp.gate", prefix: "mlp.experts", gate: "gate_proj", up: "up_proj", down: "down_proj"}, nil
}

// newSigmoidMoE is DeepSeek-V3's mixture of experts, which GLM-4.5 shares (Glm4MoeTopkRouter and
// DeepseekV3TopkRouter are one computation): each expert's sigmoid score, the choice on score +
// e_score_correction_bias limited to the topk_group best of n_group groups, the chosen experts' unbiased
// scores as weights (renormalized with norm_topk_prob) times routed_scaling_factor; n_shared_experts shared
// experts as one ungated MLP (mlp.shared_experts) of n_shared_experts × moe_intermediate_size; dense layers
// before first_k_dense_replace.
func newSigmoidMoE(c *checkpoint.Config) (*moeMLP, func(i int) bool, error) {
	m, err := newMoE(c, c.MoEIntermediateSize, c.NormTopKProb)
	if err != nil {
		return nil, nil, err
	}
	if c.NSharedExperts < 0 {
		return nil, nil, fmt.Errorf("n_shared_experts %d is negative", c.NSharedExperts)
	}
	if c.FirstKDenseReplace < 0 {
		return nil, nil, fmt.Errorf("first_k_dense_replace %d is negative", c.FirstKDenseReplace)
	}
	g, top := c.NGroup, c.TopKGroup
	switch {
	case g < 1 || c.NumExperts%g != 0:
		return nil, nil, fmt.Errorf("n_group %d does not divide the %d experts into groups", g, c.NumExperts)
	case g > 1 && c.NumExperts/g < 2:
		return nil, nil, fmt.Errorf("n_group %d leaves groups of %d expert: a group's score is the sum of its best two", g, c.NumExperts/g)
	case top < 1 || top > g:
		return nil, nil, fmt.Errorf("topk_group %d is not between 1 and n_group %d", top, g)
	case c.NumExpertsPerTok > top*c.NumExperts/g:
		return nil, nil, fmt.Errorf("num_experts_per_tok %d exceeds the %d experts of the topk_group %d groups kept", c.NumExpertsPerTok, top*c.NumExperts/g, top)
	}
	m.route.Score, m.route.Scale, m.bias = SigmoidScores, c.RoutedScalingFactor, "mlp.gate.e_score_correction_bias"
	m.route.Groups, m.route.TopGroups = g, top
	if c.NSharedExperts > 0 {
		m.shared, m.sharedInter = "mlp.shared_experts", c.NSharedExperts*c.MoEIntermediateSize
	}
	return m, func(i int) bool { return i >= c.FirstKDenseReplace }, nil
}

// weights lists the router's, the experts' and the shared expert's tensors, held by the sparse layers.
func (m *moeMLP) weights(hidden int) []WeightSpec {
	sparse := func(k LayerKind) bool { return k.MoE }
	var ws []WeightSpec
	add := func(name string, field func(*LayerWeights) *Value, shape ...int) {
		ws = append(ws, WeightSpec{Name: name, Shape: shape, Field: field, In: sparse})
	}
	// proj adds a projection's weight [out, in] and, with bias, its bias [out].
	proj := func(name string, l func(*LayerWeights) *Linear, bias bool, out, in int) {
		add(name+".weight", func(w *LayerWeights) *Value { return &l(w).W }, out, in)
		if bias {
			add(name+".bias", func(w *LayerWeights) *Value { return &l(w).B }, out)
		}
	}
	proj(m.router, func(w *LayerWeights) *Linear { return &w.Router }, m.routerBias, m.experts, hidden)
	if m.bias != "" {
		add(m.bias, func(w *LayerWeights) *Value { return &w.RouterBias }, m.experts)
	}
	if m.expertScale != "" {
		add(m.expertScale, func(w *LayerWeights) *Value { return &w.ExpertScale }, m.experts)
	}
	for e := range m.experts {
		p := fmt.Sprintf("%s.%d.", m.prefix, e)
		if m.fusedGateUp {
			proj(p+m.gate, func(w *LayerWeights) *Linear { return &w.expert(e).GateUp }, m.expertBias, 2*m.inter, hidden)
		} else {
			proj(p+m.gate, func(w *LayerWeights) *Linear { return &w.expert(e).Gate }, m.expertBias, m.inter, hidden)
			proj(p+m.up, func(w *LayerWeights) *Linear { return &w.expert(e).Up }, m.expertBias, m.inter, hidden)
		}
		proj(p+m.down, func(w *LayerWeights) *Linear { return &w.expert(e).Down }, m.expertBias, hidden, m.inter)
	}
	if m.shared != "" {
		add(m.shared+".gate_proj.weight", func(w *LayerWeights) *Value { return &w.Shared.Gate.W }, m.sharedInter, hidden)
		add(m.shared+".up_proj.weight", func(w *LayerWeights) *Value { return &w.Shared.Up.W }, m.sharedInter, hidden)
		add(m.shared+".down_proj.weight", func(w *LayerWeights) *Value { return &w.Shared.Down.W }, hidden, m.sharedInter)
	}
	if m.sharedGate != "" {
		add(m.sharedGate+".weight", func(w *LayerWeights) *Value { return &w.SharedGate.W }, 1, hidden)
	}
	return ws
}

// apply is the mixture of experts on h [B, T, hidden]: Σ over each row's chosen experts of weight · expert(h),
// plus the (gated) shared expert.
func (m *moeMLP) apply(ops Ops, h Value, w *LayerWeights, act Activation) Value {
	y := m.routed(ops, h, m.choose(ops, h, w), w, act)
	if w.Shared.Down.W == nil {
		return y
	}
	s := gatedMLP(ops, h, w.Shared, m.sharedInter, act)
	if w.SharedGate.W != nil {
		s = ops.MulRows(s, ops.Act(linear(ops, h, w.SharedGate), Sigmoid))
	}
	return ops.Add(y, s)
}

// choose routes each row of the router's input h to its experts (Ops.Route).
func (m *moeMLP) choose(ops Ops, h Value, w *LayerWeights) Value {
	opts := m.route
	opts.Bias, opts.ExpertScale = w.RouterBias, w.ExpertScale
	return ops.Route(linear(ops, h, w.Router), opts)
}

// routed is Σ over each row of h's chosen experts (routing) of weight · expert(h).
func (m *moeMLP) routed(ops Ops, h, routing Value, w *LayerWeights, act Activation) Value {
	ys := make([]Value, len(w.Experts))
	for e := range w.Experts {
		if rows := ops.Rows(h, routing, e); rows != nil {
			ys[e] = m.expert(ops, rows, w.Experts[e], act) // read after Rows, which may bind the expert
		}
	}
	return ops.Combine(ys, routing)
}

// expert computes one routed expert on its rows h: gatedMLP, or with the family's glu in place of
// act(gate) ⊙ up.
func (m *moeMLP) expert(ops Ops, h Value, ex Expert, act Activation) Value {
	if m.glu == nil {
		return gatedMLP(ops, h, ex, m.inter, act)
	}
	gate, up := gateUp(ops, h, ex, m.inter)
	return linear(ops, m.glu(ops, gate, up), ex.Down)
}

// sparseLayers makes layer i a mixture of experts where sparse(i) says so, and the decoder's MoE m.
func (d *decoder) sparseLayers(m *moeMLP, sparse func(i int) bool) {
	d.moe = m
	for i := range d.plan.Layers {
		d.plan.Layers[i].MoE = sparse(i)
	}
}

// qwenSparse is Qwen-MoE's rule (Qwen2MoeDecoderLayer): layer i is sparse unless mlp_only_layers lists it or
// (i+1) is not a multiple of decoder_sparse_step.
func qwenSparse(c *checkpoint.Config) (func(i int) bool, error) {
	if c.DecoderSparseStep <= 0 {
		return nil, fmt.Errorf("decoder_sparse_step %d is not positive", c.DecoderSparseStep)
	}
	for _, l := range c.MLPOnlyLayers {
		if l < 0 || l >= c.NumHiddenLayers {
			return nil, fmt.Errorf("mlp_only_layers lists layer %d of %d", l, c.NumHiddenLayers)
		}
	}
	return func(i int) bool { return !slices.Contains(c.MLPOnlyLayers, i) && (i+1)%c.DecoderSparseStep == 0 }, nil
}
