package gguf

import (
	"fmt"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
)

// Qwen3.5 (dense): the Gated DeltaNet hybrid of Qwen3_5ForCausalLM as llama.cpp's converter writes it
// (conversion/qwen.py, Qwen3_5TextModel): the linear layers' in_proj_qkv, in_proj_z, in_proj_b, in_proj_a,
// conv1d (squeezed to [channels, kernel]), dt_bias and out_proj as attn_qkv, attn_gate, ssm_beta, ssm_alpha,
// ssm_conv1d, ssm_dt.bias and ssm_out, with their value heads reordered from grouped by key head to tiled
// (_reorder_v_heads), which the engine computes as they are (linear_tiled_value_heads: value head h reads key
// head h mod linear_num_key_heads); A_log as ssm_a = -exp(A_log) (read back as log(-x):
// checkpoint.TensorInfo.NegExp); every zero-centred norm's weight w as 1 + w (normsPlusOne) but the gated
// ssm_norm's. The full layers' q_proj keeps its per-head [query, gate] rows. ssm.* give the DeltaNet's sizes,
// attention.recurrent_layers the layer types; rope.dimension_sections (Qwen3.5's interleaved mrope) turn text
// positions' rotary into plain rope over rope.dimension_count dimensions, as transformers' does. The
// multi-token-prediction blocks a file may hold after the decoder's (nextn_predict_layers of block_count; the
// converter's default where the checkpoint has mtp.*) are left unread, as transformers leaves mtp.*. The MoE
// variant is qwen35moe (arch_qwen35moe.go), Qwen3-Next qwen3next (arch_qwen3next.go).
func init() {
	register("qwen35", qwen35Info())
}

// qwen35Info is what Qwen3.5's files and Qwen3.5-MoE's share.
func qwen35Info() archInfo {
	return archInfo{hf: "Qwen3_5ForCausalLM", normsPlusOne: true, partialRotary: true, layerShapes: true,
		plainNorms: []string{".linear_attn.norm.weight"},
		names: map[string]string{
			"attn_qkv.weight":            "linear_attn.in_proj_qkv.weight",
			"attn_gate.weight":           "linear_attn.in_proj_z.weight",
			"ssm_beta.weight":            "linear_attn.in_proj_b.weight",
			"ssm_alpha.weight":           "linear_attn.in_proj_a.weight",
			"ssm_conv1d.weight":          "linear_attn.conv1d.weight",
			"ssm_a":                      "linear_attn.A_log",
			"ssm_dt.bias":                "linear_attn.dt_bias",
			"ssm_norm.weight":            "linear_attn.norm.weight",
			"ssm_out.weight":             "linear_attn.out_proj.weight",
			"post_attention_norm.weight": "post_attention_layernorm.weight",
			"attn_q_norm.weight":         "self_attn.q_norm.weight",
			"attn_k_norm.weight":         "self_attn.k_norm.weight",
			"ffn_norm.weight":            "",
		},
		keys: []string{"ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size",
			"attention.recurrent_layers", "full_attention_interval", "rope.dimension_sections", "nextn_predict_layers"},
		config: qwen35Config, tensor: qwen35Tensor, nextn: true}
}

// qwen35Config reads the DeltaNet's sizes and the layer types into Qwen3_5TextConfig's keys.
func qwen35Config(m archMeta, cfg map[string]any) error {
	layers := cfg["num_hidden_layers"].(int) // less the multi-token-prediction blocks (archInfo.nextn)
	sizes := map[string]int{}
	for _, k := range []string{"ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size"} {
		v, ok, err := m.Int(m.key(k))
		if err != nil {
			return err
		}
		if !ok || v <= 0 {
			return fmt.Errorf("metadata %s is missing or not positive", m.key(k))
		}
		sizes[k] = v
	}
	nv := sizes["ssm.time_step_rank"]
	if sizes["ssm.inner_size"] != nv*sizes["ssm.state_size"] {
		// llama.cpp sizes the value heads by ssm.state_size, the key heads' size (src/models/qwen35.cpp).
		return fmt.Errorf("metadata %s (%d) is not %s × %s (%d × %d): llama.cpp's value heads are the size of its key heads", m.key("ssm.inner_size"), sizes["ssm.inner_size"], m.key("ssm.time_step_rank"), m.key("ssm.state_size"), nv, sizes["ssm.state_size"])
	}
	if eps, _, err := m.Float(m.key("attention.layer_norm_rms_epsilon")); err != nil {
		return err
	} else if float32(eps) != float32(1e-6) {
		// llama.cpp adds the RMS epsilon in the DeltaNet's L2 norms of q and k, transformers (and layerstream) 1e-6.
		return fmt.Errorf("metadata %s is %g: llama.cpp's %s adds it in the DeltaNet's L2 norms of q and k, where transformers adds 1e-6; only 1e-6 is supported", m.key("attention.layer_norm_rms_epsilon"), eps, m.arch)
	}
	recurrent, ok := m.Get(m.key("attention.recurrent_layers"))
	flags, isBools := recurrent.V.([]bool)
	if !ok || !isBools || len(flags) < layers {
		return fmt.Errorf("metadata %s: want one bool per layer (%d)", m.key("attention.recurrent_layers"), layers)
	}
	flags = flags[:layers]
	types := make([]string, len(flags))
	for i, r := range flags {
		types[i] = "full_attention"
		if r {
			types[i] = "linear_attention"
		}
	}
	rope := map[string]any{"rope_type": "default", "rope_theta": cfg["rope_theta"]}
	if f, ok := cfg["partial_rotary_factor"]; ok {
		rope["partial_rotary_factor"] = f
	}
	delete(cfg, "rope_theta")
	delete(cfg, "partial_rotary_factor")
	for k, v := range map[string]any{"model_type": "qwen3_5_text", "layer_types": types, "rope_parameters": rope,
		"linear_conv_kernel_dim": sizes["ssm.conv_kernel"], "linear_key_head_dim": sizes["ssm.state_size"],
		"linear_num_key_heads": sizes["ssm.group_count"], "linear_num_value_heads": nv,
		"linear_value_head_dim": sizes["ssm.inner_size"] / nv, "linear_tiled_value_heads": true} {
		cfg[k] = v
	}
	return nil
}

// qwen35Tensor gives ssm_a its -exp undone and ssm_conv1d Hugging Face's [channels, 1, kernel] shape.
func qwen35Tensor(ct *checkpoint.TensorInfo) error {
	switch {
	case strings.HasSuffix(ct.Name, ".linear_attn.A_log"):
		if ct.DType != checkpoint.F32 {
			return fmt.Errorf("is %s: llama.cpp's ssm_a (-exp(A_log)) is read from float32 only", ct.DType)
		}
		ct.NegExp = true
	case strings.HasSuffix(ct.Name, ".linear_attn.conv1d.weight") && len(ct.Shape) == 2:
		ct.Shape = []int64{ct.Shape[0], 1, ct.Shape[1]}
	}
	return nil
}
