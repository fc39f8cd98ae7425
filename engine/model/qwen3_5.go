package model

import (
	"fmt"
	"slices"

	"github.com/layerstream/layerstream/checkpoint"
)

// Qwen3.5 (Qwen3_5ForCausalLM, text): a hybrid of Gated DeltaNet linear-attention layers (layer_types
// "linear_attention": recurrent, recurrent.go) and full-attention layers whose q_proj also gives, per head, a
// gate on the attention output (σ(gate) before o_proj), with per-head q/k norms and partial rotary; every RMSNorm
// but the DeltaNet's gated one is zero-centred (x·(1 + w)); a SwiGLU MLP on every layer. docs/family-notes.md,
// "Qwen3-Next and Qwen3.5". The released checkpoints are Qwen3_5ForConditionalGeneration and
// Qwen3_5MoeForConditionalGeneration, whose decoder is read as a text model (checkpoint/families_hybrid.go).
func init() {
	dense := func(c *checkpoint.Config) (Architecture, error) {
		n, err := newDeltaNet(c, false)
		if err != nil {
			return nil, err
		}
		return n.finish(), nil
	}
	Register("Qwen3_5ForCausalLM", dense)
	Register("Qwen3_5ForConditionalGeneration", dense) // the released checkpoints, read as text models
	// Qwen3.5-MoE (Qwen3_5MoeForCausalLM, text): the same hybrid with a mixture of experts on every layer
	// (Qwen3_5MoeSparseMoeBlock: softmax, top num_experts_per_tok of num_experts, always renormalized) and a
	// shared expert gated by sigmoid(shared_expert_gate·x), as Qwen3-Next's.
	sparse := func(c *checkpoint.Config) (Architecture, error) {
		n, err := newDeltaNet(c, false)
		if err != nil {
			return nil, err
		}
		if err := n.experts(c, func(int) bool { return true }, true); err != nil {
			return nil, err
		}
		return n.finish(), nil
	}
	Register("Qwen3_5MoeForCausalLM", sparse)
	Register("Qwen3_5MoeForConditionalGeneration", sparse)
}

// deltaNet is the hybrid decoder: the decoder's norms, MLP and head (normOffset 1), a gated full attention, and
// Gated DeltaNet layers.
type deltaNet struct {
	*decoder
	rule DeltaRule
	conv int // linear_conv_kernel_dim
	// grouped: Qwen3-Next's in_proj_qkvz and in_proj_ba, grouped per key head (qwen3_next.go).
	grouped bool
	// groupedBA: separate in_proj_qkv and in_proj_z (as Qwen3.5's) but Qwen3-Next's in_proj_ba grouped per key
	// head, as llama.cpp's converter leaves Qwen3-Next (linear_grouped_ba).
	groupedBA bool
}

// newDeltaNet is the hybrid of c; grouped: Qwen3-Next's projections. Its weights are listed by finish, after
// the family has said which layers hold experts.
func newDeltaNet(c *checkpoint.Config, grouped bool) (*deltaNet, error) {
	act, err := ActivationFor("hidden_act", c.HiddenAct)
	if err != nil {
		return nil, err
	}
	rope, err := NewRope(c.Rope, c.HeadDim, c.MaxPositionEmbeddings, RopeOptions{Partial: true})
	if err != nil {
		return nil, err
	}
	if c.AttentionBias {
		return nil, fmt.Errorf("attention_bias true is not implemented for this family")
	}
	n := &deltaNet{decoder: newDecoderWith(c, act, rope), conv: c.LinearConvKernelDim, grouped: grouped, rule: DeltaRule{
		KeyHeads: c.LinearNumKeyHeads, ValueHeads: c.LinearNumValueHeads, KeyDim: c.LinearKeyHeadDim, ValueDim: c.LinearValueHeadDim,
		Tiled: c.LinearTiledValueHeads}}
	if grouped && n.rule.Tiled {
		return nil, fmt.Errorf("linear_tiled_value_heads with Qwen3-Next's grouped projections is not implemented")
	}
	n.normOffset, n.qkNorm = 1, qkNormPerHead
	if err := n.layerTypes(c); err != nil {
		return nil, err
	}
	r := n.rule
	n.plan.State = RecurrentState{Conv: (n.conv - 1) * n.channels(), Delta: r.ValueHeads * r.KeyDim * r.ValueDim}
	return n, nil
}

// experts gives the layers sparse says a mixture of experts of moe_intermediate_size with Qwen's sigmoid-gated
// shared expert (qwenSharedExpert); norm renormalizes the chosen experts' weights.
func (n *deltaNet) experts(c *checkpoint.Config, sparse func(i int) bool, norm bool) error {
	m, err := newMoE(c, c.MoEIntermediateSize, norm)
	if err != nil {
		return err
	}
	if err := qwenSharedExpert(m, c); err != nil {
		return err
	}
	n.sparseLayers(m, sparse)
	return nil
}

// channels is the conv's width: q, k and v.
func (n *deltaNet) channels() int {
	return 2*n.rule.KeyHeads*n.rule.KeyDim + n.rule.ValueHeads*n.rule.ValueDim
}

