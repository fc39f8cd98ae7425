// Package model defines what a model family is and the operations layers are written in (Ops), and holds the
// families, one small file each, registering themselves from init. The engine runs a family's layers as
// compiled graphs or on the host kernels; both implement Ops.
//
// A Family reads a config into an Architecture, refusing (by key and value) whatever it does not implement; the
// Architecture describes the model to the engine (Plan: every layer's attention window and rotary table, the
// model-level constants) and computes a decoder layer (Layer) and the output head (Head) in terms of Ops. What
// families share lives in shared code: the decoder layer (decoder.go) that most families configure, rotary
// embeddings and their scaling types (rope.go), activations, norms, soft-capping and attention options (Ops).
package model

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
)

// Family builds the Architecture of one Hugging Face `architectures` name from a config, or refuses it with an
// error naming the config key and value it does not implement.
type Family func(cfg *checkpoint.Config) (Architecture, error)

// Architecture is one model, built from its config: what the engine needs to know about it (Plan) and its
// computation, written once in terms of Ops.
//
// The computation is layer-agnostic within a layer kind: the same code serves every decoder layer of a kind,
// with the layer's weights, its one-layer K/V cache view and its kind's rotary table and attention mask as
// inputs. It runs as a compiled GoMLX graph (graphOps: one graph per kind and shape) or directly on host arrays
// (hostOps).
type Architecture interface {
	// Plan describes the model; the engine reads it once and must not modify it.
	Plan() *Plan
	// Layer computes one decoder layer of kind in.Kind.
	Layer(ops Ops, in LayerInputs) LayerOutputs
	// Head turns final hidden states x [B, T, hidden] into logits [B, T, vocab]: the final norm (weight norm),
	// the output projection (out, [vocab, hidden]) and any logit transforms (scaling, soft-capping).
	Head(ops Ops, x, norm, out Value) Value
}

// Plan describes a model to the engine.
type Plan struct {
	// Weights are the tensors of every decoder layer, named relative to "model.layers.N.", with their shapes. A
	// layer holds exactly these, plus SkippedLayerTensors: the engine refuses a checkpoint whose layers hold
	// anything else.
	Weights []WeightSpec
	// Layers has one entry per decoder layer.
	Layers []LayerKind
	// Ropes are the rotary embeddings layers refer to (LayerKind.Rope).
	Ropes []Rope
	// EmbedScale multiplies the embeddings (as float32) before the first layer: √hidden (Gemma), Granite's
	// embedding_multiplier; 1 leaves them as they are.
	EmbedScale float64
	// Context is the number of positions a sequence may hold: max_position_embeddings, or more where the rope
	// scaling extends it (dynamic NTK: factor × max_position_embeddings).
	Context int
	// KVHeads and HeadDim size the key/value cache.
	KVHeads, HeadDim int
	// Recompute, when positive, is a length at which a sequence's cached keys and values go stale: a pass that
	// takes a sequence past Recompute positions while its cache holds no more than Recompute computes the whole
	// sequence again, from its first position, instead of continuing the cache. Phi-3 with longrope: transformers'
	// generate drops the cache there (Phi3ForCausalLM.prepare_inputs_for_generation), so that every position is
	// rotated with the long factors from then on. 0: never.
	Recompute int
	// State sizes the per-sequence state of the Recurrent layers (recurrent.go); zero without any.
	State RecurrentState
	// KVSource, when not nil, is for each layer the layer whose keys and values it attends with: itself, or for a
	// SharedKV layer an earlier layer, whose cache it reads and whose new keys and values of the pass it is given
	// (LayerInputs.K, V). A shared layer stores none of its own (Gemma 4's num_kv_shared_layers).
	KVSource []int
	// PerLayerInput, when positive, is the width of the input each decoder layer takes beside the residual
	// stream (LayerInputs.PerLayer), which the Architecture computes from the tokens (PerLayerInputs) with
	// PerLayerTensors: tensors the embedding unit holds beside the embedding (full names, shapes), the first a
	// table [rows, layers·PerLayerInput] looked up by token id.
	PerLayerInput   int
	PerLayerTensors []WeightSpec
	// EmbedAs are token ids embedded as another token (Gemma4ForConditionalGeneration's image, video and audio
	// placeholders: as the pad token), in the embedding and the per-layer inputs alike; nil: none.
	EmbedAs map[int]int
}

