package model

import "github.com/layerstream/layerstream/checkpoint"

// Mixtral: Mistral's decoder whose MLP is a mixture of num_local_experts SwiGLU experts of intermediate_size
// (block_sparse_moe.experts.e.w1 gate, w3 up, w2 down), every layer sparse; the router (block_sparse_moe.gate)
// takes the softmax over the experts, then each row's top num_experts_per_tok, always renormalized
// (MixtralTopKRouter).
func init() {
	Register("MixtralForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		d, err := newDecoder(c)
		if err != nil {
			return nil, err
		}
		if err := d.slidingLayers(c, c.SlidingWindow, true, func(int) bool { return c.SlidingWindow != nil }); err != nil {
			return nil, err
		}
		m, err := newMoE(c, c.IntermediateSize, true)
		if err != nil {
			return nil, err
		}
		m.router, m.prefix, m.gate, m.up, m.down = "block_sparse_moe.gate", "block_sparse_moe.experts", "w1", "w3", "w2"
		d.sparseLayers(m, func(int) bool { return true })
		return d.finish(), nil
	})
}
