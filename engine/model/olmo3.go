package model

import (
	"fmt"
	"maps"
	"slices"

	"github.com/layerstream/layerstream/checkpoint"
)

// OLMo 3: OLMo 2's decoder (norms after each branch, q/k norms over the whole projections) with sliding-window
// layers as layer_types says (absent: every fourth layer full attention, the others sliding, as Olmo3Config
// derives them), each layer type with its own rotary embedding: transformers 5's rope_parameters nested by
// layer type, where the rope scaling (yarn in OLMo 3's checkpoints) applies to the full-attention layers only.
//
// transformers 4's spelling (top-level rope_theta and rope_scaling) means the same model only when the sliding
// layers' base is 500000: transformers 4 rotates them with rope_theta unscaled, transformers 5 with its
// default_theta 500000 (Olmo3Config.convert_rope_params_to_dict moves rope_theta into the full-attention entry
// only). Any other rope_theta is refused in that spelling.
func init() {
	Register("Olmo3ForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		full, sliding, err := olmo3Ropes(c)
		if err != nil {
			return nil, err
		}
		act, err := ActivationFor("hidden_act", c.HiddenAct)
		if err != nil {
			return nil, err
		}
		d := newDecoderWith(c, act, full, sliding)
		d.preAttnNorm, d.preMLPNorm = "", ""
		d.postAttnNorm, d.postMLPNorm = "post_attention_layernorm.weight", "post_feedforward_layernorm.weight"
		d.qkNorm = qkNormWhole
		if err := d.slidingLayers(c, c.SlidingWindow, true, func(i int) bool { return (i+1)%4 != 0 }); err != nil {
			return nil, err
		}
		d.ropePerWindow(1)
		return d.finish(), nil
	})
}

// olmo3DefaultTheta is Olmo3Config's default_theta (transformers 5).
const olmo3DefaultTheta = 500000.0

// olmo3Ropes returns the full-attention and sliding layers' rotary embeddings.
func olmo3Ropes(c *checkpoint.Config) (full, sliding Rope, err error) {
	f, s := c.Rope, checkpoint.Rope{Type: "default", Theta: c.Rope.Theta}
	if c.RopeByLayerType != nil {
		for _, k := range slices.Sorted(maps.Keys(c.RopeByLayerType)) {
			if k != "full_attention" && k != "sliding_attention" {
				return full, sliding, fmt.Errorf("rope_parameters.%s: layer type %q is not implemented (full_attention, sliding_attention)", k, k)
			}
		}
		f = checkpoint.Rope{Type: "default", Theta: olmo3DefaultTheta}
		if r, ok := c.RopeByLayerType["full_attention"]; ok {
			f = r
		}
		s = checkpoint.Rope{Type: "default", Theta: olmo3DefaultTheta}
		if r, ok := c.RopeByLayerType["sliding_attention"]; ok {
			s = r
		}
	} else if s.Theta != olmo3DefaultTheta {
		return full, sliding, fmt.Errorf("rope_theta %g without rope_parameters by layer type: transformers 4 rotates the sliding layers with it, transformers 5 with %g (its default_theta); refusing a config the two read differently (write rope_parameters with full_attention and sliding_attention entries)", s.Theta, olmo3DefaultTheta)
	}
	if full, err = NewRope(f, c.HeadDim, c.MaxPositionEmbeddings, RopeOptions{}); err != nil {
		return full, sliding, fmt.Errorf("full-attention layers: %w", err)
	}
	if sliding, err = NewRope(s, c.HeadDim, c.MaxPositionEmbeddings, RopeOptions{}); err != nil {
		return full, sliding, fmt.Errorf("sliding layers: %w", err)
	}
	return full, sliding, nil
}