// KindDims are a kind of layer's key/value heads and head size: its own, else the Plan's.
func (p *Plan) KindDims(k LayerKind) (kvHeads, headDim int) {
	kvHeads, headDim = p.KVHeads, p.HeadDim
	if k.KVHeads > 0 {
		kvHeads = k.KVHeads
	}
	if k.HeadDim > 0 {
		headDim = k.HeadDim
	}
	return kvHeads, headDim
}

// PerLayerInputs is implemented by an Architecture whose decoder layers take an input of their own beside the
// residual stream (Plan.PerLayerInput; Gemma 4's per-layer embeddings), computed once per pass on the host from
// the tokens and their embeddings.
type PerLayerInputs interface {
	// PerLayerInputs computes every layer's input [B, layers, T, PerLayerInput] from the scaled embeddings x
	// [B, T, hidden] and the table rows of the tokens tok [B, T, layers·PerLayerInput], with ws the
	// PerLayerTensors after the table.
	PerLayerInputs(ops Ops, x, tok Value, ws []Value) Value
}

// LayerKind is what distinguishes decoder layers from each other: the engine compiles one graph per kind, builds
// one attention mask per window and one rotary table per Rope, and gives a windowed layer a ring of Window
// cache positions.
type LayerKind struct {
	// Window is the sliding window: a query sees itself and the Window-1 positions before it. 0: every earlier
	// position (full causal attention).
	Window int
	// Chunk is chunked attention (Llama 4's attention_chunk_size): a query at position p sees the positions from
	// ⌊p/Chunk⌋·Chunk to p, a window that restarts at every multiple of Chunk. The cache keeps such a layer as a
	// sliding window of Chunk positions (all a chunk's queries need, and more). 0: none.
	Chunk int
	// Rope is the index of the layer's rotary embedding in Plan.Ropes, or NoRope.
	Rope int
	// QueryScale multiplies the layer's queries by a factor of their position (Ops.ScaleQueries); the zero
	// value: none.
	QueryScale QueryScale
	// MoE says that the layer's MLP is a mixture of experts (a router, routed experts, maybe a shared expert)
	// rather than one dense MLP: Qwen2-MoE's mlp_only_layers and GLM-4.5's first_k_dense_replace layers are
	// dense, the others sparse. The layer's weights differ accordingly (WeightSpec.In).
	MoE bool
	// Recurrent: a Gated DeltaNet linear-attention layer, holding a fixed-size state per sequence (Plan.State)
	// instead of keys and values (recurrent.go).
	Recurrent bool
	// HeadDim and KVHeads, when positive, are the layer's own head size and key/value heads, which size its cache
	// (Gemma 4's full-attention layers); 0: the Plan's.
	HeadDim, KVHeads int
	// SharedKV: the layer computes no keys and values: it attends with those of the layer Plan.KVSource names.
	SharedKV bool
	// Latent: the layer's values are its keys (multi-head latent attention, deepseek.go: one key/value head
	// holding the compressed latent and the shared rotary key, which serve as keys and, the latent, as
	// values), so its cache keeps one array per position rather than two (kvcache.Config.Latent).
	Latent bool
}

// QueryScale is a factor on a layer's queries that grows with their absolute position p:
// 1 + Beta·ln(1 + ⌊(p + Shift) / Floor⌋), computed in float32 as transformers does (Ministral 3's
// llama_4_scaling_beta, Floor its rope's original_max_position_embeddings; Llama 4's attn_temperature_tuning,
// Beta its attn_scale, Floor its floor_scale, Shift 1). Beta 0: no scaling.
type QueryScale struct {
	Beta         float64
	Floor, Shift int
}

// At is the factor at position pos.
func (s QueryScale) At(pos int) float32 {
	if s.Beta == 0 {
		return 1
	}
	steps := float32(math.Floor(float64(float32(pos+s.Shift) / float32(s.Floor))))
	return 1 + float32(s.Beta)*float32(math.Log(float64(1+steps)))
}

