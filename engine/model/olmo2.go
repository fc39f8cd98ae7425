package model

import "github.com/layerstream/layerstream/checkpoint"

// OLMo 2: norms after each branch instead of before (post_attention_layernorm on the attention output,
// post_feedforward_layernorm on the MLP's), and an RMSNorm over the whole q and k projections (q_norm
// [heads·head_dim], k_norm [kv_heads·head_dim]) before they are split into heads.
func init() {
	Register("Olmo2ForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		d, err := newDecoder(c)
		if err != nil {
			return nil, err
		}
		d.preAttnNorm, d.preMLPNorm = "", ""
		d.postAttnNorm, d.postMLPNorm = "post_attention_layernorm.weight", "post_feedforward_layernorm.weight"
		d.qkNorm = qkNormWhole
		return d.finish(), nil
	})
}
