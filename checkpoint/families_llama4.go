package checkpoint

import (
	"encoding/json"
	"fmt"
	"regexp"
)

// Llama 4 (text): Llama4ForCausalLM, and the text decoder of Llama4ForConditionalGeneration (Scout, Maverick).
// Their registrations live here, apart from families.go, so that families added beside them touch different lines.
func init() {
	llama4 := Architecture{Name: "Llama4ForCausalLM", ModelType: "llama4_text",
		// attention_bias is not among the keys: transformers 4.57's Llama4TextConfig sets it false whatever the
		// config says, 5.x reads it, so only false (harmlessValues) means one model to both.
		Keys: []string{"attention_chunk_size", "attn_scale", "attn_temperature_tuning", "floor_scale",
			"interleave_moe_layer_step", "intermediate_size_mlp", "layer_types", "moe_layers", "no_rope_layer_interval",
			"no_rope_layers", "num_experts_per_tok", "num_local_experts", "use_qk_norm",
			// llm-compressor's switch between fused and per-expert modules in transformers 4.51: the same experts.
			"for_llm_compressor"},
		// Llama4TextConfig's defaults (transformers 5.24, 4.57 alike).
		Defaults: map[string]any{"rms_norm_eps": 1e-5, "head_dim": 128, "intermediate_size_mlp": 16384,
			"num_experts_per_tok": 1, "num_local_experts": 16, "interleave_moe_layer_step": 1, "use_qk_norm": true,
			"no_rope_layer_interval": 4, "attention_chunk_size": 8192, "attn_temperature_tuning": true,
			"floor_scale": 8192, "attn_scale": 0.1},
		DefaultRopeTheta: 500000.0,
		// The routed experts, fused and input-major (y = x·W): gate_up_proj [E, hidden, 2·inter] (gate the first
		// inter columns), down_proj [E, inter, hidden].
		FusedExperts: []FusedExperts{
			{Name: "feed_forward.experts.gate_up_proj", Expert: "feed_forward.experts.%d.gate_up_proj.weight", Transposed: true},
			{Name: "feed_forward.experts.down_proj", Expert: "feed_forward.experts.%d.down_proj.weight", Transposed: true},
		},
		RotaryPairs: true,
	}
	RegisterArchitecture(llama4)
	// Llama 4 Scout and Maverick as published: the text decoder in text_config, its tensors under
	// language_model, a vision model and its projector beside it.
	wrapper := visionLanguage(llama4, "Llama4ForConditionalGeneration", "llama4",
		"vision_config", "boi_token_index", "eoi_token_index", "image_token_index")
	wrapper.SkippedTensorPrefixes = append(wrapper.SkippedTensorPrefixes, "vision_model.", "model.vision_model.")
	RegisterArchitecture(wrapper)
}

// Llama4Text are Llama 4's config keys (Llama4TextConfig); Config.NoRopeLayers, NoRopeLayerInterval, UseQKNorm
// and LayerTypes hold the ones other families share.
type Llama4Text struct {
	// AttentionChunkSize: the chunked layers' queries see only the keys of their own chunk of that many
	// positions; nil when null.
	AttentionChunkSize *int `json:"attention_chunk_size"`
	// AttnTemperatureTuning scales the no-rope layers' queries at position p by
	// 1 + AttnScale·ln(1 + ⌊(p + 1) / FloorScale⌋).
	AttnTemperatureTuning Truthy  `json:"attn_temperature_tuning"`
	FloorScale            int     `json:"floor_scale"`
	AttnScale             float64 `json:"attn_scale"`
	// MoELayers lists the layers with a mixture of experts (nil when absent or null: every
	// InterleaveMoELayerStep-th layer); the others have a dense MLP of IntermediateSizeMLP.
	MoELayers              []int `json:"moe_layers"`
	InterleaveMoELayerStep int   `json:"interleave_moe_layer_step"`
	IntermediateSizeMLP    int   `json:"intermediate_size_mlp"`
}

// qkProjection matches a decoder layer's q or k projection, whose rows hold rotary dimensions.
var qkProjection = regexp.MustCompile(`\blayers\.\d+\.self_attn\.([qk])_proj\.(weight|bias)$`)

// markRotaryPairs marks t, a q or k projection of an architecture whose rotary pairs are adjacent rows
// (Architecture.RotaryPairs), to be read in rotate-half order.
func (c *Config) markRotaryPairs(t *TensorInfo) {
	if !c.Arch.RotaryPairs {
		return
	}
	m := qkProjection.FindStringSubmatch(t.Name)
	if m == nil {
		return
	}
	t.InterleavedRotaryHeads = c.NumAttentionHeads
	if m[1] == "k" {
		t.InterleavedRotaryHeads = c.NumKeyValueHeads
	}
}

// Truthy is a switch that config.json writes as true or false, or as a number that Python reads as a bool
// (non-zero: on): Llama 4 Scout's released config says "attn_temperature_tuning": 4, which transformers 4 tests
// for truth.
type Truthy bool

// UnmarshalJSON accepts true, false or a number.
func (t *Truthy) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch v := v.(type) {
	case bool:
		*t = Truthy(v)
	case float64:
		*t = v != 0
	default:
		return fmt.Errorf("want true, false or a number, got %s", b)
	}
	return nil
}
