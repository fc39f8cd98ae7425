package gguf

import (
	"fmt"
	"slices"
	"strconv"
)

// Gemma 4 (text, dense), as llama.cpp computes it (src/models/gemma4.cpp): sliding and full layers
// (attention.sliding_window_pattern, one flag per layer), each type with its head size (attention.key_length for the
// full layers, attention.key_length_swa for the sliding ones) and rotary base (rope.freq_base, rope.freq_base_swa),
// the full layers' proportional rope carried by rope_freqs.weight (factor 1 for the rotated pairs, 1e30 for the
// others, which llama.cpp divides their frequencies by); key/value heads per layer (attention.head_count_kv, a
// number or one per layer); the last attention.shared_kv_layers layers reusing earlier layers' keys and values;
// per-layer inputs (embedding_length_per_layer_input); MLP widths per layer (feed_forward_length: the shared
// layers' twice as wide with use_double_wide_mlp); plain-weight norms (the converter writes Hugging Face's weights
// as they are); the embeddings × √hidden_size in float32 (so the derived config says float32).
func init() {
	register("gemma4", archInfo{hf: "Gemma4ForCausalLM", layerArrays: true, layerShapes: true,
		globals: map[string]string{
			"per_layer_token_embd.weight": "model.embed_tokens_per_layer.weight",
			"per_layer_model_proj.weight": "model.per_layer_model_projection.weight",
			"per_layer_proj_norm.weight":  "model.per_layer_projection_norm.weight",
		},
		names: map[string]string{
			"attn_q_norm.weight":         "self_attn.q_norm.weight",
			"attn_k_norm.weight":         "self_attn.k_norm.weight",
			"post_attention_norm.weight": "post_attention_layernorm.weight",
			"ffn_norm.weight":            "pre_feedforward_layernorm.weight",
			"post_ffw_norm.weight":       "post_feedforward_layernorm.weight",
			"inp_gate.weight":            "per_layer_input_gate.weight",
			"proj.weight":                "per_layer_projection.weight",
			"post_norm.weight":           "post_per_layer_input_norm.weight",
			"layer_output_scale.weight":  "layer_scalar",
		},
		keys: []string{"final_logit_softcapping", "attention.sliding_window_pattern", "attention.shared_kv_layers",
			"embedding_length_per_layer_input", "attention.key_length_swa", "attention.value_length_swa",
			"rope.dimension_count_swa", "rope.freq_base_swa", "expert_feed_forward_length"},
		configTensors: []string{"rope_freqs.weight"}, moe: gemma4Experts,
		config: gemma4Config})
	for k, v := range gemma4ExpertNames {
		archs["gemma4"].names[k] = v
	}
}

// gemma4Config derives Gemma4ForCausalLM's config.json (transformers 5's spelling: rope_parameters by layer type,
// per_layer_config for the full layers' head size and key/value heads).
func gemma4Config(m archMeta, cfg map[string]any) error {
	n := cfg["num_hidden_layers"].(int)
	if n > maxLayers {
		return fmt.Errorf("metadata %s is %d: llama.cpp loads at most %d layers", m.key("block_count"), n, maxLayers)
	}
	if _, ok := cfg["rope_scaling"]; ok {
		return fmt.Errorf("metadata %s: rope scaling is not supported for gemma4", m.key("rope.scaling.type"))
	}
	delete(cfg, "hidden_act")
	cfg["model_type"], cfg["hidden_activation"], cfg["dtype"] = "gemma4_text", "gelu_pytorch_tanh", "float32"
	if err := finalSoftCap(m, cfg); err != nil {
		return err
	}
	swa, err := gemma4LayerTypes(m, cfg, n)
	if err != nil {
		return err
	}
	shared, err := gemma4Shared(m, cfg, swa)
	if err != nil {
		return err
	}
	full, err := gemma4Heads(m, cfg, swa, n-shared)
	if err != nil {
		return err
	}
	if err := gemma4Widths(m, cfg, n-shared); err != nil {
		return err
	}
	if err := gemma4Rope(m, cfg, full); err != nil {
		return err
	}
	if err := gemma4MoEConfig(m, cfg); err != nil {
		return err
	}
	return gemma4PerLayer(m, cfg)
}

