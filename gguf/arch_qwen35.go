package gguf

import (
	"fmt"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
)

// Qwen3.5 (qwen35: Qwen3_5ForCausalLM, and the text model of Qwen3_5ForConditionalGeneration), as llama.cpp's
// converter writes it (conversion/qwen.py, Qwen3_5TextModel) and its graph reads it (src/models/qwen35.cpp):
// Gated DeltaNet layers (attention.recurrent_layers) beside gated full-attention layers.
//
// What reading undoes of the converter:
//   - every RMSNorm weight w but the DeltaNet's gated norm (ssm_norm) is stored as 1 + w (Shift -1);
//   - A_log is stored as ssm_a = -exp(A_log) (LogNeg: log(-a), within an ulp of the checkpoint's A_log);
//   - with more value heads than key heads, the value heads of attn_qkv's v rows and conv1d's v channels,
//     attn_gate (z), ssm_alpha, ssm_beta, ssm_a, ssm_dt and ssm_out's columns are tiled rather than grouped by key
//     head (checkpoint.TiledHeads);
//   - conv1d's [channels, 1, kernel] lost its middle dimension (the bytes are the same).
//
// q_proj holds each head's query then its output gate, in Hugging Face's rotary order (NEOX; no permutation).
// rope.dimension_sections are the multimodal rope's sections: text positions are the same in every section,
// which makes it plain rope. llama.cpp takes the DeltaNet's value head size from ssm.state_size (the key head
// size): a file whose ssm.inner_size says otherwise is refused. llama.cpp's L2 norms of q and k add the RMS
// epsilon, transformers' 1e-6: another epsilon is refused. Multi-token-prediction layers (nextn) are refused.
func init() {
	register("qwen35", archInfo{hf: "Qwen3_5ForCausalLM", normsPlusOne: true, partialRotary: true, names: qwen35Names(),
		keys: qwen35Keys, config: qwen35Config, tensor: deltaNetTensor})
}

// refusedArchs say why an architecture layerstream computes from safetensors is not read from GGUF.
var refusedArchs = map[string]string{
	// The converter splits Qwen3-Next's in_proj_qkvz, grouped per key head, into Qwen3.5's separate attn_qkv and
	// attn_gate, but keeps in_proj_ba grouped (ssm_ba): Qwen3.5's in_proj_b and in_proj_a are not one region of
	// the file each, and layerstream's DeltaNet reads either all projections grouped or none.
	"qwen3next": "llama.cpp's converter leaves Qwen3-Next's DeltaNet projections half regrouped (attn_qkv and attn_gate separate, ssm_ba grouped per key head), a layout layerstream's DeltaNet does not read; its safetensors checkpoints are read",
}

// qwen35Keys are the metadata keys of Qwen3.5's files beside the shared ones.
var qwen35Keys = []string{"ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size",
	"attention.recurrent_layers", "full_attention_interval", "rope.dimension_sections",
	"nextn_predict_layers"} // refused by recurrentLayers, naming the converter's flag

// qwen35Names maps Qwen3.5's tensors beside the shared ones (biases and the Llama pre-MLP norm refused).
func qwen35Names() map[string]string {
	names := map[string]string{
		"post_attention_norm.weight": "post_attention_layernorm.weight",
		"attn_q_norm.weight":         "self_attn.q_norm.weight",
		"attn_k_norm.weight":         "self_attn.k_norm.weight",
		"attn_qkv.weight":            "linear_attn.in_proj_qkv.weight",
		"attn_gate.weight":           "linear_attn.in_proj_z.weight",
		"ssm_alpha.weight":           "linear_attn.in_proj_a.weight",
		"ssm_beta.weight":            "linear_attn.in_proj_b.weight",
		"ssm_a":                      "linear_attn.A_log",
		"ssm_dt.bias":                "linear_attn.dt_bias",
		"ssm_conv1d.weight":          "linear_attn.conv1d.weight",
		"ssm_norm.weight":            "linear_attn.norm.weight",
		"ssm_out.weight":             "linear_attn.out_proj.weight",
		"ffn_norm.weight":            "",
	}
	for _, b := range []string{"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"} {
		names[b] = ""
	}
	return names
}

