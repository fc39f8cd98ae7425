package model

import (
	"fmt"

	"github.com/layerstream/layerstream/checkpoint"
)

// Qwen1.5-MoE and Qwen2-MoE: Qwen2's decoder (q/k/v biases as qkv_bias says) whose sparse layers (qwenSparse)
// route each row to num_experts_per_tok of num_experts experts of moe_intermediate_size (softmax, then top-k,
// renormalized only with norm_topk_prob) and add a shared expert of shared_expert_intermediate_size scaled by
// sigmoid(shared_expert_gate·x); the other layers keep a dense MLP of intermediate_size.
//
// Qwen3-MoE: Qwen3's decoder (per-head q/k norms) with the same experts and no shared expert; with
// use_sliding_window every layer attends within sliding_window positions (Qwen3MoeConfig, transformers 5).
func init() {
	Register("Qwen2MoeForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		d, err := newDecoder(c)
		if err != nil {
			return nil, err
		}
		d.qkvBias, d.oBias = c.QKVBias, false
		if err := qwenWindows(d, c); err != nil {
			return nil, err
		}
		m, err := qwenMoE(d, c)
		if err != nil {
			return nil, err
		}
		if err := qwenSharedExpert(m, c); err != nil {
			return nil, err
		}
		return d.finish(), nil
	})
	Register("Qwen3MoeForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		d, err := newDecoder(c)
		if err != nil {
			return nil, err
		}
		d.qkNorm = qkNormPerHead
		if err := d.slidingLayers(c, c.SlidingWindow, c.UseSlidingWindow, func(int) bool { return c.UseSlidingWindow }); err != nil {
			return nil, err
		}
		if _, err := qwenMoE(d, c); err != nil {
			return nil, err
		}
		return d.finish(), nil
	})
}

// qwenMoE gives d the Qwen-MoE experts of c and its dense layers.
func qwenMoE(d *decoder, c *checkpoint.Config) (*moeMLP, error) {
	sparse, err := qwenSparse(c)
	if err != nil {
		return nil, err
	}
	m, err := newMoE(c, c.MoEIntermediateSize, c.NormTopKProb)
	if err != nil {
		return nil, err
	}
	d.sparseLayers(m, sparse)
	return m, nil
}

// qwenSharedExpert gives m Qwen2-MoE's shared expert (mlp.shared_expert, of shared_expert_intermediate_size) scaled
// by sigmoid(mlp.shared_expert_gate·x): Qwen3-Next's and Qwen3.5-MoE's too.
func qwenSharedExpert(m *moeMLP, c *checkpoint.Config) error {
	if c.SharedExpertIntermediateSize <= 0 {
		return fmt.Errorf("shared_expert_intermediate_size %d is not positive", c.SharedExpertIntermediateSize)
	}
	m.shared, m.sharedGate, m.sharedInter = "mlp.shared_expert", "mlp.shared_expert_gate", c.SharedExpertIntermediateSize
	return nil
}