// gemma4LayerTypes writes layer_types from attention.sliding_window_pattern (required by llama.cpp, one flag per
// layer) and checks the sliding window; swa[i] says layer i slides.
func gemma4LayerTypes(m archMeta, cfg map[string]any, n int) (swa []bool, err error) {
	key := m.key("attention.sliding_window_pattern")
	v, ok := m.Get(key)
	swa, isArray := v.V.([]bool)
	if !ok || !isArray || len(swa) != n {
		return nil, fmt.Errorf("metadata %s: want one flag per layer (%d; llama.cpp requires them), got %v", key, n, v.V)
	}
	if _, ok := cfg["sliding_window"]; !ok && slices.Contains(swa, true) {
		return nil, fmt.Errorf("metadata %s is missing or 0: sliding layers need a window", m.key("attention.sliding_window"))
	}
	return swa, slidingLayerTypes(m, cfg, 0)
}

// gemma4Shared reads attention.shared_kv_layers, refusing a file where llama.cpp's choice of the layer a shared
// layer reuses (the last unshared layer for a full one, the one before it for a sliding one) is not
// transformers' (the last earlier unshared layer of its type).
func gemma4Shared(m archMeta, cfg map[string]any, swa []bool) (int, error) {
	shared, _, err := m.Int(m.key("attention.shared_kv_layers"))
	if err != nil {
		return 0, err
	}
	first := len(swa) - shared
	if shared < 0 || shared > 0 && first < 2 {
		return 0, fmt.Errorf("metadata %s is %d of %d layers: llama.cpp needs at least two layers computing keys and values", m.key("attention.shared_kv_layers"), shared, len(swa))
	}
	for i := first; i < len(swa); i++ {
		src := first - 1
		if swa[i] {
			src = first - 2
		}
		if swa[src] != swa[i] || swa[i] && swa[first-1] {
			return 0, fmt.Errorf("metadata %s: layer %d reuses layer %d's keys and values in llama.cpp, transformers the last earlier layer of its type: not supported", m.key("attention.shared_kv_layers"), i, src)
		}
	}
	cfg["num_kv_shared_layers"] = shared
	return shared, nil
}

// gemma4Heads writes head_dim (the sliding layers') and per_layer_config (the full layers' head size and key/value
// heads where they differ), and attention_k_eq_v where the full layers have no attn_v; it returns the full layers'
// head size.
func gemma4Heads(m archMeta, cfg map[string]any, swa []bool, unshared int) (full int, err error) {
	full, kv := cfg["head_dim"].(int), cfg["num_key_value_heads"].(int)
	local, ok, err := m.Int(m.key("attention.key_length_swa"))
	if err != nil || !ok {
		return 0, fmt.Errorf("metadata %s is missing (llama.cpp requires it): %v", m.key("attention.key_length_swa"), err)
	}
	if v, ok, err := m.Int(m.key("attention.value_length_swa")); err != nil {
		return 0, err
	} else if !ok || v != local {
		return 0, fmt.Errorf("metadata %s is %d (present: %v), %s %d: values of another size than the keys are not supported", m.key("attention.value_length_swa"), v, ok, m.key("attention.key_length_swa"), local)
	}
	kvs := slices.Repeat([]int{kv}, len(swa))
	if v, ok, err := m.Ints(m.key("attention.head_count_kv")); ok && err == nil && v != nil { // else a number
		kvs = v
	}
	if len(kvs) != len(swa) {
		return 0, fmt.Errorf("metadata %s has %d entries for %d layers", m.key("attention.head_count_kv"), len(kvs), len(swa))
	}
	kvOf := map[bool]int{}
	for i, s := range swa {
		if k, seen := kvOf[s]; seen && k != kvs[i] {
			return 0, fmt.Errorf("metadata %s: layers of one type with %d and %d key/value heads: not supported", m.key("attention.head_count_kv"), k, kvs[i])
		}
		kvOf[s] = kvs[i]
	}
	headDim, kvHeads := local, kvOf[true]
	if !slices.Contains(swa, true) {
		headDim, kvHeads = full, kvOf[false]
	}
	over := map[string]any{}
	for i, s := range swa {
		if !s && (full != headDim || kvOf[false] != kvHeads) {
			over[strconv.Itoa(i)] = map[string]any{"head_dim": full, "num_key_value_heads": kvOf[false]}
		}
	}
	cfg["head_dim"], cfg["num_key_value_heads"], cfg["per_layer_config"] = headDim, kvHeads, over
	kEqV, err := gemma4KEqV(m, swa, unshared)
	cfg["attention_k_eq_v"] = kEqV
	return full, err
}

