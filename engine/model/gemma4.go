package model

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/layerstream/layerstream/checkpoint"
)

// Gemma 4 (text): sliding and full-attention layers (layer_types), each type with its own head size and key/value
// heads (per_layer_config: the full layers' global_head_dim) and rotary embedding (the full layers' proportional
// rope); q and k RMS-normalised per head, v by a weightless RMSNorm, attention scale 1; plain-weight RMSNorms
// before and after attention and the MLP; the last num_kv_shared_layers layers compute no keys and values and
// attend with those of the last earlier layer of their type (Plan.KVSource), their MLPs twice as wide with
// use_double_wide_mlp; with attention_k_eq_v the full layers' values are their keys' projection; per-layer inputs
// (hidden_size_per_layer_input: a table looked up by token, a projection of the embedding, gated into each layer
// after its MLP); each layer's output times its layer_scalar; embeddings × √hidden, logits soft-capped.
//
// Gemma4ForConditionalGeneration is the same decoder in text_config, its tensors under language_model
// (checkpoint.Architecture.TensorPrefixes); the vision and audio towers are not read, and the image, video and
// audio placeholder ids embed as the pad token, as its text-only forward does (Plan.EmbedAs).
func init() {
	Register("Gemma4ForCausalLM", newGemma4)
	Register("Gemma4ForConditionalGeneration", func(c *checkpoint.Config) (Architecture, error) {
		a, err := newGemma4(c)
		if err != nil {
			return nil, err
		}
		// Gemma4Model.forward: without images, video or audio, their placeholders embed as the pad token.
		p := a.Plan()
		p.EmbedAs = map[int]int{}
		for _, id := range []*int{c.ImageTokenID, c.VideoTokenID, c.AudioTokenID} {
			if id != nil {
				p.EmbedAs[*id] = c.PadTokenID
			}
		}
		return a, nil
	})
}

// gemma4 is the Gemma 4 decoder: the decoder's plan, norms and head, with its own layer.
type gemma4 struct {
	*decoder
	kEqV bool // attention_k_eq_v: the full layers' values are their k_proj outputs
	// doubleWide: use_double_wide_mlp.
	doubleWide bool
	// moe, with enable_moe_block, are the experts beside every layer's MLP (nil: none).
	moe *moeMLP
	// perLayer is hidden_size_per_layer_input (0: no per-layer inputs), tableRows the per-layer table's rows,
	// tableScale √perLayer rounded to the model's dtype, as the table's scaled embedding multiplies by it.
	perLayer, tableRows int
	tableScale          float64
}

func newGemma4(c *checkpoint.Config) (Architecture, error) {
	if err := gemma4Refusals(c); err != nil {
		return nil, err
	}
	dims, err := c.Gemma4LayerDims()
	if err != nil {
		return nil, err
	}
	act, err := ActivationFor("hidden_activation", c.HiddenActivation)
	if err != nil {
		return nil, err
	}
	full, sliding, err := gemma4Ropes(c, dims)
	if err != nil {
		return nil, err
	}
	d := newDecoderWith(c, act, full, sliding)
	d.attn.Scale = 1
	if err := gemmaShared(d, c); err != nil {
		return nil, err
	}
	if err := d.slidingLayers(c, c.SlidingWindow, true, func(int) bool { return false }); err != nil {
		return nil, err
	}
	d.ropePerWindow(1)
	g := &gemma4{decoder: d, kEqV: c.AttentionKEqV, doubleWide: c.UseDoubleWideMLP, perLayer: c.HiddenSizePerLayerInput, tableRows: c.VocabSizePerLayerInput}
	if g.tableScale, err = gemmaScale(c, g.perLayer); err != nil {
		return nil, err
	}
	if err := g.shareKV(c, dims); err != nil {
		return nil, err
	}
	if c.EnableMoEBlock {
		if g.moe, err = gemma4MoE(c); err != nil {
			return nil, err
		}
		for i := range g.plan.Layers {
			g.plan.Layers[i].MoE = true
		}
	}
	g.plan.PerLayerInput, g.plan.PerLayerTensors = g.perLayer, g.perLayerTensors()
	g.plan.Weights = g.weights()
	return g, nil
}

