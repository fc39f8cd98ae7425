package model

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/layerstream/layerstream/checkpoint"
)

// decoder is the transformer decoder that the families configure rather than copy: attention then an MLP, each
// a residual branch with optional norms before it (pre-norm: Llama) and after it (post-norm: OLMo 2; both:
// Gemma), grouped-query attention with optional q/k/v/o biases, optional q/k norms (over each head, or over the
// whole projection), separate or fused projections, and a gated MLP.
type decoder struct {
	plan                                   Plan
	hidden, heads, kvHeads, headDim, inter int
	eps                                    float64
	// normOffset is added to every norm weight: 1 for Gemma's (1 + w) norms.
	normOffset float64
	// The norms around the two residual branches, by tensor name ("" for none).
	preAttnNorm, postAttnNorm, preMLPNorm, postMLPNorm string
	qkNorm                                             qkNorm
	// fusedQKV: one qkv_proj [q+2kv, hidden]; fusedGateUp: one gate_up_proj [2·inter, hidden] (Phi-3).
	fusedQKV, fusedGateUp bool
	// mlpName is the dense MLP's module ("mlp"; Llama 4: "feed_forward").
	mlpName                 string
	qkvBias, oBias, mlpBias bool
	// sinks: the attention has sinks (self_attn.sinks [heads], gpt-oss).
	sinks bool
	act   Activation
	attn  AttentionOptions
	// residual multiplies each branch before it is added to the residual stream (Granite); 1: none.
	residual float64
	// logitScale multiplies the logits (Granite: 1/logits_scaling); logitSoftCap, when positive, caps them.
	logitScale, logitSoftCap float64
	// moe, when set, is the mixture of experts that replaces the MLP of the layers whose kind says MoE (moe.go).
	moe *moeMLP
}

// qkNorm says where the q and k projections are RMS-normalised.
type qkNorm int

const (
	noQKNorm      qkNorm = iota
	qkNormPerHead        // over each head's head_dim values, before rotary (Qwen3, Gemma 3): weights [head_dim]
	qkNormWhole          // over the whole projection, before rotary (OLMo 2): weights [heads·head_dim]
	// qkNormRotated: over each head, without weight, after rotary, on the rotary layers only (Llama 4's
	// use_qk_norm).
	qkNormRotated
)

// newDecoder is the Llama decoder for c: pre-norms input_layernorm and post_attention_layernorm, attention_bias
// on q/k/v/o_proj, mlp_bias on the MLP, hidden_act, one rotary embedding for every layer (whole heads, the
// common scaling types), full attention. Families change the fields they differ in, then call finish.
func newDecoder(c *checkpoint.Config) (*decoder, error) {
	act, err := ActivationFor("hidden_act", c.HiddenAct)
	if err != nil {
		return nil, err
	}
	if c.RopeByLayerType != nil {
		return nil, fmt.Errorf("rope_parameters nested by layer type (%v) is not implemented for this family", slices.Sorted(maps.Keys(c.RopeByLayerType)))
	}
	rope, err := NewRope(c.Rope, c.HeadDim, c.MaxPositionEmbeddings, RopeOptions{})
	if err != nil {
		return nil, err
	}
	return newDecoderWith(c, act, rope), nil
}