// gemma4KEqV reports whether the full layers take their values from attn_k (no attn_v: Hugging Face's
// attention_k_eq_v), refusing a sliding layer without attn_v (llama.cpp would use its keys, transformers cannot) and
// full layers that disagree.
func gemma4KEqV(m archMeta, swa []bool, unshared int) (bool, error) {
	var with, without int
	for i := range unshared {
		_, has := m.Tensor(fmt.Sprintf("blk.%d.attn_v.weight", i))
		switch {
		case swa[i] && !has:
			return false, fmt.Errorf("tensor blk.%d.attn_v.weight is missing: a sliding layer taking its values from attn_k is not supported", i)
		case swa[i]:
		case has:
			with++
		default:
			without++
		}
	}
	if with > 0 && without > 0 {
		return false, fmt.Errorf("some full-attention layers have attn_v and others not: not supported")
	}
	return without > 0, nil
}

// gemma4Widths writes intermediate_size and use_double_wide_mlp from feed_forward_length (a number, or one per
// layer: the shared layers all as wide as the others or all twice as wide).
func gemma4Widths(m archMeta, cfg map[string]any, unshared int) error {
	ff := cfg["intermediate_size"].(int)
	widths, ok, err := m.Ints(m.key("feed_forward_length"))
	if !ok || err != nil || widths == nil { // a number: every layer's
		return nil
	}
	double := false
	for i, w := range widths {
		switch {
		case i < unshared && w == ff, i >= unshared && w == ff && !double:
		case i == unshared && w == 2*ff:
			double = true
		case i > unshared && w == 2*ff && double:
		default:
			return fmt.Errorf("metadata %s %v: widths other than one for the layers computing keys and values and one or two times it for the shared layers are not supported", m.key("feed_forward_length"), widths)
		}
	}
	cfg["use_double_wide_mlp"] = double
	return nil
}

// gemma4Rope writes rope_parameters by layer type: the full layers' proportional rope (rope_freqs.weight: the
// pairs with factor 1 rotate, those with a factor of at least 1e30 turn by less than 1e-24 of a radian per position,
// which transformers' proportional rope makes 0), the sliding layers' default rope on rope.freq_base_swa (10000
// when absent), each rotating its whole head.
func gemma4Rope(m archMeta, cfg map[string]any, full int) error {
	local := cfg["head_dim"].(int)
	if v, ok, err := m.Int(m.key("rope.dimension_count_swa")); err != nil {
		return err
	} else if ok && v != local || !ok {
		return fmt.Errorf("metadata %s is %d (present: %v), the sliding layers' head size %d: partial rotary embeddings are not supported", m.key("rope.dimension_count_swa"), v, ok, local)
	}
	partial := 1.0
	if t, ok := m.Tensor("rope_freqs.weight"); ok {
		dim := full
		f, err := m.TensorFloat32s(t.Name, int64(dim/2))
		if err != nil || len(t.Dims) != 1 {
			return fmt.Errorf("tensor rope_freqs.weight: want [%d] factors (%v)", dim/2, err)
		}
		rotated := 0
		for rotated < len(f) && f[rotated] == 1 {
			rotated++
		}
		for i, v := range f[rotated:] {
			if v < 1e30 {
				return fmt.Errorf("tensor rope_freqs.weight: factor [%d] is %g: only 1 for the first pairs then ≥ 1e30 (proportional rope) is supported for gemma4", rotated+i, v)
			}
		}
		partial = float64(2*rotated) / float64(dim)
	}
	base := 10000.0
	if v, ok, err := m.PositiveFloat(m.key("rope.freq_base_swa")); err != nil {
		return err
	} else if ok {
		base = v
	}
	cfg["rope_parameters"] = map[string]any{
		"full_attention":    map[string]any{"rope_type": "proportional", "partial_rotary_factor": partial, "rope_theta": cfg["rope_theta"]},
		"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": float32JSON(base)},
	}
	delete(cfg, "rope_theta")
	return nil
}

// gemma4PerLayer writes the per-layer inputs' width (embedding_length_per_layer_input, required by llama.cpp) and
// their table's rows.
func gemma4PerLayer(m archMeta, cfg map[string]any) error {
	p, ok, err := m.Int(m.key("embedding_length_per_layer_input"))
	if err != nil || !ok {
		return fmt.Errorf("metadata %s is missing (llama.cpp requires it): %v", m.key("embedding_length_per_layer_input"), err)
	}
	cfg["hidden_size_per_layer_input"] = p
	if t, ok := m.Tensor("per_layer_token_embd.weight"); ok && len(t.Dims) == 2 {
		cfg["vocab_size_per_layer_input"] = int(t.Dims[1])
	}
	return nil
}