// layerTypes marks the linear-attention layers recurrent, checking the DeltaNet's sizes.
func (n *deltaNet) layerTypes(c *checkpoint.Config) error {
	if c.LayerTypes == nil {
		return fmt.Errorf("layer_types is missing (each layer linear_attention or full_attention)")
	}
	r := n.rule
	for _, v := range []struct {
		key string
		v   int
	}{{"linear_num_key_heads", r.KeyHeads}, {"linear_num_value_heads", r.ValueHeads}, {"linear_key_head_dim", r.KeyDim},
		{"linear_value_head_dim", r.ValueDim}, {"linear_conv_kernel_dim", n.conv}} {
		if v.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", v.key, v.v)
		}
	}
	if r.ValueHeads%r.KeyHeads != 0 {
		return fmt.Errorf("linear_num_value_heads (%d) must be a multiple of linear_num_key_heads (%d)", r.ValueHeads, r.KeyHeads)
	}
	for i, lt := range c.LayerTypes {
		switch lt {
		case "linear_attention":
			n.plan.Layers[i].Recurrent = true
		case "full_attention":
		default:
			return fmt.Errorf("layer_types[%d] %q is not implemented (supported: linear_attention, full_attention)", i, lt)
		}
	}
	return nil
}

// finish lists the tensors: norms on every layer, the dense MLP on the dense ones and the experts on the sparse
// ones, self_attn.* on the attention layers, linear_attn.* on the recurrent ones.
func (n *deltaNet) finish() *deltaNet {
	full, rec := func(k LayerKind) bool { return !k.Recurrent }, func(k LayerKind) bool { return k.Recurrent }
	dense := func(k LayerKind) bool { return !k.MoE }
	var ws []WeightSpec
	add := func(only func(LayerKind) bool, name string, field func(*LayerWeights) *Value, shape ...int) {
		ws = append(ws, WeightSpec{Name: name, Shape: shape, Field: field, In: only})
	}
	lin := func(only func(LayerKind) bool, name string, l func(*LayerWeights) *Linear, out, in int) {
		add(only, name+".weight", func(w *LayerWeights) *Value { return &l(w).W }, out, in)
	}
	h, hd, r := n.hidden, n.headDim, n.rule
	add(nil, "input_layernorm.weight", func(w *LayerWeights) *Value { return &w.AttnNorm }, h)
	add(nil, "post_attention_layernorm.weight", func(w *LayerWeights) *Value { return &w.MLPNorm }, h)
	if slices.ContainsFunc(n.plan.Layers, dense) {
		lin(dense, "mlp.gate_proj", func(w *LayerWeights) *Linear { return &w.Gate }, n.inter, h)
		lin(dense, "mlp.up_proj", func(w *LayerWeights) *Linear { return &w.Up }, n.inter, h)
		lin(dense, "mlp.down_proj", func(w *LayerWeights) *Linear { return &w.Down }, h, n.inter)
	}
	lin(full, "self_attn.q_proj", func(w *LayerWeights) *Linear { return &w.Q }, 2*n.heads*hd, h)
	lin(full, "self_attn.k_proj", func(w *LayerWeights) *Linear { return &w.K }, n.kvHeads*hd, h)
	lin(full, "self_attn.v_proj", func(w *LayerWeights) *Linear { return &w.V }, n.kvHeads*hd, h)
	lin(full, "self_attn.o_proj", func(w *LayerWeights) *Linear { return &w.O }, h, n.heads*hd)
	add(full, "self_attn.q_norm.weight", func(w *LayerWeights) *Value { return &w.QNorm }, hd)
	add(full, "self_attn.k_norm.weight", func(w *LayerWeights) *Value { return &w.KNorm }, hd)
	dn := func(w *LayerWeights) *DeltaNetWeights { return &w.DeltaNet }
	vd := r.ValueHeads * r.ValueDim
	if n.grouped {
		lin(rec, "linear_attn.in_proj_qkvz", func(w *LayerWeights) *Linear { return &dn(w).InQKVZ }, n.channels()+vd, h)
		lin(rec, "linear_attn.in_proj_ba", func(w *LayerWeights) *Linear { return &dn(w).InBA }, 2*r.ValueHeads, h)
	} else {
		lin(rec, "linear_attn.in_proj_qkv", func(w *LayerWeights) *Linear { return &dn(w).InQKV }, n.channels(), h)
		lin(rec, "linear_attn.in_proj_z", func(w *LayerWeights) *Linear { return &dn(w).InZ }, vd, h)
	}
	switch {
	case n.groupedBA:
		lin(rec, "linear_attn.in_proj_ba", func(w *LayerWeights) *Linear { return &dn(w).InBA }, 2*r.ValueHeads, h)
	case !n.grouped:
		lin(rec, "linear_attn.in_proj_b", func(w *LayerWeights) *Linear { return &dn(w).InB }, r.ValueHeads, h)
		lin(rec, "linear_attn.in_proj_a", func(w *LayerWeights) *Linear { return &dn(w).InA }, r.ValueHeads, h)
	}
	add(rec, "linear_attn.conv1d.weight", func(w *LayerWeights) *Value { return &dn(w).Conv }, n.channels(), 1, n.conv)
	add(rec, "linear_attn.A_log", func(w *LayerWeights) *Value { return &dn(w).ALog }, r.ValueHeads)
	add(rec, "linear_attn.dt_bias", func(w *LayerWeights) *Value { return &dn(w).DTBias }, r.ValueHeads)
	add(rec, "linear_attn.norm.weight", func(w *LayerWeights) *Value { return &dn(w).Norm }, r.ValueDim)
	lin(rec, "linear_attn.out_proj", func(w *LayerWeights) *Linear { return &dn(w).Out }, h, vd)
	if n.moe != nil {
		ws = append(ws, n.moe.weights(h)...)
	}
	n.plan.Weights = ws
	return n
}

