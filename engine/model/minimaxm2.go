package model

import (
	"fmt"

	"github.com/layerstream/layerstream/checkpoint"
)

// MiniMax-M2 (MiniMaxM2ForCausalLM): Llama's attention with q/k norms over the whole q and k projections (as
// OLMo 2's) and rotary embeddings on the first partial_rotary_factor of each head; every layer a mixture of
// num_local_experts experts of intermediate_size (block_sparse_moe.experts.e.w1/w3/w2) whose router takes each
// expert's sigmoid score, the top num_experts_per_tok of score + e_score_correction_bias
// (block_sparse_moe.e_score_correction_bias), and their unbiased scores renormalized as weights.
func init() {
	Register("MiniMaxM2ForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		act, err := ActivationFor("hidden_act", c.HiddenAct)
		if err != nil {
			return nil, err
		}
		if c.RopeByLayerType != nil {
			return nil, fmt.Errorf("rope_parameters nested by layer type is not implemented for MiniMax-M2")
		}
		rope, err := NewRope(c.Rope, c.HeadDim, c.MaxPositionEmbeddings, RopeOptions{Partial: true})
		if err != nil {
			return nil, err
		}
		d := newDecoderWith(c, act, rope)
		d.qkNorm = qkNormWhole
		m, err := newMoE(c, c.IntermediateSize, true)
		if err != nil {
			return nil, err
		}
		m.route.Score, m.bias = SigmoidScores, "block_sparse_moe.e_score_correction_bias"
		m.router, m.prefix, m.gate, m.up, m.down = "block_sparse_moe.gate", "block_sparse_moe.experts", "w1", "w3", "w2"
		d.sparseLayers(m, func(int) bool { return true })
		return d.finish(), nil
	})
}