// gemma4Refusals refuses the Gemma 4 settings layerstream does not implement.
func gemma4Refusals(c *checkpoint.Config) error {
	switch {
	case c.LayerTypes == nil:
		return fmt.Errorf("config.json has no layer_types (Gemma4TextConfig would derive them): give them")
	case c.UseBidirectionalAttention != nil && *c.UseBidirectionalAttention != "vision":
		return fmt.Errorf("use_bidirectional_attention %q is not implemented: layerstream runs causal decoders (\"vision\" only concerns image tokens)", *c.UseBidirectionalAttention)
	case c.AttentionBias:
		return fmt.Errorf("attention_bias true is not implemented for Gemma 4")
	case c.HiddenSizePerLayerInput < 0 || c.HiddenSizePerLayerInput > 0 && c.VocabSizePerLayerInput <= 0:
		return fmt.Errorf("hidden_size_per_layer_input %d with vocab_size_per_layer_input %d", c.HiddenSizePerLayerInput, c.VocabSizePerLayerInput)
	case c.NumKVSharedLayers < 0 || c.NumKVSharedLayers >= c.NumHiddenLayers:
		return fmt.Errorf("num_kv_shared_layers %d: want 0 up to num_hidden_layers-1 (%d)", c.NumKVSharedLayers, c.NumHiddenLayers-1)
	}
	if c.LayerTypes[len(c.LayerTypes)-1] != "full_attention" {
		return fmt.Errorf("layer_types ends with %q: Gemma4TextConfig makes the last layer full_attention whatever it says; give full_attention", c.LayerTypes[len(c.LayerTypes)-1])
	}
	return nil
}

// gemma4MoE are the experts of enable_moe_block (Gemma4TextRouter, Gemma4TextExperts): top_k_experts of
// num_experts by softmax, renormalized, times router.per_expert_scale; each expert's gate and up fused.
func gemma4MoE(c *checkpoint.Config) (*moeMLP, error) {
	if c.TopKExperts <= 0 {
		return nil, fmt.Errorf("enable_moe_block with top_k_experts %d: want at least 1", c.TopKExperts)
	}
	k := *c
	k.NumExpertsPerTok = c.TopKExperts
	m, err := newMoE(&k, c.MoEIntermediateSize, true)
	if err != nil {
		return nil, fmt.Errorf("enable_moe_block: %w (top_k_experts, moe_intermediate_size)", err)
	}
	m.router, m.prefix, m.gate, m.fusedGateUp, m.expertScale = "router.proj", "experts", "gate_up_proj", true, "router.per_expert_scale"
	return m, nil
}

// gemma4Ropes are the full-attention and sliding layers' rotary embeddings, each for its type's head size (all
// layers of a type must have one: transformers computes a type's frequencies from one).
func gemma4Ropes(c *checkpoint.Config, dims []checkpoint.LayerDims) (full, sliding Rope, err error) {
	for _, k := range slices.Sorted(maps.Keys(c.RopeByLayerType)) {
		if k != "full_attention" && k != "sliding_attention" {
			return full, sliding, fmt.Errorf("rope_parameters.%s: layer type %q is not implemented (full_attention, sliding_attention)", k, k)
		}
	}
	headDim := map[string]int{}
	for i, lt := range c.LayerTypes {
		if h, ok := headDim[lt]; ok && h != dims[i].HeadDim {
			return full, sliding, fmt.Errorf("layer %d (%s) has head_dim %d, an earlier one of its type %d: transformers rotates a type with one head size", i, lt, dims[i].HeadDim, h)
		}
		headDim[lt] = dims[i].HeadDim
	}
	params := func(lt string) (checkpoint.Rope, error) {
		r, ok := c.RopeByLayerType[lt]
		if !ok {
			return r, fmt.Errorf("rope_parameters has no %s entry", lt)
		}
		return r, nil
	}
	opts := RopeOptions{Proportional: true}
	for _, r := range []struct {
		lt  string
		dst *Rope
	}{{"full_attention", &full}, {"sliding_attention", &sliding}} {
		if headDim[r.lt] == 0 { // no layer of the type: any rope serves
			*r.dst = Rope{Dims: 2, Params: checkpoint.Rope{Type: "default", Theta: 10000}, MaxPositions: c.MaxPositionEmbeddings}
			continue
		}
		p, err := params(r.lt)
		if err != nil {
			return full, sliding, err
		}
		if *r.dst, err = NewRope(p, headDim[r.lt], c.MaxPositionEmbeddings, opts); err != nil {
			return full, sliding, fmt.Errorf("%s layers: %w", r.lt, err)
		}
	}
	return full, sliding, nil
}