// NoRope marks a layer without rotary embeddings (SmolLM3's NoPE layers).
const NoRope = -1

// SkippedLayerTensors are tensors a checkpoint may hold in a decoder layer that no computation reads, skipped by
// name (relative to "model.layers.N."): old checkpoints saved the rotary embedding's inverse frequencies, which
// the engine derives from the config.
var SkippedLayerTensors = []string{"self_attn.rotary_emb.inv_freq"}

// WeightSpec describes one tensor of a decoder layer: its checkpoint name, its shape, and the field of
// LayerWeights it is bound to.
type WeightSpec struct {
	Name  string // e.g. "self_attn.q_proj.weight"
	Shape []int
	// Field returns the place in a LayerWeights that holds this tensor.
	Field func(*LayerWeights) *Value
	// In says which kinds of layer hold the tensor (a sparse layer its experts, a dense one its MLP, a hybrid's
	// attention or recurrent layers); nil: every layer.
	In func(LayerKind) bool
}

// Expert returns the routed expert whose weights the tensor is (Field points into LayerWeights.Experts[e]), or -1
// for a tensor of no routed expert (attention, norms, router, dense or shared MLP). The split lays out each
// expert's tensors together by it and the engine streams them apart, whatever the family names them.
func (s WeightSpec) Expert() int {
	var w LayerWeights
	*s.Field(&w) = true // any value marks the field
	for e, ex := range w.Experts {
		if !reflect.ValueOf(ex).IsZero() {
			return e
		}
	}
	return -1
}

// First is the earliest position a query at position q of a layer of kind k sees (its window's or chunk's
// start; 0 for full attention).
func (k LayerKind) First(q int) int {
	first := 0
	if k.Window > 0 {
		first = max(first, q-k.Window+1)
	}
	if k.Chunk > 0 {
		first = max(first, q/k.Chunk*k.Chunk)
	}
	return first
}

// Reach is the most positions a query of a layer of kind k sees, itself included: its window or its chunk
// (what its cache must hold); 0 for full attention.
func (k LayerKind) Reach() int {
	if k.Window > 0 && k.Chunk > 0 {
		return min(k.Window, k.Chunk)
	}
	return max(k.Window, k.Chunk)
}

// Holds reports whether a layer of kind k holds Weights[i].
func (p *Plan) Holds(k LayerKind, i int) bool { return p.Weights[i].In == nil || p.Weights[i].In(k) }

// Linear is a projection: its weight matrix [out, in] in the Hugging Face layout and its bias [out], nil when
// the layer has none.
type Linear struct{ W, B Value }

// LayerWeights are one decoder layer's weights, bound once (Plan.Bind) from the tensors Plan.Weights lists, by
// their role in the computation: a field the configuration gives no tensor is nil. The checkpoint names are
// written once, in the family's Plan (decoder.finish), never looked up while a layer computes.
type LayerWeights struct {
	// The norms around the two residual branches: before and after attention, before and after the MLP.
	AttnNorm, AttnPostNorm, MLPNorm, MLPPostNorm Value
	// Attention: separate q, k, v projections or one fused QKV, and the output projection O.
	Q, K, V, QKV, O Linear
	// QNorm and KNorm are RMSNorm weights over each head (or the whole projection) of q and k.
	QNorm, KNorm Value
	// Sinks are the attention sinks, one logit per query head (AttentionOptions.Sinks); nil: none.
	Sinks Value
	// The gated MLP: separate gate and up projections or one fused GateUp, then Down.
	Gate, Up, GateUp, Down Linear
	// A mixture-of-experts layer (LayerKind.MoE): the router's projection to one logit per expert, the bias
	// added to its scores for the choice only (e_score_correction_bias; nil: none), the routed experts, and the
	// shared expert every row goes through (nil weights: none), scaled by sigmoid(SharedGate·x) where SharedGate
	// is set (Qwen2-MoE's shared_expert_gate, [1, hidden]).
	Router     Linear
	RouterBias Value
	Experts    []Expert
	Shared     Expert
	SharedGate Linear
	// DeltaNet are a Gated DeltaNet layer's weights (recurrent.go).
	DeltaNet DeltaNetWeights
	// Gemma 4 (gemma4.go): the per-layer input's gate and projection and the norm after it; the layer's scalar
	// [1]; the experts' block beside the MLP: its norms and the router's input scale [hidden] and per-expert
	// scale [experts].
	PerLayerGate, PerLayerProj                 Linear
	PerLayerNorm, LayerScalar                  Value
	MLPPostNorm1, ExpertsNorm, ExpertsPostNorm Value
	RouterScale, ExpertScale                   Value
	// MLA are a multi-head latent attention layer's weights (deepseek.go).
	MLA LatentWeights
}

