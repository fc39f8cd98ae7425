package gguf

import (
	"fmt"
	"strconv"
	"strings"
)

// Tensor names: llama.cpp's (GGUF) → Hugging Face's.
var (
	globalNames = map[string]string{
		"token_embd.weight":  "model.embed_tokens.weight",
		"output_norm.weight": "model.norm.weight",
		"output.weight":      "lm_head.weight",
	}
	layerNames = map[string]string{
		"attn_norm.weight":   "input_layernorm.weight",
		"attn_q.weight":      "self_attn.q_proj.weight",
		"attn_k.weight":      "self_attn.k_proj.weight",
		"attn_v.weight":      "self_attn.v_proj.weight",
		"attn_output.weight": "self_attn.o_proj.weight",
		"attn_q.bias":        "self_attn.q_proj.bias",
		"attn_k.bias":        "self_attn.k_proj.bias",
		"attn_v.bias":        "self_attn.v_proj.bias",
		"attn_output.bias":   "self_attn.o_proj.bias",
		"ffn_norm.weight":    "post_attention_layernorm.weight",
		"ffn_gate.weight":    "mlp.gate_proj.weight",
		"ffn_up.weight":      "mlp.up_proj.weight",
		"ffn_down.weight":    "mlp.down_proj.weight",
		"ffn_gate.bias":      "mlp.gate_proj.bias",
		"ffn_up.bias":        "mlp.up_proj.bias",
		"ffn_down.bias":      "mlp.down_proj.bias",
	}
	// refusedNames are tensors whose meaning layerstream does not implement, with the reason.
	refusedNames = map[string]string{
		"rope_freqs.weight": "per-dimension rotary frequency factors are read for llama files only (llama.cpp's other graphs this reader knows do not apply them)",
	}
)

// hfName maps a GGUF tensor name of the architecture to its Hugging Face name, or explains why the tensor is not
// supported.
func (a archInfo) hfName(name string) (string, error) {
	if hf, ok := globalNames[name]; ok {
		return hf, nil
	}
	if hf, ok := a.globals[name]; ok {
		return hf, nil
	}
	if why, ok := refusedNames[name]; ok {
		return "", fmt.Errorf("tensor %q: %s", name, why)
	}
	if n, part, ok := layerOf(name); ok {
		hf, ok := a.names[part]
		if !ok {
			hf, ok = layerNames[part]
		}
		if ok && hf != "" {
			return "model.layers." + strconv.Itoa(n) + "." + hf, nil
		}
	}
	return "", fmt.Errorf("tensor %q is not supported (not one of a %s model's tensors)", name, a.hf)
}

// isRotaryRows reports whether the Hugging Face tensor's rows are reordered by llama.cpp's Llama converter, and
// over how many heads: q_proj over the attention heads, k_proj over the key/value heads.
func isRotaryRows(hf string, heads, kvHeads int) int {
	switch {
	case strings.HasSuffix(hf, ".self_attn.q_proj.weight"), strings.HasSuffix(hf, ".self_attn.q_proj.bias"):
		return heads
	case strings.HasSuffix(hf, ".self_attn.k_proj.weight"), strings.HasSuffix(hf, ".self_attn.k_proj.bias"):
		return kvHeads
	}
	return 0
}