// shareKV sets each layer's cache dims and, for the last num_kv_shared_layers, the layer whose keys and values
// it reads: the last earlier unshared layer of its type (Gemma4TextConfig.kv_sharing_modes).
func (g *gemma4) shareKV(c *checkpoint.Config, dims []checkpoint.LayerDims) error {
	p := &g.plan
	first := c.NumHiddenLayers - c.NumKVSharedLayers
	p.KVSource = make([]int, c.NumHiddenLayers)
	for i := range p.Layers {
		p.KVSource[i] = i
		if dims[i].HeadDim != p.HeadDim {
			p.Layers[i].HeadDim = dims[i].HeadDim
		}
		if dims[i].KVHeads != p.KVHeads {
			p.Layers[i].KVHeads = dims[i].KVHeads
		}
		if i < first {
			continue
		}
		p.Layers[i].SharedKV = true
		p.KVSource[i] = -1
		for j := first - 1; j >= 0; j-- {
			if c.LayerTypes[j] == c.LayerTypes[i] {
				p.KVSource[i] = j
				break
			}
		}
		if p.KVSource[i] < 0 {
			return fmt.Errorf("layer %d (%s) shares keys and values (num_kv_shared_layers %d) but no earlier layer of its type computes them", i, c.LayerTypes[i], c.NumKVSharedLayers)
		}
	}
	return nil
}

// weights lists every kind of layer's tensors: the same name with the same shape is one WeightSpec held by every
// kind that has it, with different shapes (a full layer's q_proj, a shared layer's wider MLP) one per shape.
func (g *gemma4) weights() []WeightSpec {
	var ws []WeightSpec
	kinds := map[int]map[LayerKind]bool{} // by index in ws: the kinds holding it
	for _, k := range g.plan.Layers {
		for _, s := range g.kindWeights(k) {
			i := slices.IndexFunc(ws, func(w WeightSpec) bool { return w.Name == s.Name && slices.Equal(w.Shape, s.Shape) })
			if i < 0 {
				i = len(ws)
				ws = append(ws, s)
				kinds[i] = map[LayerKind]bool{}
			}
			kinds[i][k] = true
		}
	}
	for i := range ws {
		held := kinds[i]
		ws[i].In = func(k LayerKind) bool { return held[k] }
	}
	return ws
}