// Expert is one expert's gated MLP: down(act(gate(x)) ⊙ up(x)), its projections [moe_inter, hidden] and
// [hidden, moe_inter], gate and up separate or fused in GateUp ([2·moe_inter, hidden]: the gate rows, then the
// up rows).
type Expert struct{ Gate, Up, GateUp, Down Linear }

// expert returns expert e of w, growing w.Experts to hold it (WeightSpec.Field of an expert's tensor).
func (w *LayerWeights) expert(e int) *Expert {
	for len(w.Experts) <= e {
		w.Experts = append(w.Experts, Expert{})
	}
	return &w.Experts[e]
}

// Bind puts values (one per Plan.Weights entry, in that order; nil for a tensor the layer does not hold) into
// a LayerWeights.
func (p *Plan) Bind(values []Value) *LayerWeights {
	w := new(LayerWeights)
	for i, s := range p.Weights {
		if values[i] != nil {
			*s.Field(w) = values[i]
		}
	}
	return w
}

// Value is an activation or a weight inside a layer computation: a *graph.Node for graphOps, a host array for
// hostOps. Architectures only pass Values between Ops methods.
type Value any

// Activation is an MLP activation function.
type Activation int

// The activations, by their Hugging Face hidden_act names.
const (
	SiLU     Activation = iota // "silu", "swish": x·σ(x)
	GELUTanh                   // "gelu_pytorch_tanh", "gelu_new": the tanh approximation of GELU
	GELU                       // "gelu": x·Φ(x) with the exact normal CDF
	Sigmoid                    // σ(x) = 1/(1 + e^-x): gates (Qwen2-MoE's shared expert, Qwen3.5's attention output; no hidden_act names it)
)

var activations = map[string]Activation{"silu": SiLU, "swish": SiLU, "gelu_pytorch_tanh": GELUTanh, "gelu_new": GELUTanh, "gelu": GELU}

// ActivationFor maps a config's hidden_act (or hidden_activation) to an Activation; key names the config key
// for the error.
func ActivationFor(key, name string) (Activation, error) {
	a, ok := activations[name]
	if !ok {
		names := slices.Sorted(maps.Keys(activations))
		return 0, fmt.Errorf("config: %s %q is not supported (supported: %s)", key, name, strings.Join(names, ", "))
	}
	return a, nil
}

// AttentionOptions parameterise Ops.Attention.
type AttentionOptions struct {
	// Scale multiplies q·k: 1/√head_dim for most families; Granite's attention_multiplier; Gemma's
	// query_pre_attn_scalar^-½.
	Scale float64
	// SoftCap, when positive, caps the scaled scores as SoftCap·tanh(s/SoftCap) before the mask (Gemma 2).
	SoftCap float64
	// Sinks, when set, are the layer's attention sinks ([heads], gpt-oss's self_attn.sinks): head h's learned
	// logit joins the softmax's denominator and is then dropped, so that its weights sum to less than 1:
	// e^(s_j) / (Σ_j e^(s_j) + e^(Sinks[h])).
	Sinks Value
}

