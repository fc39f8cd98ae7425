package checkpoint

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// llamaConfig is a Llama config.json as transformers 5 writes it (tiny shape), with extra keys merged in and
// keys mapped to nil deleted.
func llamaConfig(t *testing.T, edit map[string]any) []byte {
	t.Helper()
	cfg := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "attention_bias": false,
		"attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "dtype": "float32", "head_dim": 16,
		"hidden_act": "silu", "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 128,
		"max_position_embeddings": 256, "mlp_bias": false, "num_attention_heads": 4, "num_hidden_layers": 2,
		"num_key_value_heads": 2, "pad_token_id": 0, "pretraining_tp": 1, "rms_norm_eps": 1e-6,
		"rope_parameters":     map[string]any{"rope_theta": 100000.0, "rope_type": "default"},
		"tie_word_embeddings": false, "transformers_version": "5.23.0", "use_cache": true, "vocab_size": 256,
	}
	for k, v := range edit {
		if v == nil {
			delete(cfg, k)
		} else {
			cfg[k] = v
		}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// v4 turns a transformers-5 spelling edit into transformers 4's: top-level rope_theta and rope_scaling (rope
// parameters other than the theta), torch_dtype.
func v4(rope map[string]any) map[string]any {
	scaling := maps.Clone(rope)
	delete(scaling, "rope_theta")
	e := map[string]any{"rope_parameters": nil, "dtype": nil, "torch_dtype": "float32", "rope_theta": rope["rope_theta"]}
	if len(scaling) > 0 && scaling["rope_type"] != "default" {
		e["rope_scaling"] = scaling
	}
	return e
}

// TestBothSpellings: transformers 4 and 5 write the same model differently (the fixtures' config.v4.json and
// config.json); both read to the same Config. Issue 13 case 1: theta 100000 in the transformers-5 spelling
// (SmolLM2's) was read as 10000, and rope scaling dropped silently.
func TestBothSpellings(t *testing.T) {
	for _, rope := range []map[string]any{
		{"rope_theta": 100000.0, "rope_type": "default"},
		{"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
		{"rope_theta": 100000.0, "rope_type": "linear", "factor": 4.0},
		{"rope_theta": 100000.0, "rope_type": "dynamic", "factor": 2.0},
		{"rope_theta": 100000.0, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 32.0, "beta_slow": 1.0},
	} {
		c5, err := ParseConfig(llamaConfig(t, map[string]any{"rope_parameters": rope}))
		if err != nil {
			t.Fatalf("%v: transformers 5 spelling: %v", rope, err)
		}
		c4, err := ParseConfig(llamaConfig(t, v4(rope)))
		if err != nil {
			t.Fatalf("%v: transformers 4 spelling: %v", rope, err)
		}
		if c5.Rope.Theta != rope["rope_theta"] || c5.Rope.Type != rope["rope_type"] {
			t.Errorf("%v: read %+v", rope, c5.Rope)
		}
		if f, ok := rope["factor"]; ok && c5.Rope.Factor != f {
			t.Errorf("%v: factor %g", rope, c5.Rope.Factor)
		}
		if c5.TorchDType != "float32" || c4.TorchDType != "float32" {
			t.Errorf("dtype %q / torch_dtype %q, want float32", c5.TorchDType, c4.TorchDType)
		}
		if !reflect.DeepEqual(c4, c5) {
			t.Errorf("%v: the spellings read differently:\n%+v\n%+v", rope, c4, c5)
		}
	}
	// The older "type" key of rope_scaling, and "su" for longrope as Phi-3 wrote it.
	c, err := ParseConfig(llamaConfig(t, map[string]any{"rope_parameters": nil, "rope_theta": 10000.0, "rope_scaling": map[string]any{"type": "linear", "factor": 2.0}}))
	if err != nil || c.Rope.Type != "linear" || c.Rope.Factor != 2 {
		t.Fatalf("type linear: %+v %v", c, err)
	}
	// llama3 takes original_max_position_embeddings from the top level first, as transformers does.
	c, err = ParseConfig(llamaConfig(t, map[string]any{"original_max_position_embeddings": 8192, "rope_parameters": map[string]any{
		"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}))
	if err != nil || c.Rope.OriginalMaxPositionEmbeddings != 8192 {
		t.Fatalf("top-level original_max_position_embeddings: %+v %v", c.Rope, err)
	}
	// Only Phi-3's config class has a top-level original_max_position_embeddings by default: an OLMo 2 config
	// without one takes the rope dict's.
	c, err = ParseConfig(llamaConfig(t, map[string]any{"architectures": []string{"Olmo2ForCausalLM"}, "model_type": "olmo2",
		"mlp_bias": nil, "pretraining_tp": nil, "head_dim": nil, "rope_parameters": map[string]any{
			"rope_theta": 500000.0, "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}}))
	if err != nil || c.Rope.OriginalMaxPositionEmbeddings != 64 {
		t.Fatalf("OLMo 2 yarn original_max_position_embeddings: %+v %v", c.Rope, err)
	}
}

// TestConfigRefusals: every key is implemented, harmless, or refused by name with its value (issue 13); the
// smaller cases of issue 13 point 8 get errors naming the field.
func TestConfigRefusals(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit map[string]any
		want []string
	}{
		{"unknown key", map[string]any{"attn_logit_softcapping": 50.0}, []string{"attn_logit_softcapping (value 50)", "LlamaForCausalLM", IgnoreKeysEnv}},
		{"another family's key", map[string]any{"use_sliding_window": true}, []string{"use_sliding_window (value true)"}},
		{"interleaved rope", map[string]any{"rope_interleaved": true}, []string{"rope_interleaved (value true)"}},
		{"quantized", map[string]any{"quantization_config": map[string]any{"quant_method": "gptq"}}, []string{"quantization_config", "gptq"}},
		{"rope type", map[string]any{"rope_parameters": map[string]any{"rope_type": "mrope", "rope_theta": 1e4}}, []string{`rope type "mrope"`}},
		{"rope key", map[string]any{"rope_parameters": map[string]any{"rope_type": "linear", "factor": 2.0, "beta_fast": 3.0}}, []string{"beta_fast (value 3)", `"linear"`}},
		{"rope factor", map[string]any{"rope_parameters": map[string]any{"rope_type": "llama3", "factor": 8.0, "rope_theta": 1e4}}, []string{"llama3", "low_freq_factor"}},
		{"both spellings", map[string]any{"rope_scaling": map[string]any{"rope_type": "linear", "factor": 2.0}}, []string{"rope_parameters", "rope_scaling"}},
		{"thetas disagree", map[string]any{"rope_theta": 10000.0}, []string{"rope_theta 10000", "100000"}},
		{"dtypes disagree", map[string]any{"torch_dtype": "bfloat16"}, []string{`dtype "float32"`, `torch_dtype "bfloat16"`}},
		{"integer dtype", map[string]any{"dtype": "int8"}, []string{`dtype "int8"`, "float32, bfloat16 or float16"}},
		{"unknown torch_dtype", map[string]any{"dtype": nil, "torch_dtype": "float8"}, []string{`torch_dtype "float8"`, "float32, bfloat16 or float16"}},
		{"model_type", map[string]any{"model_type": "gemma2"}, []string{`model_type "gemma2"`, "LlamaForCausalLM"}},
		// issue 13 point 8
		{"eps zero", map[string]any{"rms_norm_eps": 0.0}, []string{"rms_norm_eps must be a positive number, got 0"}},
		{"eps negative", map[string]any{"rms_norm_eps": -1e-6}, []string{"rms_norm_eps must be a positive number"}},
		{"context zero", map[string]any{"max_position_embeddings": 0}, []string{"max_position_embeddings must be positive, got 0"}},
		{"context missing", map[string]any{"max_position_embeddings": nil}, []string{"missing field max_position_embeddings"}},
		{"field missing", map[string]any{"hidden_size": nil}, []string{"missing field hidden_size"}},
		{"heads do not divide", map[string]any{"head_dim": nil, "num_attention_heads": 5, "num_key_value_heads": 5}, []string{"hidden_size (64) is not a multiple of num_attention_heads (5)"}},
		{"kv heads", map[string]any{"num_key_value_heads": 3}, []string{"num_attention_heads (4) must be a multiple of num_key_value_heads (3)"}},
		{"architecture", map[string]any{"architectures": []string{"GPT2LMHeadModel"}}, []string{`"GPT2LMHeadModel"`, "LlamaForCausalLM"}},
	} {
		_, err := ParseConfig(llamaConfig(t, tc.edit))
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: got %v, want an error containing %q", tc.name, err, w)
				break
			}
		}
	}
	// torch's other spellings of the three float dtypes name them.
	for spelling, want := range map[string]string{"torch.bfloat16": "bfloat16", "half": "float16", "float": "float32", "Float32": "float32"} {
		c, err := ParseConfig(llamaConfig(t, map[string]any{"dtype": spelling}))
		if err != nil || c.TorchDType != want {
			t.Errorf("dtype %q: got %q, %v; want %q", spelling, c.TorchDType, err, want)
		}
	}
	// Keys known not to change the computation (SmolLM2's, as transformers 5 saved it from the GGUF).
	if _, err := ParseConfig(llamaConfig(t, map[string]any{"_model_name_or_path": "Smollm2 135M", "unk_token_id": 0, "rope_interleaved": false, "is_llama_config": true})); err != nil {
		t.Errorf("harmless keys: %v", err)
	}
	// The escape hatch: a key the user has checked is skipped (with a warning).
	t.Setenv(IgnoreKeysEnv, "my_note, other")
	if _, err := ParseConfig(llamaConfig(t, map[string]any{"my_note": "hi"})); err != nil {
		t.Errorf("%s did not skip the key: %v", IgnoreKeysEnv, err)
	}
}

// TestFamilyDefaults: absent keys take the value of the family's transformers config class.
func TestFamilyDefaults(t *testing.T) {
	base := map[string]any{"architectures": []string{"MistralForCausalLM"}, "model_type": nil, "attention_bias": nil, "mlp_bias": nil,
		"pretraining_tp": nil, "head_dim": nil}
	c, err := ParseConfig(llamaConfig(t, base))
	if err != nil || c.SlidingWindow == nil || *c.SlidingWindow != 4096 || c.ModelType != "mistral" || c.HeadDim != 16 {
		t.Fatalf("Mistral without sliding_window: %+v %v, want 4096 (MistralConfig's default)", c, err)
	}
	base["sliding_window"] = json.RawMessage("null")
	if c, err = ParseConfig(llamaConfig(t, base)); err != nil || c.SlidingWindow != nil {
		t.Fatalf("Mistral with sliding_window null: %v %v", c.SlidingWindow, err)
	}
	c, err = ParseConfig(llamaConfig(t, map[string]any{"architectures": []string{"Qwen3ForCausalLM"}, "model_type": "qwen3", "head_dim": nil, "mlp_bias": nil, "pretraining_tp": nil}))
	if err != nil || c.HeadDim != 128 || c.MaxWindowLayers != 28 {
		t.Fatalf("Qwen3 without head_dim: %+v %v, want head_dim 128", c, err)
	}
	c, err = ParseConfig(llamaConfig(t, map[string]any{"architectures": []string{"SmolLM3ForCausalLM"}, "model_type": "smollm3",
		"rope_parameters": nil, "tie_word_embeddings": nil, "pretraining_tp": nil}))
	if err != nil || c.Rope.Theta != 2e6 || !c.TieWordEmbeddings || c.NoRopeLayerInterval != 4 {
		t.Fatalf("SmolLM3 defaults: %+v %v", c, err)
	}
	c, err = ParseConfig(llamaConfig(t, map[string]any{"architectures": []string{"Olmo2ForCausalLM"}, "model_type": "olmo2", "rms_norm_eps": nil,
		"mlp_bias": nil, "pretraining_tp": nil}))
	if err != nil || c.RMSNormEps != 1e-5 {
		t.Fatalf("OLMo 2 rms_norm_eps default: %v %v", c.RMSNormEps, err)
	}
}

// TestTextConfig: a model keeping its decoder in text_config is read from there; the wrapper's other keys
// are checked like any other.
func TestTextConfig(t *testing.T) {
	var inner map[string]any
	if err := json.Unmarshal(llamaConfig(t, map[string]any{"architectures": nil, "dtype": nil}), &inner); err != nil {
		t.Fatal(err)
	}
	wrapped := map[string]any{"architectures": []string{"LlamaForCausalLM"}, "text_config": inner, "dtype": "bfloat16", "transformers_version": "5.23.0"}
	b, _ := json.Marshal(wrapped)
	c, err := ParseConfig(b)
	if err != nil || c.HiddenSize != 64 || c.Rope.Theta != 100000 || c.TorchDType != "bfloat16" {
		t.Fatalf("text_config: %+v %v", c, err)
	}
	wrapped["vision_config"] = map[string]any{"hidden_size": 32}
	b, _ = json.Marshal(wrapped)
	if _, err := ParseConfig(b); err == nil || !strings.Contains(err.Error(), "vision_config") {
		t.Fatalf("a wrapper key the family does not know: %v", err)
	}
}

// FuzzParseConfig: any bytes give a Config or an error, never a panic.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"max_position_embeddings":8,"rope_parameters":{"rope_type":"yarn","factor":2,"rope_theta":1e4}}`))
	f.Add([]byte(`{"architectures":["Qwen2ForCausalLM"],"text_config":{"hidden_size":8,"layer_types":["sliding_attention"],"rope_parameters":{"sliding_attention":{"rope_type":"default"}}}}`))
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"rope_scaling":{"type":"su","short_factor":[1],"long_factor":[2]},"rope_theta":-1}`))
	f.Add([]byte(`{"architectures":["Mistral3ForConditionalGeneration"],"model_type":"mistral3","tie_word_embeddings":false,"spatial_merge_size":2,"text_config":{"model_type":"mistral","hidden_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":4,"max_position_embeddings":8,"tie_word_embeddings":true}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err == nil && (c.HiddenSize <= 0 || c.HeadDim <= 0 || !(c.RMSNormEps > 0) || (c.RopeByLayerType == nil && !(c.Rope.Theta > 0))) {
			t.Fatalf("accepted an invalid config: %+v", c)
		}
	})
}

// TestGemmaPhiConfigs: Gemma 2, Gemma 3 and Phi-3 configs in both spellings, with transformers' defaults for
// absent keys.
func TestGemmaPhiConfigs(t *testing.T) {
	gemma3 := func(edit map[string]any) *Config {
		t.Helper()
		e := map[string]any{"architectures": []string{"Gemma3ForCausalLM"}, "model_type": "gemma3_text", "mlp_bias": nil,
			"pretraining_tp": nil, "hidden_act": nil, "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 8, "tie_word_embeddings": nil,
			"layer_types": []string{"sliding_attention", "full_attention"}, "_sliding_window_pattern": 6}
		maps.Copy(e, edit)
		c, err := ParseConfig(llamaConfig(t, e))
		if err != nil {
			t.Fatalf("%v: %v", edit, err)
		}
		return c
	}
	// transformers 5: rope_parameters by layer type; transformers 4: the global layers' rope_theta and
	// rope_scaling, and rope_local_base_freq.
	c5 := gemma3(map[string]any{"rope_parameters": map[string]any{
		"full_attention":    map[string]any{"rope_type": "linear", "factor": 8.0, "rope_theta": 500000.0},
		"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 20000.0}}})
	if g, l := c5.RopeByLayerType["full_attention"], c5.RopeByLayerType["sliding_attention"]; g.Type != "linear" || g.Factor != 8 || g.Theta != 5e5 || l.Type != "default" || l.Theta != 2e4 || !reflect.DeepEqual(c5.Rope, g) {
		t.Errorf("transformers 5 Gemma 3 rope: %+v", c5.RopeByLayerType)
	}
	c4 := gemma3(map[string]any{"rope_parameters": nil, "rope_theta": 500000.0, "rope_local_base_freq": 20000.0,
		"rope_scaling": map[string]any{"rope_type": "linear", "factor": 8.0}})
	if c4.RopeByLayerType != nil || c4.Rope.Type != "linear" || c4.Rope.Theta != 5e5 || *c4.RopeLocalBaseFreq != 2e4 {
		t.Errorf("transformers 4 Gemma 3 rope: %+v local %v", c4.Rope, c4.RopeLocalBaseFreq)
	}
	// Entries named by layer type are nested even when layer_types lacks one (every layer local), and a local
	// entry without rope_theta takes Gemma 3's local default.
	c := gemma3(map[string]any{"layer_types": []string{"sliding_attention", "sliding_attention"}, "rope_parameters": map[string]any{
		"full_attention": map[string]any{"rope_type": "default"}, "sliding_attention": map[string]any{"rope_type": "default"}}})
	if c.RopeByLayerType["sliding_attention"].Theta != 1e4 || c.RopeByLayerType["full_attention"].Theta != 1e6 {
		t.Errorf("Gemma 3 default thetas: %+v", c.RopeByLayerType)
	}
	if c.QueryPreAttnScalar != 256 || !c.TieWordEmbeddings || c.AttnLogitSoftcapping != nil || c.FinalLogitSoftcapping != nil {
		t.Errorf("Gemma 3 defaults: %+v", c)
	}
	c, err := ParseConfig(llamaConfig(t, map[string]any{"architectures": []string{"Gemma2ForCausalLM"}, "model_type": "gemma2",
		"mlp_bias": nil, "pretraining_tp": nil, "head_dim": nil, "tie_word_embeddings": nil, "final_logit_softcapping": json.RawMessage("null")}))
	if err != nil || c.HeadDim != 256 || c.QueryPreAttnScalar != 256 || *c.AttnLogitSoftcapping != 50 || c.FinalLogitSoftcapping != nil ||
		!c.TieWordEmbeddings || c.HiddenActivation != "gelu_pytorch_tanh" || *c.SlidingWindow != 4096 {
		t.Fatalf("Gemma 2 defaults (a null soft-cap stays null): %+v %v", c, err)
	}
	// Phi-3: "su" is longrope; original_max_position_embeddings defaults to Phi3Config's 4096 and wins over the
	// rope dict's; rms_norm_eps 1e-5.
	c, err = ParseConfig(llamaConfig(t, map[string]any{"architectures": []string{"Phi3ForCausalLM"}, "model_type": "phi3",
		"mlp_bias": nil, "pretraining_tp": nil, "attention_bias": nil, "rms_norm_eps": nil, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
		"partial_rotary_factor": 0.75, "max_position_embeddings": 131072, "rope_parameters": nil, "rope_theta": 10000.0,
		"rope_scaling": map[string]any{"type": "su", "short_factor": []float64{1, 2}, "long_factor": []float64{3, 4}}}))
	if err != nil || c.Rope.Type != "longrope" || c.Rope.OriginalMaxPositionEmbeddings != 4096 || c.Rope.PartialRotaryFactor != 0.75 || c.RMSNormEps != 1e-5 {
		t.Fatalf("Phi-3 su rope: %+v %v", c.Rope, err)
	}
}

// TestGemma3VisionLanguageConfig: Gemma 3 4B's config.json (Gemma3ForConditionalGeneration, transformers 4.50)
// gives in text_config only what differs from Gemma3TextConfig's defaults; the wrapper's image keys are read
// and unused (text in, text out).
func TestGemma3VisionLanguageConfig(t *testing.T) {
	b := []byte(`{"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
		"eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
		"model_type": "gemma3", "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
		"num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
		"torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
		"vision_config": {"hidden_size": 1152, "image_size": 896, "model_type": "siglip_vision_model"}}`)
	c, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if c.HiddenSize != 2560 || c.NumAttentionHeads != 8 || c.NumKeyValueHeads != 4 || c.HeadDim != 256 || c.VocabSize != 262208 ||
		c.MaxPositionEmbeddings != 131072 || c.Rope.Type != "linear" || c.Rope.Theta != 1e6 || *c.SlidingWindow != 1024 ||
		c.TorchDType != "bfloat16" || !c.TieWordEmbeddings || c.ModelType != "gemma3_text" {
		t.Errorf("Gemma 3 4B: %+v", c)
	}
	// Families without such defaults still need the shape.
	if _, err := ParseConfig(llamaConfig(t, map[string]any{"vocab_size": nil})); err == nil || !strings.Contains(err.Error(), "missing field vocab_size") {
		t.Errorf("Llama without vocab_size: %v", err)
	}
}

// TestPhi4MiniConfig: Phi-4-mini-instruct's config.json carries switches for its own modeling code; at the values
// it has they leave transformers' Phi3ForCausalLM, and other values are refused.
func TestPhi4MiniConfig(t *testing.T) {
	cfg := func(edit string) []byte {
		return []byte(`{"architectures": ["Phi3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
			"auto_map": {"AutoConfig": "configuration_phi3.Phi3Config"}, "bos_token_id": 199999, "embd_pdrop": 0.0,
			"eos_token_id": 199999, "full_attn_mod": 1, "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
			"intermediate_size": 8192, "interpolate_factor": 1, "lm_head_bias": false, "max_position_embeddings": 131072,
			"mlp_bias": false, "model_type": "phi3", "num_attention_heads": 24, "num_hidden_layers": 32,
			"num_key_value_heads": 8, "original_max_position_embeddings": 4096, "pad_token_id": 199999,
			"partial_rotary_factor": 0.75, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
			"rope_scaling": {"long_factor": [1, 2], "short_factor": [1, 1], "type": "longrope"}, "rope_theta": 10000.0,
			"sliding_window": 262144, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.45.0",
			"use_cache": true, "vocab_size": 200064` + edit + `}`)
	}
	c, err := ParseConfig(cfg(""))
	if err != nil || c.Rope.Type != "longrope" || c.Rope.PartialRotaryFactor != 0.75 || c.HeadDim != 128 {
		t.Fatalf("Phi-4-mini: %+v %v", c, err)
	}
	for _, edit := range []string{`, "lm_head_bias": true`, `, "full_attn_mod": 2`, `, "mlp_bias": true`} {
		b := cfg(edit)
		if _, err := ParseConfig(b); err == nil {
			t.Errorf("%s: accepted", edit)
		}
	}
}

// TestGenerationConfigValues: a sampling value no sampler accepts is refused when generation_config.json is
// read, naming the file and the field (it surfaced as an error in the user's request, which set none).
func TestGenerationConfigValues(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"do_sample": true, "temperature": 0.6, "top_k": 50, "top_p": 0.9, "repetition_penalty": 1.1}`, ""},
		{`{"temperature": 0, "top_p": 1, "top_k": 0}`, ""},
		{`{"do_sample": true, "temperature": -3}`, "temperature -3"},
		{`{"top_p": 5}`, "top_p 5"},
		{`{"top_k": -1}`, "top_k -1"},
		{`{"repetition_penalty": -0.5}`, "repetition_penalty -0.5"},
	} {
		path := filepath.Join(t.TempDir(), "generation_config.json")
		if err := os.WriteFile(path, []byte(c.json), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadGenerationConfig(path)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.json, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error naming %s and %q", c.json, err, path, c.want)
		}
	}
}

// TestNewestDenseConfigs: Ministral 3's rope dict carries llama_4_scaling_beta (read) and max_position_embeddings
// (accepted, unused), which other families' rope dicts refuse; OLMo 3's rope_parameters by layer type default
// a missing theta to 500000.
func TestNewestDenseConfigs(t *testing.T) {
	rope := map[string]any{"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 16,
		"max_position_embeddings": 64, "llama_4_scaling_beta": 0.1}
	c, err := ParseConfig(llamaConfig(t, map[string]any{"architectures": []string{"Ministral3ForCausalLM"}, "model_type": "ministral3",
		"attention_bias": nil, "mlp_bias": nil, "pretraining_tp": nil, "rope_parameters": rope}))
	if err != nil {
		t.Fatal(err)
	}
	if b := c.Rope.Llama4ScalingBeta; b == nil || *b != 0.1 || c.Rope.OriginalMaxPositionEmbeddings != 16 {
		t.Errorf("ministral3 rope %+v", c.Rope)
	}
	if _, err := ParseConfig(llamaConfig(t, map[string]any{"rope_parameters": rope})); err == nil || !strings.Contains(err.Error(), "llama_4_scaling_beta") {
		t.Errorf("llama with llama_4_scaling_beta: got %v", err)
	}
	c, err = ParseConfig(llamaConfig(t, map[string]any{"architectures": []string{"Olmo3ForCausalLM"}, "model_type": "olmo3",
		"mlp_bias": nil, "pretraining_tp": nil, "layer_types": []string{"sliding_attention", "full_attention"}, "sliding_window": 8,
		"rope_parameters": map[string]any{"full_attention": map[string]any{"rope_type": "default"}, "sliding_attention": map[string]any{"rope_type": "default"}}}))
	if err != nil {
		t.Fatal(err)
	}
	if f, s := c.RopeByLayerType["full_attention"].Theta, c.RopeByLayerType["sliding_attention"].Theta; f != 500000 || s != 500000 {
		t.Errorf("olmo3 default thetas %g, %g, want 500000", f, s)
	}
}

// TestMoEConfigs: the mixtures of experts read the expert count in either spelling (num_experts,
// num_local_experts: transformers 4 and 5 save Qwen3-MoE's differently), refuse two that disagree, accept the
// training-only router keys, read Qwen2-MoE's sliding_window 0 as none, and refuse keys they do not implement by
// name.
func TestMoEConfigs(t *testing.T) {
	moe := func(arch, modelType string, edit map[string]any) []byte {
		e := map[string]any{"architectures": []string{arch}, "model_type": modelType, "attention_bias": nil,
			"mlp_bias": nil, "pretraining_tp": nil, "num_experts_per_tok": 2,
			"output_router_logits": false, "router_aux_loss_coef": 0.001}
		maps.Copy(e, edit)
		return llamaConfig(t, e)
	}
	for _, key := range []string{"num_experts", "num_local_experts"} {
		c, err := ParseConfig(moe("Qwen3MoeForCausalLM", "qwen3_moe", map[string]any{key: 8}))
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if c.NumExperts != 8 || c.NumExpertsPerTok != 2 || c.MoEIntermediateSize != 768 || c.DecoderSparseStep != 1 {
			t.Errorf("%s: experts %d, per token %d, moe_intermediate_size %d, decoder_sparse_step %d", key, c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize, c.DecoderSparseStep)
		}
	}
	if _, err := ParseConfig(moe("Qwen3MoeForCausalLM", "qwen3_moe", map[string]any{"num_experts": 8, "num_local_experts": 4})); err == nil || !strings.Contains(err.Error(), "disagree") {
		t.Errorf("num_experts 8, num_local_experts 4: got %v", err)
	}
	c, err := ParseConfig(moe("Qwen2MoeForCausalLM", "qwen2_moe", map[string]any{"num_experts": 4, "sliding_window": 0, "use_sliding_window": false}))
	if err != nil || c.SlidingWindow != nil || !c.QKVBias || c.SharedExpertIntermediateSize != 5632 {
		t.Errorf("qwen2_moe sliding_window 0: %v, %+v", err, c)
	}
	c, err = ParseConfig(moe("MixtralForCausalLM", "mixtral", map[string]any{"num_local_experts": 8, "router_jitter_noise": 0.1}))
	if err != nil || c.SlidingWindow != nil || c.RMSNormEps != 1e-6 {
		t.Errorf("mixtral: %v, %+v", err, c)
	}
	for arch, key := range map[string]string{"MixtralForCausalLM/mixtral": "n_shared_experts", "OlmoeForCausalLM/olmoe": "routed_scaling_factor",
		"Qwen3MoeForCausalLM/qwen3_moe": "shared_expert_intermediate_size", "Qwen2MoeForCausalLM/qwen2_moe": "first_k_dense_replace"} {
		name, mt, _ := strings.Cut(arch, "/")
		_, err := ParseConfig(moe(name, mt, map[string]any{"num_experts": 8, key: 1}))
		if err == nil || !strings.Contains(err.Error(), "does not implement key "+key) {
			t.Errorf("%s with %s: got %v, want it refused by name", name, key, err)
		}
	}
}

// TestGptOssConfig: GptOssConfig's defaults, the yarn rope it gives a config.json without rope_parameters or
// rope_scaling (either spelling replaces it), and OpenAI's own keys of the released config.json.
func TestGptOssConfig(t *testing.T) {
	gptOss := func(edit map[string]any) []byte {
		e := map[string]any{"architectures": []string{"GptOssForCausalLM"}, "model_type": "gpt_oss", "mlp_bias": nil, "attention_bias": nil,
			"pretraining_tp": nil, "num_local_experts": 4, "rope_parameters": nil, "rms_norm_eps": nil, "head_dim": nil,
			"experts_per_token": 4, "initial_context_length": 4096}
		maps.Copy(e, edit)
		return llamaConfig(t, e)
	}
	c, err := ParseConfig(gptOss(nil))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Rope
	if r.Type != "yarn" || r.Factor != 32 || r.OriginalMaxPositionEmbeddings != 4096 || r.Theta != 150000 || r.Truncate == nil || *r.Truncate {
		t.Errorf("no rope given: %+v, want GptOssConfig's yarn (factor 32, original 4096, theta 150000, truncate false)", r)
	}
	if c.SwigluAlpha != 1.702 || c.SwigluLimit != 7 || c.NumExpertsPerTok != 4 || c.RMSNormEps != 1e-5 || c.HeadDim != 64 || !c.AttentionBias ||
		c.SlidingWindow == nil || *c.SlidingWindow != 128 || c.ExpertsPerToken != 4 {
		t.Errorf("defaults: %+v", c)
	}
	for _, edit := range []map[string]any{
		{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 10000.0}},
		{"rope_scaling": map[string]any{"rope_type": "default"}, "rope_theta": 10000.0},
	} {
		c, err := ParseConfig(gptOss(edit))
		if err != nil || c.Rope.Type != "default" || c.Rope.Theta != 10000 {
			t.Errorf("%v: %v, %+v: want the config's rope", edit, err, c.Rope)
		}
	}
	// The released checkpoints' quantization_config: MXFP4 experts (the tensors say which), nothing else.
	released := map[string]any{"quant_method": "mxfp4", "modules_to_not_convert": []string{"model.layers.*.self_attn", "lm_head"}}
	if _, err := ParseConfig(gptOss(map[string]any{"quantization_config": released})); err != nil {
		t.Errorf("quantization_config mxfp4: %v", err)
	}
	for _, q := range []map[string]any{{"quant_method": "gptq"}, {"quant_method": "mxfp4", "group_size": 32}} {
		if _, err := ParseConfig(gptOss(map[string]any{"quantization_config": q})); err == nil {
			t.Errorf("quantization_config %v: accepted", q)
		}
	}
	if _, err := ParseConfig(llamaConfig(t, map[string]any{"quantization_config": released})); err == nil {
		t.Error("Llama with quantization_config mxfp4: accepted")
	}
}
