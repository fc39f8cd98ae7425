package model

import (
	"fmt"
	"math"

	"github.com/layerstream/layerstream/checkpoint"
)

// gpt-oss (GptOssForCausalLM): Llama's decoder with q/k/v/o biases (attention_bias) and attention sinks
// (self_attn.sinks: a learned logit per head in the softmax's denominator), layers sliding (sliding_window) and
// full as layer_types says (absent: the even layers sliding, GptOssConfig), one rotary embedding (yarn in the
// released models); every layer a mixture of num_local_experts experts of intermediate_size whose router
// (mlp.router, with a bias) picks the num_experts_per_tok largest logits and weighs them by their softmax. An
// expert is gpt-oss's clamped SwiGLU with biases: gate_up_proj ([2·inter, hidden], the gate rows then the up
// rows, as checkpoint.Open expands the fused mlp.experts tensors) and down_proj, the gate and up combined by
// Ops.ClampedSwiGLU with swiglu_alpha and swiglu_limit. hidden_act is not read (transformers ignores it).
func init() {
	Register("GptOssForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		if c.RopeByLayerType != nil {
			return nil, fmt.Errorf("rope_parameters nested by layer type is not implemented for gpt-oss (one rotary embedding serves every layer)")
		}
		if c.ExpertsPerToken != 0 && c.ExpertsPerToken != c.NumExpertsPerTok {
			return nil, fmt.Errorf("experts_per_token %d and num_experts_per_tok %d disagree (transformers reads num_experts_per_tok)", c.ExpertsPerToken, c.NumExpertsPerTok)
		}
		alpha, limit := c.SwigluAlpha, c.SwigluLimit
		if math.IsNaN(alpha) || math.IsInf(alpha, 0) || !(limit > 0) || math.IsInf(limit, 0) {
			return nil, fmt.Errorf("swiglu_alpha %g, swiglu_limit %g: want a finite gain and a positive finite limit", alpha, limit)
		}
		rope, err := NewRope(c.Rope, c.HeadDim, c.MaxPositionEmbeddings, RopeOptions{})
		if err != nil {
			return nil, err
		}
		d := newDecoderWith(c, SiLU, rope)
		d.sinks = true
		if err := d.slidingLayers(c, c.SlidingWindow, true, func(i int) bool { return i%2 == 0 }); err != nil {
			return nil, err
		}
		m, err := newMoE(c, c.IntermediateSize, false)
		if err != nil {
			return nil, err
		}
		m.route.Score = TopKSoftmax
		m.router, m.gate, m.routerBias, m.fusedGateUp, m.expertBias = "mlp.router", "gate_up_proj", true, true, true
		m.glu = func(ops Ops, gate, up Value) Value { return ops.ClampedSwiGLU(gate, up, alpha, limit) }
		d.sparseLayers(m, func(int) bool { return true })
		return d.finish(), nil
	})
}
