package model

import (
	"fmt"
	"slices"

	"github.com/layerstream/layerstream/checkpoint"
)

// Qwen3-Next (Qwen3NextForCausalLM): Qwen3.5's hybrid (qwen3_5.go) with the DeltaNet's projections fused and
// grouped per key head (in_proj_qkvz: [q, k, v, z] of each key head's value heads; in_proj_ba: [b, a]), and a
// mixture of experts on the sparse layers. Only dense layers (mlp_only_layers, num_experts 0, or off the
// decoder_sparse_step) are implemented here: a sparse layer is refused by name.
func init() {
	Register("Qwen3NextForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		for i := range c.NumHiddenLayers {
			sparse := c.NumExperts > 0 && c.DecoderSparseStep > 0 && (i+1)%c.DecoderSparseStep == 0 && !slices.Contains(c.MLPOnlyLayers, i)
			if sparse {
				return nil, fmt.Errorf("%w: Qwen3NextForCausalLM's mixture-of-experts MLP (num_experts %d on layer %d: mlp_only_layers %v, decoder_sparse_step %d) is not implemented yet (its dense layers and grouped linear attention are)",
					checkpoint.ErrUnsupportedArchitecture, c.NumExperts, i, c.MLPOnlyLayers, c.DecoderSparseStep)
			}
		}
		return newDeltaNet(c, true)
	})
}
