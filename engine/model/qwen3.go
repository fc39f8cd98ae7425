package model

import "github.com/layerstream/layerstream/checkpoint"

// Qwen3: Llama's decoder (attention_bias for q/k/v/o_proj) with an RMSNorm over each head of q and k before
// rotary embeddings (q_norm, k_norm: [head_dim]); head_dim is given explicitly. Sliding windows as Qwen2's.
func init() {
	Register("Qwen3ForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		d, err := newDecoder(c)
		if err != nil {
			return nil, err
		}
		d.qkNorm = qkNormPerHead
		if err := qwenWindows(d, c); err != nil {
			return nil, err
		}
		return d.finish(), nil
	})
}