// Ops are the operations layers are written in. B is the batch, T the number of new positions (with graphOps
// a bucket whose rows past the real count are padding), S the layer's cache slots. Activations are float32.
//
// An Ops value is made for one layer: Rotary uses the layer's rotary table and Attention the layer's mask
// (causal, and windowed for a sliding layer) and cache.
type Ops interface {
	// Linear is x·wᵀ (+ b, when b is not nil) for x [B, T, in] and a weight matrix [out, in] in the Hugging
	// Face layout, giving [B, T, out].
	Linear(x, w, b Value) Value
	// RMSNorm normalises the last axis: x / sqrt(mean(x²) + eps) · (offset + w). offset is 0, or 1 for the
	// (1 + w) norms of Gemma. A nil w is a norm without weight: x / sqrt(mean(x²) + eps).
	RMSNorm(x, w Value, eps, offset float64) Value
	// Heads splits [B, T, heads·headDim] into [B, heads, T, headDim].
	Heads(x Value, heads, headDim int) Value
	// Rotary applies the layer's rotary embedding (Hugging Face's rotate-half layout) at the new positions to
	// the first rotary dimensions of x [B, heads, T, headDim]; the others pass unchanged (partial rotary).
	Rotary(x Value) Value
	// Attention is causal grouped-query attention of q [B, heads, T, d] over the layer's cached positions and
	// the new keys and values k, v [B, kvHeads, T, d] (query head h uses key/value head h/(heads/kvHeads)),
	// within the layer's window, giving [B, T, heads·d].
	Attention(q, k, v Value, opts AttentionOptions) Value
	// Split cuts the last axis into consecutive parts of the given sizes (fused projections).
	Split(x Value, sizes ...int) []Value
	// Act applies an activation function elementwise.
	Act(x Value, f Activation) Value
	Add(a, b Value) Value
	Mul(a, b Value) Value
	// Scale multiplies every element by float32(s).
	Scale(x Value, s float64) Value
	// SoftCap is c·tanh(x/c) elementwise (Gemma 2's final logits).
	SoftCap(x Value, c float64) Value
	// ScaleQueries multiplies q [B, heads, T, d] at each new position p by the layer's LayerKind.QueryScale.At(p).
	ScaleQueries(q Value) Value
	// MulRows multiplies each row of x [..., n] by its one value in s [..., 1].
	MulRows(x, s Value) Value
	// ClampedSwiGLU is gpt-oss's gated activation of an expert's gate and up projections, elementwise: with
	// g = min(gate, limit) and u = clamp(up, −limit, limit), (u + 1)·g·σ(alpha·g).
	ClampedSwiGLU(gate, up Value, alpha, limit float64) Value
	// ScaleBy multiplies every element of x by the one value of the weight s [1] (Gemma 4's layer_scalar).
	ScaleBy(x, s Value) Value

	// The mixture of experts. Route chooses each row's experts from its router logits [B, T, experts]; Rows
	// gives the rows of x [B, T, hidden] routed to expert e, which the family's expert MLP computes with the ops
	// above; Combine sums each row's experts' outputs times its routing weights. The host kernels compute each
	// expert on its own rows only (Rows is [n, hidden], nil when no row chose e); the graphs compute every expert
	// on every row (Rows is x) and weigh them by the routing weights, zero for the experts a row did not choose.
	// Where a streamed layer's experts are read only when routed to, Rows also binds expert e's weights into the
	// layer's LayerWeights.Experts[e]: read an expert's weights after its Rows.
	Route(logits Value, opts RouteOptions) Value
	Rows(x, routing Value, e int) Value
	// Combine is Σ_j w_j·ys[e_j] for each row, over its k chosen experts e_j in the order of their scores
	// (transformers sums the k weighted outputs in that order); ys[e] is expert e's output on Rows(x, routing,
	// e), nil when Rows was.
	Combine(ys []Value, routing Value) Value

	// HeadLinear multiplies each head h of x [B, heads, T, in] by its rows of w [heads·n, in], a projection whose
	// outputs are laid out head by head: y_h = x_h·W_hᵀ [B, heads, T, n] with W_h rows [h·n, (h+1)·n). Multi-head
	// latent attention absorbs kv_b_proj's two parts into its queries and outputs with it (deepseek.go).
	HeadLinear(x, w Value) Value
	// Deinterleave reorders the last axis of x from interleaved pairs x0, x1, x2, x3, … to the pairs' first
	// elements, then their second ones: x0, x2, …, x1, x3, … (DeepSeek's rope_interleave, turned into the halves
	// Rotary rotates).
	Deinterleave(x Value) Value

	// RecurrentOps are the operations of the recurrent layers (recurrent.go).
	RecurrentOps
}