// kindWeights are the tensors of a layer of kind k.
func (g *gemma4) kindWeights(k LayerKind) []WeightSpec {
	kvHeads, hd := g.plan.KindDims(k)
	h, inter := g.hidden, g.mlpWidth(k)
	var ws []WeightSpec
	add := func(name string, field func(*LayerWeights) *Value, shape ...int) {
		ws = append(ws, WeightSpec{Name: name, Shape: shape, Field: field})
	}
	lin := func(l func(*LayerWeights) *Linear) func(*LayerWeights) *Value {
		return func(w *LayerWeights) *Value { return &l(w).W }
	}
	add(g.preAttnNorm, func(w *LayerWeights) *Value { return &w.AttnNorm }, h)
	add(g.postAttnNorm, func(w *LayerWeights) *Value { return &w.AttnPostNorm }, h)
	add(g.preMLPNorm, func(w *LayerWeights) *Value { return &w.MLPNorm }, h)
	add(g.postMLPNorm, func(w *LayerWeights) *Value { return &w.MLPPostNorm }, h)
	add("self_attn.q_proj.weight", lin(func(w *LayerWeights) *Linear { return &w.Q }), g.heads*hd, h)
	add("self_attn.q_norm.weight", func(w *LayerWeights) *Value { return &w.QNorm }, hd)
	add("self_attn.o_proj.weight", lin(func(w *LayerWeights) *Linear { return &w.O }), h, g.heads*hd)
	if !k.SharedKV {
		add("self_attn.k_proj.weight", lin(func(w *LayerWeights) *Linear { return &w.K }), kvHeads*hd, h)
		add("self_attn.k_norm.weight", func(w *LayerWeights) *Value { return &w.KNorm }, hd)
		if !g.valuesAreKeys(k) {
			add("self_attn.v_proj.weight", lin(func(w *LayerWeights) *Linear { return &w.V }), kvHeads*hd, h)
		}
	}
	add("mlp.gate_proj.weight", lin(func(w *LayerWeights) *Linear { return &w.Gate }), inter, h)
	add("mlp.up_proj.weight", lin(func(w *LayerWeights) *Linear { return &w.Up }), inter, h)
	add("mlp.down_proj.weight", lin(func(w *LayerWeights) *Linear { return &w.Down }), h, inter)
	if g.perLayer > 0 {
		add("per_layer_input_gate.weight", lin(func(w *LayerWeights) *Linear { return &w.PerLayerGate }), g.perLayer, h)
		add("per_layer_projection.weight", lin(func(w *LayerWeights) *Linear { return &w.PerLayerProj }), h, g.perLayer)
		add("post_per_layer_input_norm.weight", func(w *LayerWeights) *Value { return &w.PerLayerNorm }, h)
	}
	add("layer_scalar", func(w *LayerWeights) *Value { return &w.LayerScalar }, 1)
	if g.moe != nil {
		add("router.scale", func(w *LayerWeights) *Value { return &w.RouterScale }, h)
		add("pre_feedforward_layernorm_2.weight", func(w *LayerWeights) *Value { return &w.ExpertsNorm }, h)
		add("post_feedforward_layernorm_1.weight", func(w *LayerWeights) *Value { return &w.MLPPostNorm1 }, h)
		add("post_feedforward_layernorm_2.weight", func(w *LayerWeights) *Value { return &w.ExpertsPostNorm }, h)
		ws = append(ws, g.moe.weights(h)...)
	}
	return ws
}

// mlpWidth is a kind's MLP width: intermediate_size, twice it in a shared layer with use_double_wide_mlp.
func (g *gemma4) mlpWidth(k LayerKind) int {
	if k.SharedKV && g.doubleWide {
		return 2 * g.inter
	}
	return g.inter
}

// valuesAreKeys reports whether a layer of kind k takes its values from its k_proj (attention_k_eq_v: full layers).
func (g *gemma4) valuesAreKeys(k LayerKind) bool { return g.kEqV && k.Window == 0 }