// newDecoderWith is newDecoder with the MLP activation and the rotary embeddings given: every layer uses
// ropes[0] until the family says otherwise (LayerKind.Rope). The context is the shortest the ropes serve.
func newDecoderWith(c *checkpoint.Config, act Activation, ropes ...Rope) *decoder {
	d := &decoder{
		hidden: c.HiddenSize, heads: c.NumAttentionHeads, kvHeads: c.NumKeyValueHeads, headDim: c.HeadDim,
		inter: c.IntermediateSize, eps: c.RMSNormEps,
		preAttnNorm: "input_layernorm.weight", preMLPNorm: "post_attention_layernorm.weight",
		qkvBias: c.AttentionBias, oBias: c.AttentionBias, mlpBias: c.MLPBias, act: act, mlpName: "mlp",
		attn:     AttentionOptions{Scale: 1 / math.Sqrt(float64(c.HeadDim))},
		residual: 1, logitScale: 1,
	}
	d.plan = Plan{Ropes: ropes, EmbedScale: 1, Context: ropes[0].Context(), KVHeads: c.NumKeyValueHeads, HeadDim: c.HeadDim}
	for _, r := range ropes[1:] {
		d.plan.Context = min(d.plan.Context, r.Context())
	}
	d.plan.Layers = make([]LayerKind, c.NumHiddenLayers)
	return d
}

// finish lists the layer's weights for the configured structure, each bound to its role in LayerWeights.
func (d *decoder) finish() *decoder {
	q, kv := d.heads*d.headDim, d.kvHeads*d.headDim
	var ws []WeightSpec
	add := func(name string, field func(*LayerWeights) *Value, shape ...int) {
		ws = append(ws, WeightSpec{Name: name, Shape: shape, Field: field})
	}
	// linear adds a projection's weight [out, in] and, with bias, its bias [out].
	linear := func(name string, l func(*LayerWeights) *Linear, bias bool, out, in int) {
		add(name+".weight", func(w *LayerWeights) *Value { return &l(w).W }, out, in)
		if bias {
			add(name+".bias", func(w *LayerWeights) *Value { return &l(w).B }, out)
		}
	}
	for _, n := range []struct {
		name  string
		field func(*LayerWeights) *Value
	}{
		{d.preAttnNorm, func(w *LayerWeights) *Value { return &w.AttnNorm }},
		{d.postAttnNorm, func(w *LayerWeights) *Value { return &w.AttnPostNorm }},
		{d.preMLPNorm, func(w *LayerWeights) *Value { return &w.MLPNorm }},
		{d.postMLPNorm, func(w *LayerWeights) *Value { return &w.MLPPostNorm }},
	} {
		if n.name != "" {
			add(n.name, n.field, d.hidden)
		}
	}
	if d.fusedQKV {
		linear("self_attn.qkv_proj", func(w *LayerWeights) *Linear { return &w.QKV }, d.qkvBias, q+2*kv, d.hidden)
	} else {
		linear("self_attn.q_proj", func(w *LayerWeights) *Linear { return &w.Q }, d.qkvBias, q, d.hidden)
		linear("self_attn.k_proj", func(w *LayerWeights) *Linear { return &w.K }, d.qkvBias, kv, d.hidden)
		linear("self_attn.v_proj", func(w *LayerWeights) *Linear { return &w.V }, d.qkvBias, kv, d.hidden)
	}
	linear("self_attn.o_proj", func(w *LayerWeights) *Linear { return &w.O }, d.oBias, d.hidden, q)
	if d.sinks {
		add("self_attn.sinks", func(w *LayerWeights) *Value { return &w.Sinks }, d.heads)
	}
	qNorm, kNorm := func(w *LayerWeights) *Value { return &w.QNorm }, func(w *LayerWeights) *Value { return &w.KNorm }
	switch d.qkNorm {
	case qkNormPerHead:
		add("self_attn.q_norm.weight", qNorm, d.headDim)
		add("self_attn.k_norm.weight", kNorm, d.headDim)
	case qkNormWhole:
		add("self_attn.q_norm.weight", qNorm, q)
		add("self_attn.k_norm.weight", kNorm, kv)
	}
	mlp := len(ws)
	if d.fusedGateUp {
		linear(d.mlpName+".gate_up_proj", func(w *LayerWeights) *Linear { return &w.GateUp }, d.mlpBias, 2*d.inter, d.hidden)
	} else {
		linear(d.mlpName+".gate_proj", func(w *LayerWeights) *Linear { return &w.Gate }, d.mlpBias, d.inter, d.hidden)
		linear(d.mlpName+".up_proj", func(w *LayerWeights) *Linear { return &w.Up }, d.mlpBias, d.inter, d.hidden)
	}
	linear(d.mlpName+".down_proj", func(w *LayerWeights) *Linear { return &w.Down }, d.mlpBias, d.hidden, d.inter)
	if d.moe != nil { // the dense MLP in dense layers only (if any), the experts in the others
		for i := mlp; i < len(ws); i++ {
			ws[i].In = func(k LayerKind) bool { return !k.MoE }
		}
		if !slices.ContainsFunc(d.plan.Layers, func(k LayerKind) bool { return !k.MoE }) {
			ws = ws[:mlp]
		}
		ws = append(ws, d.moe.weights(d.hidden)...)
	}
	d.plan.Weights = ws
	return d
}

