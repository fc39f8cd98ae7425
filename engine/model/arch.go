// Package model defines what a model family is (Architecture: a decoder layer's weights and computation) and
// the operations layers are written in (Ops), and holds the families, one small file each, registering
// themselves from init. The engine runs a family's layer as a compiled graph or on the host kernels; both
// implement Ops.
package model

import (
	"fmt"
	"slices"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
)

// Architecture is one model family: the weights of a decoder layer and the layer's computation, written once
// in terms of Ops. Adding a family means one small file that registers an Architecture from init.
//
// The computation is layer-agnostic: the same code serves every decoder layer, with the layer's weights and
// its one-layer K/V cache view as inputs. It runs as a compiled GoMLX graph (graphOps: prefill, and decode
// with Options.GraphDecode) or directly on host arrays with hand-written kernels (hostOps: decode steps).
type Architecture interface {
	// LayerWeights lists the tensors of decoder layer units, named relative to "model.layers.N.", with their
	// shapes for cfg. Every listed tensor must be present in every layer; other tensors of a layer are ignored.
	LayerWeights(cfg *checkpoint.Config) []WeightSpec
	// Layer computes one decoder layer.
	Layer(cfg *checkpoint.Config, ops Ops, in LayerInputs) LayerOutputs
}

// WeightSpec describes one tensor of a decoder layer.
type WeightSpec struct {
	Name  string // e.g. "self_attn.q_proj.weight"
	Shape []int
}

// Value is an activation or a weight inside a layer computation: a *graph.Node for graphOps, a host array for
// hostOps. Architectures only pass Values between Ops methods.
type Value any

// Ops are the operations layers are written in. B is the batch, T the number of new positions (with graphOps
// a bucket whose rows past the real count are padding), S the cache capacity. Activations are float32.
type Ops interface {
	// Linear is x·wᵀ (+ b, when b is not nil) for x [B, T, in] and a weight matrix [out, in] in the Hugging
	// Face layout, giving [B, T, out].
	Linear(x, w, b Value) Value
	// RMSNorm normalises the last axis: x / sqrt(mean(x²) + eps) · w.
	RMSNorm(x, w Value, eps float64) Value
	// Heads splits [B, T, heads·headDim] into [B, heads, T, headDim].
	Heads(x Value, heads, headDim int) Value
	// Rotary applies rotary embeddings (Hugging Face's rotate-half layout) at the new positions to
	// x [B, heads, T, headDim].
	Rotary(x Value) Value
	// Attention is causal grouped-query attention of q [B, heads, T, d] over the layer's cached positions and
	// the new keys and values k, v [B, kvHeads, T, d] (query head h uses key/value head h/(heads/kvHeads)),
	// giving [B, T, heads·d].
	Attention(q, k, v Value) Value
	SiLU(x Value) Value
	Add(a, b Value) Value
	Mul(a, b Value) Value
}

// LayerInputs are the inputs of one decoder layer.
type LayerInputs struct {
	X Value // [B, T, hidden] residual stream
	// W holds the layer's weights by WeightSpec name.
	W map[string]Value
}

// LayerOutputs are the outputs of one decoder layer.
type LayerOutputs struct {
	X    Value // [B, T, hidden]
	K, V Value // [B, kvHeads, T, headDim]: the new positions' keys (after rotary) and values
}

var architectures = map[string]Architecture{}

// Register makes an architecture available under its Hugging Face `architectures` name. Families call it
// from init.
func Register(name string, a Architecture) { architectures[name] = a }

// For returns the architecture registered under cfg's first `architectures` name.
func For(cfg *checkpoint.Config) (Architecture, error) {
	name := ""
	if len(cfg.Architectures) > 0 {
		name = cfg.Architectures[0]
	}
	a, ok := architectures[name]
	if !ok {
		names := make([]string, 0, len(architectures))
		for n := range architectures {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("config.json: architecture %q has no model definition (supported: %s)", name, strings.Join(names, ", "))
	}
	return a, nil
}