func (g *gemma4) Layer(ops Ops, in LayerInputs) LayerOutputs {
	w, x, k := in.W, in.X, in.Kind
	kvHeads, hd := g.plan.KindDims(k)
	h := ops.RMSNorm(x, w.AttnNorm, g.eps, 0)
	q := ops.Rotary(ops.RMSNorm(ops.Heads(linear(ops, h, w.Q), g.heads, hd), w.QNorm, g.eps, 0))
	keys, values := in.K, in.V
	if !k.SharedKV {
		kp := linear(ops, h, w.K)
		vp := kp
		if !g.valuesAreKeys(k) {
			vp = linear(ops, h, w.V)
		}
		keys = ops.Rotary(ops.RMSNorm(ops.Heads(kp, kvHeads, hd), w.KNorm, g.eps, 0))
		values = ops.RMSNorm(ops.Heads(vp, kvHeads, hd), nil, g.eps, 0)
	}
	a := linear(ops, ops.Attention(q, keys, values, g.attn), w.O)
	x = ops.Add(x, ops.RMSNorm(a, w.AttnPostNorm, g.eps, 0))
	m := gatedMLP(ops, ops.RMSNorm(x, w.MLPNorm, g.eps, 0), Expert{Gate: w.Gate, Up: w.Up, Down: w.Down}, g.mlpWidth(k), g.act)
	if g.moe != nil {
		m = ops.Add(ops.RMSNorm(m, w.MLPPostNorm1, g.eps, 0), g.experts(ops, x, w))
	}
	x = ops.Add(x, ops.RMSNorm(m, w.MLPPostNorm, g.eps, 0))
	if in.PerLayer != nil {
		gate := ops.Mul(ops.Act(linear(ops, x, w.PerLayerGate), g.act), in.PerLayer)
		x = ops.Add(x, ops.RMSNorm(linear(ops, gate, w.PerLayerProj), w.PerLayerNorm, g.eps, 0))
	}
	x = ops.ScaleBy(x, w.LayerScalar)
	if k.SharedKV {
		return LayerOutputs{X: x}
	}
	return LayerOutputs{X: x, K: keys, V: values}
}

// experts is the experts' branch of the MLP sub-block on its input r (the residual stream): routed by
// RMSNorm(r)·router.scale/√hidden, computed on pre_feedforward_layernorm_2(r), normalised by
// post_feedforward_layernorm_2 (Gemma4TextDecoderLayer.forward).
func (g *gemma4) experts(ops Ops, r Value, w *LayerWeights) Value {
	routing := g.moe.choose(ops, ops.Scale(ops.RMSNorm(r, w.RouterScale, g.eps, 0), math.Pow(float64(g.hidden), -0.5)), w)
	y := g.moe.routed(ops, ops.RMSNorm(r, w.ExpertsNorm, g.eps, 0), routing, w, g.act)
	return ops.RMSNorm(y, w.ExpertsPostNorm, g.eps, 0)
}

// perLayerTensors are the per-layer table [vocab_size_per_layer_input, layers·P], the projection of the
// embeddings to every layer's input [layers·P, hidden] and its norm [P].
func (g *gemma4) perLayerTensors() []WeightSpec {
	if g.perLayer == 0 {
		return nil
	}
	n := len(g.plan.Layers) * g.perLayer
	return []WeightSpec{
		{Name: "model.embed_tokens_per_layer.weight", Shape: []int{g.tableRows, n}},
		{Name: "model.per_layer_model_projection.weight", Shape: []int{n, g.hidden}},
		{Name: "model.per_layer_projection_norm.weight", Shape: []int{g.perLayer}},
	}
}

// PerLayerInputs is (RMSNorm(projection(x) / √hidden) + tok · √P) / √2 per layer's P values
// (Gemma4TextModel.get_per_layer_inputs and project_per_layer_inputs), the √P scale rounded to the model's dtype
// as the embedding's.
func (g *gemma4) PerLayerInputs(ops Ops, x, tok Value, ws []Value) Value {
	proj := ops.Scale(ops.Linear(x, ws[0], nil), math.Pow(float64(g.hidden), -0.5))
	normed := ops.RMSNorm(ops.Heads(proj, len(g.plan.Layers), g.perLayer), ws[1], g.eps, 0) // [B, layers, T, P]
	sum := ops.Add(normed, ops.Heads(ops.Scale(tok, g.tableScale), len(g.plan.Layers), g.perLayer))
	return ops.Scale(sum, math.Pow(2, -0.5))
}
