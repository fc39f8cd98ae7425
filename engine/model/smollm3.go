package model

import (
	"fmt"

	"github.com/layerstream/layerstream/checkpoint"
)

// SmolLM3: Llama's decoder where some layers have no rotary embedding (NoPE): no_rope_layers[i] is 1 for a layer
// with rotary embeddings and 0 for one without, by default every no_rope_layer_interval-th layer. With
// use_sliding_window, the NoPE layers attend within sliding_window positions (or as layer_types says).
func init() {
	Register("SmolLM3ForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		d, err := newDecoder(c)
		if err != nil {
			return nil, err
		}
		rope := c.NoRopeLayers
		if rope == nil {
			if c.NoRopeLayerInterval <= 0 {
				return nil, fmt.Errorf("no_rope_layer_interval must be positive, got %d", c.NoRopeLayerInterval)
			}
			rope = make([]int, c.NumHiddenLayers)
			for i := range rope {
				if (i+1)%c.NoRopeLayerInterval != 0 {
					rope[i] = 1
				}
			}
		}
		for i, r := range rope {
			switch r {
			case 0:
				d.plan.Layers[i].Rope = NoRope
			case 1:
			default:
				return nil, fmt.Errorf("no_rope_layers[%d] is %d, want 0 (no rotary embedding) or 1", i, r)
			}
		}
		on := c.UseSlidingWindow && c.SlidingWindow != nil
		err = d.slidingLayers(c, c.SlidingWindow, c.UseSlidingWindow, func(i int) bool { return on && rope[i] == 0 })
		if err != nil {
			return nil, err
		}
		return d.finish(), nil
	})
}
