package gguf

import (
	"encoding/json"
	"fmt"
)

// Gemma 2 and Gemma 3 (text): RMSNorms before and after both branches, GELU (tanh) MLPs, local (sliding window)
// layers beside global ones, the embeddings scaled by √hidden_size (llama.cpp's graph does it unasked, in float32:
// the derived config says float32 so the engine's scale is the same), in Hugging Face's rotary order.
//
// llama.cpp's converter stores every norm weight w, which Hugging Face applies as x·(1 + w), as 1 + w (llama.cpp
// computes x·w): the mapping subtracts 1 back on reading (normsPlusOne), which is exact for stored values in
// [0.5, 2] (Sterbenz), so the engine's 1 + w is the stored value again.
func init() {
	gemmaNames := map[string]string{
		// Gemma's "ffn_norm" is the norm before the MLP: Hugging Face's pre_feedforward_layernorm, while its
		// post_attention_layernorm is the norm after attention (Llama's ffn_norm is Gemma's pre-MLP norm).
		"post_attention_norm.weight": "post_attention_layernorm.weight",
		"ffn_norm.weight":            "pre_feedforward_layernorm.weight",
		"post_ffw_norm.weight":       "post_feedforward_layernorm.weight",
	}
	register("gemma2", archInfo{hf: "Gemma2ForCausalLM", normsPlusOne: true, names: gemmaNames,
		keys:   []string{"attn_logit_softcapping", "final_logit_softcapping", "attention.sliding_window_pattern"},
		config: gemma2Config})
	gemma3Names := map[string]string{
		"attn_q_norm.weight": "self_attn.q_norm.weight",
		"attn_k_norm.weight": "self_attn.k_norm.weight",
	}
	for k, v := range gemmaNames {
		gemma3Names[k] = v
	}
	register("gemma3", archInfo{hf: "Gemma3ForCausalLM", normsPlusOne: true, names: gemma3Names,
		keys:   []string{"final_logit_softcapping", "attention.sliding_window_pattern", "rope.freq_base_swa"},
		config: gemma3Config})
}

// gemma2Config follows llama.cpp's Gemma 2 (src/models/gemma2.cpp): attention soft-capped at
// attn_logit_softcapping (50 when absent) and logits at final_logit_softcapping (30 when absent), a sliding window
// of attention.sliding_window (4096 when absent) on every other layer, the first local (or as
// attention.sliding_window_pattern says), one rotary embedding for every layer.
func gemma2Config(m archMeta, cfg map[string]any) error {
	if err := gemmaConfig(m, cfg, 46); err != nil {
		return err
	}
	for k, def := range map[string]float64{"attn_logit_softcapping": 50, "final_logit_softcapping": 30} {
		v, err := positiveFloat(m, k, def)
		if err != nil {
			return err
		}
		cfg[k] = v
	}
	window := 4096
	if v, ok, err := m.Int(m.key("attention.sliding_window")); err != nil {
		return err
	} else if ok {
		window = v
	}
	if window <= 0 {
		// llama.cpp would mask every position, the token's own included.
		return fmt.Errorf("metadata %s is %d: a Gemma 2 model needs a positive sliding window", m.key("attention.sliding_window"), window)
	}
	cfg["sliding_window"] = window
	return slidingLayerTypes(m, cfg, 2)
}

// finalSoftCap writes final_logit_softcapping from the metadata of that name where it is set and not 0 (Gemma 3
// and 4: the logits soft-capped only where it says so), refusing a negative one.
func finalSoftCap(m archMeta, cfg map[string]any) error {
	v, ok, err := m.Float(m.key("final_logit_softcapping"))
	switch {
	case err != nil:
		return err
	case !ok || v == 0:
		return nil
	case !(v > 0):
		return fmt.Errorf("metadata %s is %g: want a positive soft-cap (or 0 for none)", m.key("final_logit_softcapping"), v)
	}
	cfg["final_logit_softcapping"] = float32JSON(v)
	return nil
}

