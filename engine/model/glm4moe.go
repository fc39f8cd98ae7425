package model

import (
	"fmt"

	"github.com/layerstream/layerstream/checkpoint"
)

// GLM-4.5 and 4.6 (Glm4MoeForCausalLM): Llama's attention with q/k/v biases (attention_bias; o_proj has none),
// per-head q/k norms with use_qk_norm, rotary embeddings on the first partial_rotary_factor of each head; the
// first first_k_dense_replace layers dense, the others DeepSeek-V3's mixture of experts (newSigmoidMoE: sigmoid
// scores, the choice biased by e_score_correction_bias and limited to the topk_group best of n_group groups,
// routed_scaling_factor, ungated shared experts).
func init() {
	Register("Glm4MoeForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		act, err := ActivationFor("hidden_act", c.HiddenAct)
		if err != nil {
			return nil, err
		}
		if c.RopeByLayerType != nil {
			return nil, fmt.Errorf("rope_parameters nested by layer type is not implemented for GLM-4.5")
		}
		rope, err := NewRope(c.Rope, c.HeadDim, c.MaxPositionEmbeddings, RopeOptions{Partial: true})
		if err != nil {
			return nil, err
		}
		d := newDecoderWith(c, act, rope)
		d.qkvBias, d.oBias = c.AttentionBias, false
		if c.UseQKNorm {
			d.qkNorm = qkNormPerHead
		}
		m, sparse, err := newSigmoidMoE(c)
		if err != nil {
			return nil, err
		}
		d.sparseLayers(m, sparse)
		return d.finish(), nil
	})
}