func (d *decoder) Plan() *Plan { return &d.plan }

// norm applies the RMSNorm of weight n to x, or returns x when the layer has no such norm (n is nil).
func (d *decoder) norm(ops Ops, x, n Value) Value {
	if n == nil {
		return x
	}
	return ops.RMSNorm(x, n, d.eps, d.normOffset)
}

// branch adds a residual branch to x, scaled by the residual multiplier.
func (d *decoder) branch(ops Ops, x, y Value) Value {
	if d.residual != 1 {
		y = ops.Scale(y, d.residual)
	}
	return ops.Add(x, y)
}

// linear applies a projection.
func linear(ops Ops, x Value, l Linear) Value { return ops.Linear(x, l.W, l.B) }

func (d *decoder) Layer(ops Ops, in LayerInputs) LayerOutputs {
	w, x := in.W, in.X
	h := d.norm(ops, x, w.AttnNorm)
	q, k, v := d.project(ops, h, w)
	if in.Kind.Rope != NoRope {
		q, k = ops.Rotary(q), ops.Rotary(k)
		if d.qkNorm == qkNormRotated {
			q, k = ops.RMSNorm(q, nil, d.eps, 0), ops.RMSNorm(k, nil, d.eps, 0)
		}
	}
	if in.Kind.QueryScale.Beta != 0 {
		q = ops.ScaleQueries(q)
	}
	attn := d.attn
	attn.Sinks = w.Sinks
	a := linear(ops, ops.Attention(q, k, v, attn), w.O)
	x = d.branch(ops, x, d.norm(ops, a, w.AttnPostNorm))
	return LayerOutputs{X: d.mlpBranch(ops, in, x), K: k, V: v}
}

// mlpBranch is the MLP's residual branch on x: the dense MLP, or the mixture of experts of a sparse layer
// (feedForward), between its norms.
func (d *decoder) mlpBranch(ops Ops, in LayerInputs, x Value) Value {
	w := in.W
	m := d.feedForward(ops, d.norm(ops, x, w.MLPNorm), w, in.Kind)
	return d.branch(ops, x, d.norm(ops, m, w.MLPPostNorm))
}

// feedForward is the layer's MLP on h: the mixture of experts on a sparse layer, else the dense MLP.
func (d *decoder) feedForward(ops Ops, h Value, w *LayerWeights, kind LayerKind) Value {
	if kind.MoE {
		return d.moe.apply(ops, h, w, d.act)
	}
	return d.mlp(ops, h, w)
}

// mlp is the dense gated MLP: down(act(gate(h)) ⊙ up(h)), with separate or fused gate and up projections.
func (d *decoder) mlp(ops Ops, h Value, w *LayerWeights) Value {
	return gatedMLP(ops, h, Expert{Gate: w.Gate, Up: w.Up, GateUp: w.GateUp, Down: w.Down}, d.inter, d.act)
}