// gemma3Config follows llama.cpp's Gemma 3 (src/models/gemma3.cpp): no attention soft-cap, logits soft-capped only
// where final_logit_softcapping says so, and with a positive attention.sliding_window local layers as
// attention.sliding_window_pattern says (else five local layers, then a global one) whose rotary base is
// rope.freq_base_swa (10000 when absent), unscaled, while the global layers take rope.freq_base and the rope scaling;
// without a sliding window every layer is global.
func gemma3Config(m archMeta, cfg map[string]any) error {
	if err := gemmaConfig(m, cfg, 62); err != nil {
		return err
	}
	cfg["model_type"] = "gemma3_text"
	if err := finalSoftCap(m, cfg); err != nil {
		return err
	}
	if rs, ok := cfg["rope_scaling"].(map[string]any); ok && rs["rope_type"] != "linear" {
		// llama.cpp scales only the global layers' frequencies, but applies YaRN's other corrections to every layer.
		return fmt.Errorf("metadata %s %q is not supported for gemma3 (only linear scaling, of the global layers)", m.key("rope.scaling.type"), rs["rope_type"])
	}
	window, _, err := m.Int(m.key("attention.sliding_window"))
	if err != nil {
		return err
	}
	if window == 0 {
		if _, ok := m.Get(m.key("attention.sliding_window_pattern")); ok {
			return fmt.Errorf("metadata %s is set without a sliding window (%s): llama.cpp ignores it, every layer is global; refusing the contradiction", m.key("attention.sliding_window_pattern"), m.key("attention.sliding_window"))
		}
		types := make([]string, cfg["num_hidden_layers"].(int))
		for i := range types {
			types[i] = "full_attention"
		}
		cfg["layer_types"], cfg["sliding_window"] = types, nil
		return nil
	}
	local := 10000.0 // llama.cpp's default rope_freq_base_train_swa
	if v, ok, err := m.Float(m.key("rope.freq_base_swa")); err != nil {
		return err
	} else if ok {
		local = v
	}
	if !(local > 0) {
		return fmt.Errorf("metadata %s is %g: want a positive rotary base", m.key("rope.freq_base_swa"), local)
	}
	cfg["rope_local_base_freq"] = float32JSON(local)
	cfg["sliding_window"] = window
	return slidingLayerTypes(m, cfg, 6)
}

// gemmaConfig is what both share: the activation, the float32 embedding scale and the attention scale.
//
// llama.cpp does not read Hugging Face's query_pre_attn_scalar (the converter does not write it): it scales the
// queries by 1/√head_dim, but for the 27B models (told apart by their layer count, bigLayers) by
// 1/√(hidden_size/heads), as Google's reference implementation hard-codes per model. Released Gemma 2 and 3
// checkpoints agree with that; a file made from one that does not (the tiny test fixtures) means what llama.cpp
// computes.
func gemmaConfig(m archMeta, cfg map[string]any, bigLayers int) error {
	if n := cfg["num_hidden_layers"].(int); n > maxLayers {
		return fmt.Errorf("metadata %s is %d: llama.cpp loads at most %d layers", m.key("block_count"), n, maxLayers)
	}
	delete(cfg, "hidden_act")
	cfg["hidden_activation"] = "gelu_pytorch_tanh" // ggml_gelu is the tanh approximation
	cfg["dtype"] = "float32"
	scalar := cfg["head_dim"].(int)
	if cfg["num_hidden_layers"].(int) == bigLayers {
		scalar = cfg["hidden_size"].(int) / cfg["num_attention_heads"].(int)
	}
	cfg["query_pre_attn_scalar"] = scalar
	return nil
}

// maxLayers is llama.cpp's LLAMA_MAX_LAYERS (src/llama-hparams.h).
const maxLayers = 512

// slidingLayerTypes writes layer_types as llama.cpp's load_swa_pattern decides them: from
// attention.sliding_window_pattern, an array of one bool per layer (true: local) or a period n (layer i is local
// unless i%n == n-1; 0: every layer local), else from the architecture's default period.
func slidingLayerTypes(m archMeta, cfg map[string]any, period int) error {
	n := cfg["num_hidden_layers"].(int)
	key := m.key("attention.sliding_window_pattern")
	local := make([]bool, n)
	for i := range local {
		local[i] = period == 0 || i%period < period-1
	}
	if v, ok := m.Get(key); ok {
		if flags, isArray := v.V.([]bool); isArray {
			if len(flags) != n {
				return fmt.Errorf("metadata %s has %d entries for %d layers", key, len(flags), n)
			}
			copy(local, flags)
		} else {
			p, _, err := m.Int(key)
			if err != nil {
				return err
			}
			for i := range local {
				local[i] = p == 0 || i%p < p-1
			}
		}
	}
	types := make([]string, n)
	for i, l := range local {
		types[i] = "full_attention"
		if l {
			types[i] = "sliding_attention"
		}
	}
	cfg["layer_types"] = types
	return nil
}

// positiveFloat reads "<arch>.k", def when absent, refusing a value that is not positive.
func positiveFloat(m archMeta, k string, def float64) (json.Number, error) {
	v, ok, err := m.Float(m.key(k))
	if err != nil {
		return "", err
	}
	if !ok {
		v = def
	}
	if !(v > 0) {
		return "", fmt.Errorf("metadata %s is %g: want a positive soft-cap", m.key(k), v)
	}
	return float32JSON(v), nil
}
