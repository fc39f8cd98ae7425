package model

import (
	"github.com/layerstream/layerstream/checkpoint"
)

// Qwen3-Next (Qwen3NextForCausalLM): Qwen3.5's hybrid (qwen3_5.go) with the DeltaNet's projections fused and
// grouped per key head (in_proj_qkvz: [q, k, v, z] of each key head's value heads; in_proj_ba: [b, a]), and a
// mixture of experts with Qwen's gated shared expert on the sparse layers (Qwen3NextDecoderLayer: num_experts > 0
// and qwenSparse's rule; softmax top-k, renormalized with norm_topk_prob); the other layers keep a dense MLP of
// intermediate_size. With linear_grouped_ba (llama.cpp's qwen3next files), in_proj_qkvz comes as Qwen3.5's separate
// in_proj_qkv and in_proj_z, and in_proj_ba stays grouped.
func init() {
	Register("Qwen3NextForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		n, err := newDeltaNet(c, !c.LinearGroupedBA)
		if err != nil {
			return nil, err
		}
		n.groupedBA = c.LinearGroupedBA
		if c.NumExperts > 0 {
			sparse, err := qwenSparse(c)
			if err != nil {
				return nil, err
			}
			if err := n.experts(c, sparse, c.NormTopKProb); err != nil {
				return nil, err
			}
		}
		return n.finish(), nil
	})
}
