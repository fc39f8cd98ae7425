package model

import (
	"fmt"

	"github.com/layerstream/layerstream/checkpoint"
)

// Phi-3, Phi-3.5 and Phi-4-mini: Llama's decoder with fused projections (qkv_proj: q, k then v rows;
// gate_up_proj: gate then up rows), no biases, rotary embeddings on the first head_dim·partial_rotary_factor
// dimensions of each head, default or longrope scaling, and every layer attending within sliding_window
// positions when the config sets one (Phi-3-mini-4k: 2047).
//
// Longrope rotates a pass with the short factors while the sequence fits original_max_position_embeddings and
// with the long ones beyond; at the step a sequence first outgrows it, transformers' generate drops the cache
// and computes the whole sequence again (Plan.Recompute), so that every position is rotated with the long
// factors from then on.
func init() {
	Register("Phi3ForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		act, err := ActivationFor("hidden_act", c.HiddenAct)
		if err != nil {
			return nil, err
		}
		if c.RopeByLayerType != nil {
			return nil, fmt.Errorf("rope_parameters nested by layer type is not implemented for Phi-3 (one rotary embedding serves every layer)")
		}
		// transformers' Phi3Config.validate_rope accepts these two types only.
		if t := c.Rope.Type; t != "default" && t != "longrope" {
			return nil, fmt.Errorf("rope type %q is not implemented for Phi-3 (transformers' Phi3Config accepts default and longrope)", t)
		}
		rope, err := NewRope(c.Rope, c.HeadDim, c.MaxPositionEmbeddings, RopeOptions{Partial: true, LongRope: true})
		if err != nil {
			return nil, err
		}
		d := newDecoderWith(c, act, rope)
		d.fusedQKV, d.fusedGateUp = true, true
		if err := d.slidingLayers(c, c.SlidingWindow, true, func(int) bool { return c.SlidingWindow != nil }); err != nil {
			return nil, err
		}
		if c.Rope.Type == "longrope" {
			d.plan.Recompute = c.Rope.OriginalMaxPositionEmbeddings
		}
		return d.finish(), nil
	})
}
