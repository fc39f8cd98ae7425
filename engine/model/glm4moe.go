package model

import (
	"fmt"

	"github.com/layerstream/layerstream/checkpoint"
)

// GLM-4.5 and 4.6 (Glm4MoeForCausalLM): Llama's attention with q/k/v biases (attention_bias; o_proj has none),
// per-head q/k norms with use_qk_norm, rotary embeddings on the first partial_rotary_factor of each head; the
// first first_k_dense_replace layers dense, the others a mixture of n_routed_experts experts of
// moe_intermediate_size routed as DeepSeek-V3's router does with one group: each expert's sigmoid score, the
// top num_experts_per_tok of score + e_score_correction_bias (mlp.gate.e_score_correction_bias), their unbiased
// scores as weights (renormalized with norm_topk_prob) times routed_scaling_factor; plus n_shared_experts shared
// experts (mlp.shared_experts, one MLP of n_shared_experts × moe_intermediate_size), ungated. Group-limited
// routing (n_group > 1) is not implemented.
func init() {
	Register("Glm4MoeForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		act, err := ActivationFor("hidden_act", c.HiddenAct)
		if err != nil {
			return nil, err
		}
		if c.RopeByLayerType != nil {
			return nil, fmt.Errorf("rope_parameters nested by layer type is not implemented for GLM-4.5")
		}
		if c.NGroup != 1 || c.TopKGroup != 1 {
			return nil, fmt.Errorf("n_group %d, topk_group %d: group-limited routing is not implemented (supported: 1 and 1)", c.NGroup, c.TopKGroup)
		}
		if c.NSharedExperts < 0 {
			return nil, fmt.Errorf("n_shared_experts %d is negative", c.NSharedExperts)
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
		m, err := newMoE(c, c.MoEIntermediateSize, c.NormTopKProb)
		if err != nil {
			return nil, err
		}
		m.route.Score, m.route.Scale, m.bias = SigmoidScores, c.RoutedScalingFactor, "mlp.gate.e_score_correction_bias"
		if c.NSharedExperts > 0 {
			m.shared, m.sharedInter = "mlp.shared_experts", c.NSharedExperts*c.MoEIntermediateSize
		}
		d.sparseLayers(m, func(i int) bool { return i >= c.FirstKDenseReplace })
		return d.finish(), nil
	})
}
