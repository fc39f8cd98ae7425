package model

import (
	"fmt"

	"github.com/layerstream/layerstream/checkpoint"
)

// Ministral 3: Mistral's decoder (every layer within sliding_window when the config sets one; null in the
// released checkpoints) whose queries, after rotary embeddings, are multiplied by 1 + β·ln(1 + ⌊p / o⌋) at
// position p, β the rope dict's llama_4_scaling_beta and o its original_max_position_embeddings
// (ministral3/modeling_ministral3.py, get_llama_4_attn_scale). transformers reads both unconditionally, so a
// config without them is refused.
func init() {
	Register("Ministral3ForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		d, err := newDecoder(c)
		if err != nil {
			return nil, err
		}
		beta := c.Rope.Llama4ScalingBeta
		if beta == nil {
			return nil, fmt.Errorf("rope_parameters has no llama_4_scaling_beta, which transformers' Ministral3Attention reads (it fails without one)")
		}
		floor := c.Rope.OriginalMaxPositionEmbeddings
		if floor <= 0 {
			return nil, fmt.Errorf("rope_parameters has no original_max_position_embeddings (rope type %q), which llama_4_scaling_beta divides positions by", c.Rope.Type)
		}
		if err := d.slidingLayers(c, c.SlidingWindow, true, func(int) bool { return c.SlidingWindow != nil }); err != nil {
			return nil, err
		}
		for i := range d.plan.Layers {
			d.plan.Layers[i].QueryScale = QueryScale{Beta: *beta, Floor: floor}
		}
		return d.finish(), nil
	})
}