func (n *deltaNet) Layer(ops Ops, in LayerInputs) LayerOutputs {
	w, x := in.W, in.X
	h := n.norm(ops, x, w.AttnNorm)
	var out LayerOutputs
	if in.Kind.Recurrent {
		var a Value
		a, out.K, out.V = n.linearAttention(ops, h, &w.DeltaNet)
		x = ops.Add(x, a)
	} else {
		var a Value
		a, out.K, out.V = n.gatedAttention(ops, h, w)
		x = ops.Add(x, a)
	}
	out.X = ops.Add(x, n.feedForward(ops, n.norm(ops, x, w.MLPNorm), w, in.Kind))
	return out
}

// gatedAttention is the full-attention branch: q_proj gives per head the query then the output gate.
func (n *deltaNet) gatedAttention(ops Ops, h Value, w *LayerWeights) (y, k, v Value) {
	qg := ops.Split(ops.Heads(linear(ops, h, w.Q), n.heads, 2*n.headDim), n.headDim, n.headDim)
	q := ops.RMSNorm(qg[0], w.QNorm, n.eps, n.normOffset)
	k = ops.RMSNorm(ops.Heads(linear(ops, h, w.K), n.kvHeads, n.headDim), w.KNorm, n.eps, n.normOffset)
	v = ops.Heads(linear(ops, h, w.V), n.kvHeads, n.headDim)
	q, k = ops.Rotary(q), ops.Rotary(k)
	a := ops.Mul(ops.Attention(q, k, v, n.attn), ops.Act(ops.MergeHeads(qg[1]), Sigmoid))
	return linear(ops, a, w.O), k, v
}

// linearAttention is the Gated DeltaNet branch; conv and state are the new states (graphs).
func (n *deltaNet) linearAttention(ops Ops, h Value, w *DeltaNetWeights) (y, conv, state Value) {
	r := n.rule
	r.ALog, r.DTBias = w.ALog, w.DTBias
	in, z, a, b := n.projections(ops, h, w)
	u, conv := ops.CausalConv(in, w.Conv)
	qkv := ops.Split(ops.Act(u, SiLU), r.KeyHeads*r.KeyDim, r.KeyHeads*r.KeyDim, r.ValueHeads*r.ValueDim)
	o, state := ops.GatedDeltaRule(qkv[0], qkv[1], qkv[2], a, b, r)
	o = ops.RMSNorm(ops.Heads(o, r.ValueHeads, r.ValueDim), w.Norm, n.eps, 0)
	z = ops.Act(ops.Heads(z, r.ValueHeads, r.ValueDim), SiLU)
	return linear(ops, ops.MergeHeads(ops.Mul(o, z)), w.Out), conv, state
}

// projections gives the conv's input (q, k, v of every head, each contiguous), z [B, T, valueHeads·valueDim],
// and a, b [B, T, valueHeads]: separate projections (Qwen3.5), or Qwen3-Next's grouped per key head, reordered
// (with groupedBA, only b and a are grouped).
func (n *deltaNet) projections(ops Ops, h Value, w *DeltaNetWeights) (in, z, a, b Value) {
	r := n.rule
	per := r.ValueHeads / r.KeyHeads // value heads per key head
	if n.grouped {
		g := ops.Split(ops.Heads(linear(ops, h, w.InQKVZ), r.KeyHeads, 2*r.KeyDim+2*per*r.ValueDim), r.KeyDim, r.KeyDim, per*r.ValueDim, per*r.ValueDim)
		in, z = ops.Concat(ops.MergeHeads(g[0]), ops.MergeHeads(g[1]), ops.MergeHeads(g[2])), ops.MergeHeads(g[3])
	} else {
		in, z = linear(ops, h, w.InQKV), linear(ops, h, w.InZ)
	}
	if !n.grouped && !n.groupedBA {
		return in, z, linear(ops, h, w.InA), linear(ops, h, w.InB)
	}
	ba := ops.Split(ops.Heads(linear(ops, h, w.InBA), r.KeyHeads, 2*per), per, per)
	return in, z, ops.MergeHeads(ba[1]), ops.MergeHeads(ba[0])
}
