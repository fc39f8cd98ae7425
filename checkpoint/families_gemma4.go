package checkpoint

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Gemma 4 (issue #35): its registrations and config keys live here, apart from families.go, so that families
// added beside them touch different lines.
func init() {
	// Gemma4TextConfig's defaults (transformers 5.24; no transformers 4 class). global_head_dim and
	// num_global_key_value_heads are the constructor's arguments that become per_layer_config when a config has
	// none (Gemma4Config.per_layer_config below).
	text := Architecture{Name: "Gemma4ForCausalLM", ModelType: "gemma4_text",
		Keys: []string{"attention_bias", "hidden_activation", "final_logit_softcapping", "sliding_window", "layer_types",
			"use_bidirectional_attention", "vocab_size_per_layer_input", "hidden_size_per_layer_input", "attention_k_eq_v",
			"num_kv_shared_layers", "enable_moe_block", "use_double_wide_mlp", "num_experts", "top_k_experts",
			"moe_intermediate_size", "per_layer_config", "global_head_dim", "num_global_key_value_heads"},
		Defaults: map[string]any{"vocab_size": 262144, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 30,
			"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072,
			"hidden_activation": "gelu_pytorch_tanh", "sliding_window": 512, "tie_word_embeddings": true,
			"vocab_size_per_layer_input": 262144, "hidden_size_per_layer_input": 256,
			"rope_parameters": map[string]any{
				"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 10000.0},
				"full_attention":    map[string]any{"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
			}},
		// The experts beside each layer's MLP (enable_moe_block), saved fused and output-major, gate rows first.
		FusedExperts: []FusedExperts{{Name: "experts.gate_up_proj", Expert: "experts.%d.gate_up_proj.weight"},
			{Name: "experts.down_proj", Expert: "experts.%d.down_proj.weight"}}}
	RegisterArchitecture(text)
	// Gemma 4's vision-language (and audio) checkpoints: the text decoder of Gemma4ForConditionalGeneration, its
	// towers and embedders left out. Its text-only forward maps the image, video and audio token ids to the pad
	// token (Gemma4Model.forward), which the engine refuses instead (engine/model/gemma4.go).
	vl := visionLanguage(text, "Gemma4ForConditionalGeneration", "gemma4",
		"vision_config", "audio_config", "boi_token_id", "eoi_token_id", "image_token_id", "video_token_id",
		"boa_token_id", "eoa_token_index", "audio_token_id")
	vl.SkippedTensorPrefixes = append(vl.SkippedTensorPrefixes, "audio_tower.", "embed_vision.", "embed_audio.",
		"model.audio_tower.", "model.embed_vision.", "model.embed_audio.")
	vl.Defaults = maps.Clone(text.Defaults) // Gemma4Config's token ids
	vl.Defaults["image_token_id"], vl.Defaults["video_token_id"], vl.Defaults["audio_token_id"] = 258880, 258884, 258881
	RegisterArchitecture(vl)
}

// Gemma4 are Gemma 4's config keys (Gemma4TextConfig).
type Gemma4 struct {
	// Per-layer embeddings: each layer takes an input of HiddenSizePerLayerInput values per token (0: none), from
	// a table of VocabSizePerLayerInput rows.
	VocabSizePerLayerInput  int `json:"vocab_size_per_layer_input"`
	HiddenSizePerLayerInput int `json:"hidden_size_per_layer_input"`
	// AttentionKEqV: the full-attention layers have no v_proj; their values are their keys' projection.
	AttentionKEqV bool `json:"attention_k_eq_v"`
	// NumKVSharedLayers: the last layers compute no keys and values: they attend with an earlier layer's.
	NumKVSharedLayers int `json:"num_kv_shared_layers"`
	// UseDoubleWideMLP: the shared layers' MLPs are 2·intermediate_size wide.
	UseDoubleWideMLP bool `json:"use_double_wide_mlp"`
	// EnableMoEBlock: every layer has experts beside its MLP (TopKExperts of num_experts, moe_intermediate_size).
	EnableMoEBlock bool `json:"enable_moe_block"`
	TopKExperts    int  `json:"top_k_experts"`
	// PerLayerConfig overrides head_dim and num_key_value_heads by layer index; without it, the full-attention
	// layers take GlobalHeadDim (default 512) and, with attention_k_eq_v, NumGlobalKeyValueHeads.
	PerLayerConfig         map[string]map[string]json.RawMessage `json:"per_layer_config"`
	GlobalHeadDim          *int                                  `json:"global_head_dim"`
	NumGlobalKeyValueHeads *int                                  `json:"num_global_key_value_heads"`
	// Gemma4ForConditionalGeneration's image, video and audio placeholder ids, which a text-only forward embeds
	// as the pad token (pad_token_id, Gemma4TextConfig's default 0).
	ImageTokenID *int `json:"image_token_id"`
	VideoTokenID *int `json:"video_token_id"`
	AudioTokenID *int `json:"audio_token_id"`
	PadTokenID   int  `json:"pad_token_id"`
}

// LayerDims are one layer's attention head size and key/value heads.
type LayerDims struct{ HeadDim, KVHeads int }

// Gemma4LayerDims resolves each layer's head_dim and num_key_value_heads as Gemma4TextConfig does: per_layer_config
// where config.json has it (keys are layer indices, values override head_dim and num_key_value_heads; any other
// attribute is refused by name), else the full-attention layers get global_head_dim (512 by default) and, with
// attention_k_eq_v, num_global_key_value_heads when given.
func (c *Config) Gemma4LayerDims() ([]LayerDims, error) {
	dims := make([]LayerDims, c.NumHiddenLayers)
	for i := range dims {
		dims[i] = LayerDims{HeadDim: c.HeadDim, KVHeads: c.NumKeyValueHeads}
	}
	if c.PerLayerConfig == nil {
		global := 512
		if c.GlobalHeadDim != nil {
			global = *c.GlobalHeadDim
		}
		for i, lt := range c.LayerTypes {
			if lt != "full_attention" {
				continue
			}
			dims[i].HeadDim = global
			if c.AttentionKEqV && c.NumGlobalKeyValueHeads != nil {
				dims[i].KVHeads = *c.NumGlobalKeyValueHeads
			}
		}
		return dims, checkDims(dims, c.NumAttentionHeads)
	}
	if c.GlobalHeadDim != nil || c.NumGlobalKeyValueHeads != nil {
		return nil, fmt.Errorf("config: global_head_dim or num_global_key_value_heads beside per_layer_config: transformers reads per_layer_config and ignores them; give one")
	}
	for _, k := range sortedKeys(c.PerLayerConfig) {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i >= c.NumHiddenLayers {
			return nil, fmt.Errorf("config: per_layer_config key %q is not a layer index below num_hidden_layers %d", k, c.NumHiddenLayers)
		}
		for _, attr := range sortedKeys(c.PerLayerConfig[k]) {
			dst := map[string]*int{"head_dim": &dims[i].HeadDim, "num_key_value_heads": &dims[i].KVHeads}[attr]
			if dst == nil {
				return nil, fmt.Errorf("config: per_layer_config.%s.%s is not implemented (head_dim, num_key_value_heads)", k, attr)
			}
			if err := json.Unmarshal(c.PerLayerConfig[k][attr], dst); err != nil {
				return nil, fmt.Errorf("config: per_layer_config.%s.%s: want an integer, got %s", k, attr, short(c.PerLayerConfig[k][attr]))
			}
		}
	}
	return dims, checkDims(dims, c.NumAttentionHeads)
}

// checkDims refuses head sizes and key/value heads that are not positive or do not divide the attention heads.
func checkDims(dims []LayerDims, heads int) error {
	for i, d := range dims {
		if d.HeadDim <= 0 || d.KVHeads <= 0 || heads%d.KVHeads != 0 {
			return fmt.Errorf("config: layer %d: head_dim %d and num_key_value_heads %d (want positive, dividing num_attention_heads %d)", i, d.HeadDim, d.KVHeads, heads)
		}
	}
	return nil
}

// Bidirectional is use_bidirectional_attention: true or false (Gemma 3), or Gemma 4's "all" or "vision" ("true",
// "false" for the booleans).
type Bidirectional string

// UnmarshalJSON accepts a boolean or a string.
func (b *Bidirectional) UnmarshalJSON(raw []byte) error {
	var v bool
	if err := json.Unmarshal(raw, &v); err == nil {
		*b = Bidirectional(strconv.FormatBool(v))
		return nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil || !slices.Contains([]string{"all", "vision"}, s) {
		return fmt.Errorf("use_bidirectional_attention: want true, false, \"all\" or \"vision\", got %s", strings.TrimSpace(string(raw)))
	}
	*b = Bidirectional(s)
	return nil
}

// True reports whether b is set to true (nil: absent or null).
func (b *Bidirectional) True() bool { return b != nil && *b == "true" }
