package gguf

import (
	"fmt"
	"math"
	"strings"
)

// Llama (and what llama.cpp's converter writes as llama: Mistral, SmolLM2, TinyLlama, Llama 3.x...): the shared
// tensors and keys, with q/k rows in llama.cpp's interleaved rotary order.
//
// llama.cpp adds a bias wherever the file has one; Hugging Face's Llama has attention_bias (q, k, v and o) and
// mlp_bias (gate, up and down) switches, set here from the tensors present (a file with only some of a group's
// biases is then refused for the missing ones).
//
// Llama 3.1-style rope scaling arrives as rope_freqs.weight, one divisor per rotated pair that llama.cpp's
// converter computed from the checkpoint's llama3 parameters; llama.cpp divides each pair's frequency by it. In
// Hugging Face's terms that is longrope with those divisors as both factor lists and an attention factor of 1.
//
// Mixtral is written as llama with expert_count: every layer a mixture of experts (ffn_gate_inp, the fused
// ffn_*_exps), softmax router scores, the top expert_used_count renormalized (llama.cpp's llama graph passes
// norm_w true and reads no expert_weights_scale), which is transformers' MixtralForCausalLM.
func init() {
	register("llama", archInfo{hf: "LlamaForCausalLM", interleavedRotary: true, configTensors: []string{"rope_freqs.weight"},
		names: map[string]string{"ffn_gate_inp.weight": "block_sparse_moe.gate.weight"},
		moe:   &moeInfo{countKey: "num_local_experts", experts: mixtralExperts, optional: true},
		config: func(m archMeta, cfg map[string]any) error {
			biasesFromTensors(m, cfg)
			if _, moe := cfg["num_local_experts"]; moe {
				cfg["architectures"], cfg["model_type"] = []string{"MixtralForCausalLM"}, "mixtral"
			}
			return ropeFreqs(m, cfg)
		}})
}

// biasesFromTensors sets attention_bias and mlp_bias from the bias tensors present, for the architectures whose
// llama.cpp graph adds every bias the file has (llama, granite).
func biasesFromTensors(m archMeta, cfg map[string]any) {
	for _, t := range m.Tensors {
		_, part, _ := strings.Cut(strings.TrimPrefix(t.Name, "blk."), ".")
		switch part {
		case "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias":
			cfg["attention_bias"] = true
		case "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias":
			cfg["mlp_bias"] = true
		}
	}
}

// ropeFreqs maps rope_freqs.weight, when the file has it, onto config.json's rope_scaling.
func ropeFreqs(m archMeta, cfg map[string]any) error {
	t, ok := m.Tensor("rope_freqs.weight")
	if !ok {
		return nil
	}
	if rs, ok := cfg["rope_scaling"].(map[string]any); ok {
		return fmt.Errorf("tensor \"rope_freqs.weight\" and metadata %s %q both scale the rotary frequencies: not supported", m.key("rope.scaling.type"), rs["rope_type"])
	}
	factors, err := m.ropeFactors(t, cfg["head_dim"].(int)/2)
	if err != nil {
		return err
	}
	cfg["rope_scaling"] = map[string]any{"rope_type": "longrope", "short_factor": factors, "long_factor": factors,
		"original_max_position_embeddings": cfg["max_position_embeddings"], "attention_factor": 1.0}
	return nil
}

// ropeFactors reads a tensor of n rotary factors (one per rotated pair), as llama.cpp requires it: shape [n]
// (llama's rope_freqs.weight, phi3's longrope factors).
func (m archMeta) ropeFactors(t TensorInfo, n int) ([]float64, error) {
	if len(t.Dims) != 1 || t.Dims[0] != int64(n) {
		return nil, fmt.Errorf("tensor %q has shape %v, want [%d] (one factor per rotated pair)", t.Name, t.Shape(), n)
	}
	f, err := m.TensorFloat32s(t.Name, int64(n))
	if err != nil {
		return nil, err
	}
	out := make([]float64, n)
	for i, v := range f {
		// llama.cpp divides each pair's frequency by its factor.
		if !(v > 0) || math.IsInf(float64(v), 1) {
			return nil, fmt.Errorf("tensor %q: factor [%d] is %g (want a finite positive number)", t.Name, i, v)
		}
		out[i] = float64(v)
	}
	return out, nil
}
