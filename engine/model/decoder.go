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
	fusedQKV, fusedGateUp   bool
	qkvBias, oBias, mlpBias bool
	act                     Activation
	attn                    AttentionOptions
	// residual multiplies each branch before it is added to the residual stream (Granite); 1: none.
	residual float64
	// logitScale multiplies the logits (Granite: 1/logits_scaling); logitSoftCap, when positive, caps them.
	logitScale, logitSoftCap float64
}

// qkNorm says where the q and k projections are RMS-normalised before rotary embeddings.
type qkNorm int

const (
	noQKNorm      qkNorm = iota
	qkNormPerHead        // over each head's head_dim values (Qwen3, Gemma 3): weights [head_dim]
	qkNormWhole          // over the whole projection (OLMo 2): weights [heads·head_dim]
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
		qkvBias: c.AttentionBias, oBias: c.AttentionBias, mlpBias: c.MLPBias, act: act,
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

// finish lists the layer's weights for the configured structure.
func (d *decoder) finish() *decoder {
	q, kv := d.heads*d.headDim, d.kvHeads*d.headDim
	var w []WeightSpec
	add := func(name string, shape ...int) { w = append(w, WeightSpec{Name: name, Shape: shape}) }
	for _, n := range []string{d.preAttnNorm, d.postAttnNorm, d.preMLPNorm, d.postMLPNorm} {
		if n != "" {
			add(n, d.hidden)
		}
	}
	if d.fusedQKV {
		add("self_attn.qkv_proj.weight", q+2*kv, d.hidden)
		if d.qkvBias {
			add("self_attn.qkv_proj.bias", q+2*kv)
		}
	} else {
		add("self_attn.q_proj.weight", q, d.hidden)
		add("self_attn.k_proj.weight", kv, d.hidden)
		add("self_attn.v_proj.weight", kv, d.hidden)
		if d.qkvBias {
			add("self_attn.q_proj.bias", q)
			add("self_attn.k_proj.bias", kv)
			add("self_attn.v_proj.bias", kv)
		}
	}
	add("self_attn.o_proj.weight", d.hidden, q)
	if d.oBias {
		add("self_attn.o_proj.bias", d.hidden)
	}
	switch d.qkNorm {
	case qkNormPerHead:
		add("self_attn.q_norm.weight", d.headDim)
		add("self_attn.k_norm.weight", d.headDim)
	case qkNormWhole:
		add("self_attn.q_norm.weight", q)
		add("self_attn.k_norm.weight", kv)
	}
	if d.fusedGateUp {
		add("mlp.gate_up_proj.weight", 2*d.inter, d.hidden)
	} else {
		add("mlp.gate_proj.weight", d.inter, d.hidden)
		add("mlp.up_proj.weight", d.inter, d.hidden)
	}
	add("mlp.down_proj.weight", d.hidden, d.inter)
	if d.mlpBias {
		if d.fusedGateUp {
			add("mlp.gate_up_proj.bias", 2*d.inter)
		} else {
			add("mlp.gate_proj.bias", d.inter)
			add("mlp.up_proj.bias", d.inter)
		}
		add("mlp.down_proj.bias", d.hidden)
	}
	d.plan.Weights = w
	return d
}

func (d *decoder) Plan() *Plan { return &d.plan }

// norm applies the norm named n to x, or returns x when n is "".
func (d *decoder) norm(ops Ops, x Value, n string, w map[string]Value) Value {
	if n == "" {
		return x
	}
	return ops.RMSNorm(x, w[n], d.eps, d.normOffset)
}

// branch adds a residual branch to x, scaled by the residual multiplier.
func (d *decoder) branch(ops Ops, x, y Value) Value {
	if d.residual != 1 {
		y = ops.Scale(y, d.residual)
	}
	return ops.Add(x, y)
}

func (d *decoder) Layer(ops Ops, in LayerInputs) LayerOutputs {
	w, x := in.W, in.X
	h := d.norm(ops, x, d.preAttnNorm, w)
	q, k, v := d.project(ops, h, w)
	if in.Kind.Rope != NoRope {
		q, k = ops.Rotary(q), ops.Rotary(k)
	}
	a := ops.Linear(ops.Attention(q, k, v, d.attn), w["self_attn.o_proj.weight"], w["self_attn.o_proj.bias"])
	x = d.branch(ops, x, d.norm(ops, a, d.postAttnNorm, w))
	h = d.norm(ops, x, d.preMLPNorm, w)
	var gate, up Value
	if d.fusedGateUp {
		gu := ops.Split(ops.Linear(h, w["mlp.gate_up_proj.weight"], w["mlp.gate_up_proj.bias"]), d.inter, d.inter)
		gate, up = gu[0], gu[1]
	} else {
		gate = ops.Linear(h, w["mlp.gate_proj.weight"], w["mlp.gate_proj.bias"])
		up = ops.Linear(h, w["mlp.up_proj.weight"], w["mlp.up_proj.bias"])
	}
	m := ops.Linear(ops.Mul(ops.Act(gate, d.act), up), w["mlp.down_proj.weight"], w["mlp.down_proj.bias"])
	x = d.branch(ops, x, d.norm(ops, m, d.postMLPNorm, w))
	return LayerOutputs{X: x, K: k, V: v}
}

// project computes the query, key and value heads of h, q/k-normalised where the family does.
func (d *decoder) project(ops Ops, h Value, w map[string]Value) (q, k, v Value) {
	if d.fusedQKV {
		qkv := ops.Split(ops.Linear(h, w["self_attn.qkv_proj.weight"], w["self_attn.qkv_proj.bias"]),
			d.heads*d.headDim, d.kvHeads*d.headDim, d.kvHeads*d.headDim)
		q, k, v = qkv[0], qkv[1], qkv[2]
	} else {
		q = ops.Linear(h, w["self_attn.q_proj.weight"], w["self_attn.q_proj.bias"])
		k = ops.Linear(h, w["self_attn.k_proj.weight"], w["self_attn.k_proj.bias"])
		v = ops.Linear(h, w["self_attn.v_proj.weight"], w["self_attn.v_proj.bias"])
	}
	if d.qkNorm == qkNormWhole {
		q = ops.RMSNorm(q, w["self_attn.q_norm.weight"], d.eps, d.normOffset)
		k = ops.RMSNorm(k, w["self_attn.k_norm.weight"], d.eps, d.normOffset)
	}
	q, k, v = ops.Heads(q, d.heads, d.headDim), ops.Heads(k, d.kvHeads, d.headDim), ops.Heads(v, d.kvHeads, d.headDim)
	if d.qkNorm == qkNormPerHead {
		q = ops.RMSNorm(q, w["self_attn.q_norm.weight"], d.eps, d.normOffset)
		k = ops.RMSNorm(k, w["self_attn.k_norm.weight"], d.eps, d.normOffset)
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
