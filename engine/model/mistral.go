package model

import "github.com/layerstream/layerstream/checkpoint"

// Mistral: Llama's decoder where every layer attends within sliding_window positions when the config sets one
// (the engine keeps a ring of that many cache positions per layer).
func init() {
	Register("MistralForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		d, err := newDecoder(c)
		if err != nil {
			return nil, err
		}
		if err := d.slidingLayers(c, c.SlidingWindow, true, func(int) bool { return c.SlidingWindow != nil }); err != nil {
			return nil, err
		}
		return d.finish(), nil
	})
}
