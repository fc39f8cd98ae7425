package model

import "github.com/layerstream/layerstream/checkpoint"

// Qwen2 and Qwen2.5: Llama's decoder with biases on q/k/v_proj (not o_proj). With use_sliding_window, layers
// from max_window_layers on attend within sliding_window positions (or as layer_types says).
func init() {
	Register("Qwen2ForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		d, err := newDecoder(c)
		if err != nil {
			return nil, err
		}
		d.qkvBias, d.oBias = true, false
		if err := qwenWindows(d, c); err != nil {
			return nil, err
		}
		return d.finish(), nil
	})
}

// qwenWindows sets the sliding layers of the Qwen2-style configs (Qwen2, Qwen3): when use_sliding_window is on
// and sliding_window is set, layer i slides from max_window_layers on, unless layer_types says otherwise.
func qwenWindows(d *decoder, c *checkpoint.Config) error {
	on := c.UseSlidingWindow && c.SlidingWindow != nil
	return d.slidingLayers(c, c.SlidingWindow, c.UseSlidingWindow, func(i int) bool { return on && i >= c.MaxWindowLayers })
}
