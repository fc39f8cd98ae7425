package model

import (
	"fmt"

	"github.com/layerstream/layerstream/checkpoint"
)

// OLMoE: Llama's decoder (pre-norms) with q_norm/k_norm over the whole q and k projections (as OLMo 2's) and, in
// every layer, num_experts experts of intermediate_size (softmax, top num_experts_per_tok, renormalized only with
// norm_topk_prob). clip_qkv, which clamps q, k and v, is not implemented.
func init() {
	Register("OlmoeForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		d, err := newDecoder(c)
		if err != nil {
			return nil, err
		}
		if c.ClipQKV != nil {
			return nil, fmt.Errorf("clip_qkv %g is not implemented (supported: null)", *c.ClipQKV)
		}
		d.qkNorm = qkNormWhole
		m, err := newMoE(c, c.IntermediateSize, c.NormTopKProb)
		if err != nil {
			return nil, err
		}
		d.sparseLayers(m, func(int) bool { return true })
		return d.finish(), nil
	})
}
