package model

import (
	"github.com/layerstream/layerstream/checkpoint"
)

// llama is the Llama decoder layer (Mistral and Qwen2 share it; Qwen2 adds q/k/v biases): pre-norm
// grouped-query attention with rotary embeddings, then a pre-norm SwiGLU MLP.
type llama struct{}

func init() {
	for _, name := range []string{"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"} {
		Register(name, llama{})
	}
}

func (llama) LayerWeights(c *checkpoint.Config) []WeightSpec {
	h, d, inter := c.HiddenSize, c.HeadDim, c.IntermediateSize
	q, kv := c.NumAttentionHeads*d, c.NumKeyValueHeads*d
	specs := []WeightSpec{
		{Name: "input_layernorm.weight", Shape: []int{h}},
		{Name: "self_attn.q_proj.weight", Shape: []int{q, h}},
		{Name: "self_attn.k_proj.weight", Shape: []int{kv, h}},
		{Name: "self_attn.v_proj.weight", Shape: []int{kv, h}},
		{Name: "self_attn.o_proj.weight", Shape: []int{h, q}},
		{Name: "post_attention_layernorm.weight", Shape: []int{h}},
		{Name: "mlp.gate_proj.weight", Shape: []int{inter, h}},
		{Name: "mlp.up_proj.weight", Shape: []int{inter, h}},
		{Name: "mlp.down_proj.weight", Shape: []int{h, inter}},
	}
	if c.HasQKVBias() { // Qwen2, or attention_bias: true
		specs = append(specs,
			WeightSpec{Name: "self_attn.q_proj.bias", Shape: []int{q}},
			WeightSpec{Name: "self_attn.k_proj.bias", Shape: []int{kv}},
			WeightSpec{Name: "self_attn.v_proj.bias", Shape: []int{kv}})
	}
	return specs
}

func (llama) Layer(c *checkpoint.Config, ops Ops, in LayerInputs) LayerOutputs {
	w := in.W
	eps := c.RMSNormEps
	x := in.X
	h := ops.RMSNorm(x, w["input_layernorm.weight"], eps)
	q := ops.Heads(ops.Linear(h, w["self_attn.q_proj.weight"], w["self_attn.q_proj.bias"]), c.NumAttentionHeads, c.HeadDim)
	k := ops.Heads(ops.Linear(h, w["self_attn.k_proj.weight"], w["self_attn.k_proj.bias"]), c.NumKeyValueHeads, c.HeadDim)
	v := ops.Heads(ops.Linear(h, w["self_attn.v_proj.weight"], w["self_attn.v_proj.bias"]), c.NumKeyValueHeads, c.HeadDim)
	q, k = ops.Rotary(q), ops.Rotary(k)
	att := ops.Attention(q, k, v)
	x = ops.Add(x, ops.Linear(att, w["self_attn.o_proj.weight"], nil))
	h = ops.RMSNorm(x, w["post_attention_layernorm.weight"], eps)
	mlp := ops.Mul(ops.SiLU(ops.Linear(h, w["mlp.gate_proj.weight"], nil)), ops.Linear(h, w["mlp.up_proj.weight"], nil))
	x = ops.Add(x, ops.Linear(mlp, w["mlp.down_proj.weight"], nil))
	return LayerOutputs{X: x, K: k, V: v}
}