// RouteOptions parameterise Ops.Route: how router logits become each row's K experts and their weights. Scores
// and weights are float32, as transformers computes them.
type RouteOptions struct {
	// K is the number of experts each row goes to (num_experts_per_tok).
	K int
	// Score turns the logits into scores: softmax over the experts, or sigmoid of each.
	Score RouteScore
	// Bias, when set ([experts], e_score_correction_bias), is added to the scores for the choice only: the
	// weights are the unbiased scores.
	Bias Value
	// Norm divides the K chosen scores by their sum (norm_topk_prob; Mixtral always); else they are the weights.
	Norm bool
	// Scale, when not 0 or 1, multiplies the weights (routed_scaling_factor).
	Scale float64
	// Groups, when above 1, splits the experts into that many groups of consecutive experts (n_group) and
	// limits the choice to the TopGroups best (topk_group), a group scored by the sum of its two best choice
	// scores (DeepSeek-V3's group-limited routing).
	Groups, TopGroups int
	// WeighInputs applies each row's weights to its experts' inputs rather than their outputs (Llama 4:
	// expert(w·x), which a gated MLP does not turn into w·expert(x)): Rows gives the rows routed to an expert
	// multiplied by their weights for it, and Combine sums the outputs as they are. The experts must have no
	// biases: the graphs compute every expert on every row, zero where a row did not choose it.
	WeighInputs bool
	// ExpertScale, when set ([experts], Gemma 4's router.per_expert_scale), multiplies each chosen expert's
	// weight, after Norm and Scale.
	ExpertScale Value
}

// RouteScore is how a router turns logits into scores.
type RouteScore int

const (
	// SoftmaxScores: softmax over the experts (Mixtral, Qwen-MoE, OLMoE).
	SoftmaxScores RouteScore = iota
	// SigmoidScores: sigmoid of each logit (DeepSeek-V3, GLM-4.5, MiniMax-M2).
	SigmoidScores
	// TopKSoftmax: the k largest logits chosen, their softmax (over those k only) the weights (gpt-oss's
	// GptOssTopKRouter).
	TopKSoftmax
	// LogitSigmoidScores: sigmoid of each logit, the choice by the logits themselves (Llama 4: top-k of the
	// logits, then their sigmoids), which differ where float32 sigmoids of large logits round to equal values.
	LogitSigmoidScores
)

// LayerInputs are the inputs of one decoder layer.
type LayerInputs struct {
	Kind LayerKind
	X    Value // [B, T, hidden] residual stream
	// W are the layer's weights (Plan.Bind).
	W *LayerWeights
	// PerLayer is the layer's own input [B, T, Plan.PerLayerInput] (nil without).
	PerLayer Value
	// K and V, for a SharedKV layer, are the new positions' keys and values of the layer it attends with
	// [B, kvHeads, T, headDim], as that layer returned them.
	K, V Value
}

// LayerOutputs are the outputs of one decoder layer.
type LayerOutputs struct {
	X    Value // [B, T, hidden]
	K, V Value // [B, kvHeads, T, headDim]: the new positions' keys (after rotary) and values
	// A Recurrent layer returns its new state in K and V instead (the conv state and the delta state, [B, 1, 1,
	// size] as the cache holds them), which only graphs need: the host kernels update the cache in place.
}

var families = map[string]Family{}

// Register makes a family available under its Hugging Face `architectures` name. Families call it from init.
func Register(name string, f Family) { families[name] = f }

// Supported lists the registered `architectures` names, sorted.
func Supported() []string {
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// For builds the Architecture of cfg's first `architectures` name, refusing what the family does not implement.
func For(cfg *checkpoint.Config) (Architecture, error) {
	name := ""
	if len(cfg.Architectures) > 0 {
		name = cfg.Architectures[0]
	}
	f, ok := families[name]
	if !ok {
		return nil, fmt.Errorf("config.json: architecture %q has no model definition (supported: %s)", name, strings.Join(Supported(), ", "))
	}
	a, err := f(cfg)
	if err != nil {
		return nil, fmt.Errorf("config.json (%s): %w", name, err)
	}
	return a, nil
}
