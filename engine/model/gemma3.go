package model

import (
	"fmt"
	"maps"
	"slices"

	"github.com/layerstream/layerstream/checkpoint"
)

// Gemma 3 (text): Gemma 2's decoder (gemmaDecoder) with a (1 + w) RMSNorm over each head of q and k before
// rotary embeddings, no attention soft-capping, and local (sliding) and global layers as layer_types says (else
// every sliding_window_pattern-th layer global), each kind with its own rotary embedding: the global layers'
// rope_theta with the rope scaling (linear factor 8 in the released checkpoints), the local layers'
// rope_local_base_freq unscaled. transformers 5 writes both in rope_parameters nested by layer type.
//
// Gemma3ForConditionalGeneration (Gemma 3 4B, 12B, 27B) is the same decoder, its config in text_config and its
// tensors under language_model (checkpoint.Architecture.TensorPrefixes); the vision tower is not read. Its
// text-only forward is Gemma3ForCausalLM's but for the final soft-cap, which it never applies.
func init() {
	Register("Gemma3ForCausalLM", gemma3)
	Register("Gemma3ForConditionalGeneration", func(c *checkpoint.Config) (Architecture, error) {
		if c.FinalLogitSoftcapping != nil {
			return nil, fmt.Errorf("final_logit_softcapping %g in text_config: transformers' Gemma3ForConditionalGeneration never applies it (Gemma3ForCausalLM does), so what the value should do is unclear", *c.FinalLogitSoftcapping)
		}
		return gemma3(c)
	})
}

func gemma3(c *checkpoint.Config) (Architecture, error) {
	global, local, err := gemma3Ropes(c)
	if err != nil {
		return nil, err
	}
	if c.AttnLogitSoftcapping != nil {
		return nil, fmt.Errorf("attn_logit_softcapping %g: transformers' Gemma 3 does not soft-cap attention scores (it normalises q and k instead), so what the value should do is unclear", *c.AttnLogitSoftcapping)
	}
	d, err := gemmaDecoder(c, global, local)
	if err != nil {
		return nil, err
	}
	d.qkNorm = qkNormPerHead
	pattern := 6 // transformers' default
	if c.SlidingWindowPattern != nil {
		pattern = *c.SlidingWindowPattern
	}
	if c.LayerTypes == nil {
		if pattern <= 0 {
			return nil, fmt.Errorf("sliding_window_pattern must be positive, got %d", pattern)
		}
		// transformers ignores _sliding_window_pattern when deriving layer types: refuse a value it would ignore.
		if s := c.SavedSlidingWindowPattern; s != nil && *s != pattern {
			return nil, fmt.Errorf("_sliding_window_pattern %d differs from the sliding_window_pattern %d transformers derives the layer types from (no layer_types given)", *s, pattern)
		}
	}
	if err := d.slidingLayers(c, c.SlidingWindow, true, func(i int) bool { return (i+1)%pattern != 0 }); err != nil {
		return nil, err
	}
	for i, l := range d.plan.Layers {
		if l.Window > 0 {
			d.plan.Layers[i].Rope = 1
		}
	}
	return d.finish(), nil
}

// gemma3Ropes returns the global (full attention) and local (sliding) layers' rotary embeddings, from either
// spelling: transformers 5's rope_parameters nested by layer type, or transformers 4's rope_theta and
// rope_scaling (the global layers') with rope_local_base_freq (the local layers' base, unscaled).
func gemma3Ropes(c *checkpoint.Config) (global, local Rope, err error) {
	g, l := c.Rope, checkpoint.Rope{Type: "default", Theta: 10000}
	if c.RopeLocalBaseFreq != nil {
		l.Theta = *c.RopeLocalBaseFreq
	}
	if c.RopeByLayerType != nil {
		for _, k := range slices.Sorted(maps.Keys(c.RopeByLayerType)) {
			if k != "full_attention" && k != "sliding_attention" {
				return global, local, fmt.Errorf("rope_parameters.%s: layer type %q is not implemented (full_attention, sliding_attention)", k, k)
			}
		}
		g = checkpoint.Rope{Type: "default", Theta: 1000000} // Gemma3TextConfig's, for a missing entry
		if r, ok := c.RopeByLayerType["full_attention"]; ok {
			g = r
		}
		if r, ok := c.RopeByLayerType["sliding_attention"]; ok {
			if c.RopeLocalBaseFreq != nil && *c.RopeLocalBaseFreq != r.Theta {
				return global, local, fmt.Errorf("rope_local_base_freq %g and rope_parameters.sliding_attention.rope_theta %g disagree", *c.RopeLocalBaseFreq, r.Theta)
			}
			l = r
		}
	}
	if global, err = NewRope(g, c.HeadDim, c.MaxPositionEmbeddings, RopeOptions{}); err != nil {
		return global, local, fmt.Errorf("global layers: %w", err)
	}
	if !(l.Theta > 0) {
		return global, local, fmt.Errorf("rope_local_base_freq must be positive, got %g", l.Theta)
	}
	if local, err = NewRope(l, c.HeadDim, c.MaxPositionEmbeddings, RopeOptions{}); err != nil {
		return global, local, fmt.Errorf("local layers: %w", err)
	}
	return global, local, nil
}