// gatedMLP is down(act(gate(h)) ⊙ up(h)) of intermediate size inter, gate and up separate or fused (GateUp):
// the dense MLP, an expert, a shared expert.
func gatedMLP(ops Ops, h Value, e Expert, inter int, act Activation) Value {
	gate, up := gateUp(ops, h, e, inter)
	return linear(ops, ops.Mul(ops.Act(gate, act), up), e.Down)
}

// gateUp is the gate and up projections of h, each [.., inter]: separate, or split from the fused GateUp.
func gateUp(ops Ops, h Value, e Expert, inter int) (gate, up Value) {
	if e.GateUp.W != nil {
		gu := ops.Split(linear(ops, h, e.GateUp), inter, inter)
		return gu[0], gu[1]
	}
	return linear(ops, h, e.Gate), linear(ops, h, e.Up)
}

// project computes the query, key and value heads of h, q/k-normalised where the family does.
func (d *decoder) project(ops Ops, h Value, w *LayerWeights) (q, k, v Value) {
	if d.fusedQKV {
		qkv := ops.Split(linear(ops, h, w.QKV), d.heads*d.headDim, d.kvHeads*d.headDim, d.kvHeads*d.headDim)
		q, k, v = qkv[0], qkv[1], qkv[2]
	} else {
		q, k, v = linear(ops, h, w.Q), linear(ops, h, w.K), linear(ops, h, w.V)
	}
	if d.qkNorm == qkNormWhole {
		q = ops.RMSNorm(q, w.QNorm, d.eps, d.normOffset)
		k = ops.RMSNorm(k, w.KNorm, d.eps, d.normOffset)
	}
	q, k, v = ops.Heads(q, d.heads, d.headDim), ops.Heads(k, d.kvHeads, d.headDim), ops.Heads(v, d.kvHeads, d.headDim)
	if d.qkNorm == qkNormPerHead {
		q = ops.RMSNorm(q, w.QNorm, d.eps, d.normOffset)
		k = ops.RMSNorm(k, w.KNorm, d.eps, d.normOffset)
	}
	return q, k, v
}

func (d *decoder) Head(ops Ops, x, norm, out Value) Value {
	y := ops.Linear(ops.RMSNorm(x, norm, d.eps, d.normOffset), out, nil)
	if d.logitScale != 1 {
		y = ops.Scale(y, d.logitScale)
	}
	if d.logitSoftCap > 0 {
		y = ops.SoftCap(y, d.logitSoftCap)
	}
	return y
}

// slidingLayers sets each layer's window: from layer_types ("full_attention" or "sliding_attention") when the
// config has it, else sliding where derived(i) says. window is the sliding layers' window (nil: none, which a
// sliding layer refuses); enabled says whether the family's switch (use_sliding_window) allows sliding layers.
func (d *decoder) slidingLayers(c *checkpoint.Config, window *int, enabled bool, derived func(i int) bool) error {
	for i := range d.plan.Layers {
		sliding := derived(i)
		if c.LayerTypes != nil {
			switch lt := c.LayerTypes[i]; lt {
			case "full_attention":
				sliding = false
			case "sliding_attention":
				sliding = true
			default:
				return fmt.Errorf("layer_types[%d] %q is not implemented (supported: full_attention, sliding_attention)", i, lt)
			}
		}
		if !sliding {
			d.plan.Layers[i].Window = 0
			continue
		}
		if !enabled {
			return fmt.Errorf("layer_types[%d] is sliding_attention but use_sliding_window is false", i)
		}
		if window == nil {
			return fmt.Errorf("layer_types[%d] is sliding_attention but sliding_window is null", i)
		}
		d.plan.Layers[i].Window = *window
	}
	return nil
}

// ropePerWindow gives every sliding layer (Window > 0) the rotary embedding Plan.Ropes[rope], the full ones
// keeping theirs: families whose rope_parameters are nested by layer type.
func (d *decoder) ropePerWindow(rope int) {
	for i, l := range d.plan.Layers {
		if l.Window > 0 {
			d.plan.Layers[i].Rope = rope
		}
	}
}