// qwen35Config reads the DeltaNet's sizes and the layer types, and writes the rotary embedding as Qwen3.5's
// rope_parameters.
func qwen35Config(m archMeta, cfg map[string]any) error {
	if _, ok := cfg["sliding_window"]; ok {
		return fmt.Errorf("metadata %s is set: llama.cpp's %s graph has no sliding window; refusing the contradiction", m.key("attention.sliding_window"), m.arch)
	}
	if _, ok := cfg["rope_scaling"]; ok {
		return fmt.Errorf("metadata %s: rope scaling is not supported for %s", m.key("rope.scaling.type"), m.arch)
	}
	if eps, _, err := m.Float(m.key("attention.layer_norm_rms_epsilon")); err != nil {
		return err
	} else if float32(eps) != float32(1e-6) {
		return fmt.Errorf("metadata %s is %g: llama.cpp's %s adds it in the DeltaNet's L2 norms of q and k, where transformers (and layerstream) add 1e-6; only 1e-6 is supported", m.key("attention.layer_norm_rms_epsilon"), eps, m.arch)
	}
	sizes := map[string]string{"linear_conv_kernel_dim": "ssm.conv_kernel", "linear_key_head_dim": "ssm.state_size",
		"linear_num_key_heads": "ssm.group_count", "linear_num_value_heads": "ssm.time_step_rank"}
	for hf, k := range sizes {
		v, ok, err := m.Int(m.key(k))
		if err != nil {
			return err
		}
		if !ok || v <= 0 {
			return fmt.Errorf("metadata %s is missing or not positive (llama.cpp requires it)", m.key(k))
		}
		cfg[hf] = v
	}
	if inner, _, err := m.Int(m.key("ssm.inner_size")); err != nil {
		return err
	} else if inner != cfg["linear_key_head_dim"].(int)*cfg["linear_num_value_heads"].(int) {
		return fmt.Errorf("metadata %s is %d, not %s × %s (%d × %d): llama.cpp's value heads are the size of its key heads", m.key("ssm.inner_size"), inner, m.key("ssm.state_size"), m.key("ssm.time_step_rank"), cfg["linear_key_head_dim"], cfg["linear_num_value_heads"])
	}
	cfg["linear_value_head_dim"] = cfg["linear_key_head_dim"]
	types, err := recurrentLayers(m, cfg["num_hidden_layers"].(int))
	if err != nil {
		return err
	}
	partial := 1.0
	if f, ok := cfg["partial_rotary_factor"].(float64); ok {
		partial = f
	}
	cfg["layer_types"], cfg["attention_bias"] = types, false
	cfg["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": cfg["rope_theta"], "partial_rotary_factor": partial}
	delete(cfg, "rope_theta")
	delete(cfg, "partial_rotary_factor")
	cfg["architectures"], cfg["model_type"] = []string{"Qwen3_5ForCausalLM"}, "qwen3_5_text"
	return nil
}

// recurrentLayers are the layer types as llama.cpp's loader decides them: attention.recurrent_layers, one bool
// per layer (true: linear attention), else every full_attention_interval-th layer (4 when absent) full attention.
func recurrentLayers(m archMeta, layers int) ([]string, error) {
	if _, ok := m.Get(m.key("nextn_predict_layers")); ok {
		return nil, fmt.Errorf("metadata %s: multi-token-prediction layers are not supported (convert with --no-mtp)", m.key("nextn_predict_layers"))
	}
	rec := make([]bool, layers)
	if v, ok := m.Get(m.key("attention.recurrent_layers")); ok {
		flags, isArray := v.V.([]bool)
		if !isArray || len(flags) != layers {
			return nil, fmt.Errorf("metadata %s: want an array of %d bools (one per layer)", m.key("attention.recurrent_layers"), layers)
		}
		copy(rec, flags)
	} else {
		interval := 4
		if n, ok, err := m.Int(m.key("full_attention_interval")); err != nil {
			return nil, err
		} else if ok {
			interval = n
		}
		if interval <= 0 {
			return nil, fmt.Errorf("metadata %s is %d: want a positive interval", m.key("full_attention_interval"), interval)
		}
		for i := range rec {
			rec[i] = (i+1)%interval != 0
		}
	}
	types := make([]string, layers)
	for i, r := range rec {
		types[i] = "full_attention"
		if r {
			types[i] = "linear_attention"
		}
	}
	return types, nil
}

// deltaNetTensor sets what reading undoes of the converter's changes to the DeltaNet tensors and the gated
// attention's q_proj, and returns their shapes.
func deltaNetTensor(t *checkpoint.TensorInfo, c *checkpoint.Config) ([]int64, error) {
	_, part, ok := strings.Cut(strings.TrimPrefix(t.Name, "model.layers."), ".")
	if !ok {
		return nil, nil
	}
	kh, vh, kd, vd := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim
	h, qk, vdim := int64(c.HiddenSize), int64(2*kh*kd), int64(vh*vd)
	tiled := func(size, offset int, columns bool) {
		if vh != kh {
			t.TiledHeads = checkpoint.TiledHeads{Groups: kh, PerGroup: vh / kh, Size: size, Offset: offset, Columns: columns}
		}
	}
	switch part {
	case "self_attn.q_proj.weight":
		return []int64{int64(2 * c.NumAttentionHeads * c.HeadDim), h}, nil
	case "linear_attn.in_proj_qkv.weight":
		tiled(vd, int(qk), false)
		return []int64{qk + vdim, h}, nil
	case "linear_attn.in_proj_z.weight":
		tiled(vd, 0, false)
		return []int64{vdim, h}, nil
	case "linear_attn.in_proj_a.weight", "linear_attn.in_proj_b.weight":
		tiled(1, 0, false)
		return []int64{int64(vh), h}, nil
	case "linear_attn.A_log", "linear_attn.dt_bias":
		tiled(1, 0, false)
		t.LogNeg = part == "linear_attn.A_log"
		return []int64{int64(vh)}, nil
	case "linear_attn.conv1d.weight":
		if len(t.Shape) == 2 {
			t.Shape = []int64{t.Shape[0], 1, t.Shape[1]} // the converter squeezed Hugging Face's middle dimension
		}
		tiled(vd, int(qk), false)
		return []int64{qk + vdim, 1, int64(c.LinearConvKernelDim)}, nil
	case "linear_attn.norm.weight":
		t.Shift = 0 // the one norm the converter stores as it is
		return []int64{int64(vd)}, nil
	case "linear_attn.out_proj.weight":
		tiled(vd, 0, true)
		return []int64{h, vdim}, nil
	}
	return nil, nil
}
