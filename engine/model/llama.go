package model

import "github.com/layerstream/layerstream/checkpoint"

// Llama (Llama 2, Llama 3.x with rope scaling, and the checkpoints that borrow its architecture): the decoder as
// newDecoder makes it, every layer with full attention and the one rotary embedding.
func init() {
	Register("LlamaForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		d, err := newDecoder(c)
		if err != nil {
			return nil, err
		}
		return d.finish(), nil
	})
}
