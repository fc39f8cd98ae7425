package model

import "github.com/layerstream/layerstream/checkpoint"

// Mistral: Llama's decoder where every layer attends within sliding_window positions when the config sets one
// (the engine keeps a ring of that many cache positions per layer).
//
// Mistral3ForConditionalGeneration (Mistral Small 3.1/3.2) is the same decoder, its config in text_config and its
// tensors under language_model (checkpoint.Architecture.TensorPrefixes); the Pixtral tower is not read.
// transformers' Mistral3ForConditionalGeneration computes a text-only forward as MistralForCausalLM does.
func init() {
	Register("MistralForCausalLM", mistral)
	Register("Mistral3ForConditionalGeneration", mistral)
}

func mistral(c *checkpoint.Config) (Architecture, error) {
	d, err := newDecoder(c)
	if err != nil {
		return nil, err
	}
	if err := d.slidingLayers(c, c.SlidingWindow, true, func(int) bool { return c.SlidingWindow != nil }); err != nil {
		return nil, err
	}
	return d.finish(), nil
}
