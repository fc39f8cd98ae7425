package engine

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/layerstream/layerstream/checkpoint"
)

// Architecture is one model family: the weights of a decoder layer and the layer's computation in graph ops.
// Adding a family means one small file that registers an Architecture from init.
//
// The computation is layer-agnostic: the same compiled graph serves every decoder layer, with the layer's
// weights and its one-layer K/V cache view passed as inputs.
type Architecture interface {
	// LayerWeights lists the tensors of decoder layer units, named relative to "model.layers.N.", with their
	// shapes for cfg. Every listed tensor must be present in every layer; other tensors of a layer are ignored.
	LayerWeights(cfg *checkpoint.Config) []WeightSpec
	// Layer builds one decoder layer.
	Layer(cfg *checkpoint.Config, in LayerInputs) LayerOutputs
}

// WeightSpec describes one tensor of a decoder layer.
type WeightSpec struct {
	Name  string // e.g. "self_attn.q_proj.weight"
	Shape []int
}

// LayerInputs are the graph inputs of one decoder layer. B is the batch, T the number of new positions (a
// bucket: rows past the real count are padding), S the cache capacity.
type LayerInputs struct {
	X        *graph.Node // [B, T, hidden] residual stream, float32
	Cos, Sin *graph.Node // [B, T, headDim] rotary tables of the new positions
	// Mask is added to the attention scores: 0 where query t may attend key j, a large negative number where
	// not. Keys are the S cached positions followed by the T new ones: [B, T, S+T].
	Mask         *graph.Node
	PastK, PastV *graph.Node // [B, kvHeads, S, headDim], the layer's cache
	// W holds the layer's weights by WeightSpec name.
	W map[string]*graph.Node
}

// LayerOutputs are the graph outputs of one decoder layer.
type LayerOutputs struct {
	X    *graph.Node // [B, T, hidden]
	K, V *graph.Node // [B, kvHeads, T, headDim]: the new positions' keys (after rotary) and values
}

var architectures = map[string]Architecture{}

// RegisterArchitecture makes an architecture available under its Hugging Face `architectures` name.
func RegisterArchitecture(name string, a Architecture) { architectures[name] = a }

func architectureFor(cfg *checkpoint.Config) (Architecture, error) {
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
