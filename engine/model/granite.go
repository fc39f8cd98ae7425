package model

import (
	"fmt"

	"github.com/layerstream/layerstream/checkpoint"
)

// Granite (3.x): Llama's decoder with four multipliers: embedding_multiplier on the embeddings,
// attention_multiplier as the attention scale (instead of 1/√head_dim), residual_multiplier on each branch
// before it joins the residual stream, and logits divided by logits_scaling.
func init() {
	Register("GraniteForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		d, err := newDecoder(c)
		if err != nil {
			return nil, err
		}
		if c.LogitsScaling == 0 {
			return nil, fmt.Errorf("logits_scaling must not be 0 (logits are divided by it)")
		}
		d.plan.EmbedScale = c.EmbeddingMultiplier
		d.attn.Scale = c.AttentionMultiplier
		d.residual = c.ResidualMultiplier
		d.logitScale = 1 / c.LogitsScaling
		return d.finish(), nil
	})
}
