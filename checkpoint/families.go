package checkpoint

import "slices"

// Architecture describes how one Hugging Face architecture's config.json is read. The computation lives in
// engine/model, which refuses the values of these keys it does not implement.
type Architecture struct {
	Name      string // the `architectures` entry, e.g. "LlamaForCausalLM"
	ModelType string // the `model_type`, e.g. "llama"
	// TextModelType is the model_type of a nested text_config, where the family keeps its decoder there.
	TextModelType string
	// Keys are the config.json keys the family reads beyond commonKeys. Any other key is refused unless
	// HarmlessKeys lists it.
	Keys []string
	// Defaults are the values transformers' config class gives keys absent from config.json, where they differ
	// from commonDefaults.
	Defaults map[string]any
	// DefaultRopeTheta is the rotary base when neither spelling gives one (transformers' default_theta); 0 means
	// 10000.
	DefaultRopeTheta float64
	// DefaultRope is the rope dict the family's config class gives a config.json with neither rope_parameters
	// nor rope_scaling (gpt-oss: yarn); unlike a Defaults entry it yields to either spelling. nil: default rope.
	DefaultRope map[string]any
	// DefaultLayerTypeRopeTheta overrides DefaultRopeTheta for an entry of rope_parameters nested by layer type
	// (Gemma 3's local layers: 10000).
	DefaultLayerTypeRopeTheta map[string]float64
	// TensorPrefixes rename the tensors whose names start with a key: the key becomes its value (a
	// vision-language model's decoder, "language_model.model." → "model."). SkippedTensorPrefixes are the
	// tensors the text decoder does not read (a vision tower), left out of the checkpoint. Open applies both;
	// where TensorPrefixes are given, a tensor under neither is refused.
	TensorPrefixes        map[string]string
	SkippedTensorPrefixes []string
	// RopeKeys are keys the family's rope dict may hold beyond its rope type's parameters (Ministral 3's
	// llama_4_scaling_beta): read into checkpoint.Rope, or known not to change the computation.
	RopeKeys []string
	// ImageKeys are a vision-language wrapper's config keys that only concern image inputs (the vision tower, the
	// projector, the image token ids), which layerstream does not take: accepted by name as not changing what a
	// text-only forward computes.
	ImageKeys []string
	// FusedExperts are the tensors holding all of a layer's routed experts at once, which Open replaces by one
	// tensor per expert (see FusedExperts).
	FusedExperts []FusedExperts
	// QuantMethods are the quantization_config quant_method values the family reads (gpt-oss: "mxfp4"): the
	// checkpoint's tensors then say which weights are quantized (FusedExperts.Scales); any other is refused.
	QuantMethods []string
	// HeadParts, given a config, are the matrices holding several weights' rows head by head, which Open
	// replaces by one tensor per part (see HeadParts).
	HeadParts func(*Config) []HeadParts
	// RotaryPairs says the q and k projections' rows hold each head's rotary pairs side by side (dimensions 2i
	// and 2i+1 turn together: Meta's layout, which Llama 4 keeps and rotates as complex numbers): Open marks
	// them (TensorInfo.InterleavedRotaryHeads) so that they read in Hugging Face's rotate-half order, which the
	// engine rotates. The attention is unchanged: q and k get the same permutation within each head.
	RotaryPairs bool
}

var architectures = map[string]Architecture{}

// RegisterArchitecture makes an architecture known to config parsing.
func RegisterArchitecture(a Architecture) { architectures[a.Name] = a }

// SupportedArchitectures lists the registered architecture names, sorted.
func SupportedArchitectures() []string { return sortedKeys(architectures) }

// commonKeys are the keys every decoder family implements.
var commonKeys = []string{
	"architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
	"num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings", "rms_norm_eps", "hidden_act",
	"tie_word_embeddings", "dtype", "torch_dtype", "bos_token_id", "eos_token_id", "pad_token_id",
	// rotary embeddings, in both spellings (see parseRope)
	"rope_parameters", "rope_theta", "rope_scaling", "original_max_position_embeddings",
}

// commonDefaults are transformers' defaults for absent keys shared by the families (the PretrainedConfig and
// Llama-like config classes); Architecture.Defaults overrides them.
var commonDefaults = map[string]any{
	"rms_norm_eps":        1e-6,
	"hidden_act":          "silu",
	"tie_word_embeddings": false,
}

// HarmlessKeys are config.json keys that do not change the forward pass of a decoder at inference, skipped by
// name: bookkeeping, training-only settings (dropout, initialisation), output switches of the Python API, and
// sampling defaults that old transformers versions copied into config.json (layerstream reads sampling defaults
// from generation_config.json).
var HarmlessKeys = []string{
	// bookkeeping, and token ids the tokenizer uses
	"transformers_version", "_name_or_path", "_model_name_or_path", "_commit_hash", "_attn_implementation_autoset",
	"id2label", "label2id", "tokenizer_class", "prefix", "task_specific_params", "finetuning_task", "problem_type",
	"unk_token_id", "is_llama_config",
	// the Python classes of trust_remote_code, which transformers ignores for a native architecture
	"auto_map",
	// training only, or an execution choice with the same result
	"initializer_range", "attention_dropout", "use_cache", "pretraining_tp", "use_bfloat16", "tf_legacy_loss",
	"torchscript", "resid_pdrop", "embd_pdrop", "cache_implementation",
	// mixture of experts, training only: the load-balancing loss and its switch, and the router's input noise
	// (applied only while training: MixtralSparseMoeBlock.forward)
	"output_router_logits", "router_aux_loss_coef", "router_jitter_noise",
	// Python API switches and encoder-decoder fields a decoder-only model leaves unused
	"output_attentions", "output_hidden_states", "return_dict", "use_return_dict", "is_decoder",
	"is_encoder_decoder", "add_cross_attention", "tie_encoder_decoder", "cross_attention_hidden_size",
	"chunk_size_feed_forward", "sep_token_id", "decoder_start_token_id",
	// sampling defaults of transformers 4's PretrainedConfig
	"max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
	"temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
	"encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores",
	"return_dict_in_generate", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values",
	"exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
}

// harmlessValues are keys that do not change the computation at one value, which transformers ignores at any:
// SmolLM2's rope_interleaved false (the rotate-half layout every family here uses; true would need the weights'
// interleaved layout, which transformers does not implement either); the switches Phi-4-mini's config carries for
// its own modeling code, at the values that leave its layers those of transformers' Phi3ForCausalLM (no
// biases anywhere, no interpolation, every layer full attention); a family implementing one of these keys lists
// it in its Keys instead.
var harmlessValues = map[string]string{"rope_interleaved": "false", "attention_bias": "false", "mlp_bias": "false",
	"lm_head_bias": "false", "interpolate_factor": "1", "full_attn_mod": "1"}

// slidingKeys are the sliding-window keys of the Qwen2-style configs.
var slidingKeys = []string{"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"}

func init() {
	RegisterArchitecture(Architecture{Name: "LlamaForCausalLM", ModelType: "llama", Keys: []string{"attention_bias", "mlp_bias"}})
	mistral := Architecture{Name: "MistralForCausalLM", ModelType: "mistral", Keys: []string{"sliding_window"},
		Defaults: map[string]any{"sliding_window": 4096}}
	RegisterArchitecture(mistral)
	// Mistral Small 3.1/3.2 (and Magistral Small): a Mistral decoder in text_config (model_type "mistral"; other
	// decoders Mistral3ForConditionalGeneration can hold, such as Ministral 3's "ministral3", are refused by
	// name), a Pixtral tower and its projector beside it.
	RegisterArchitecture(visionLanguage(mistral, "Mistral3ForConditionalGeneration", "mistral3",
		"vision_config", "image_token_index", "projector_hidden_act", "vision_feature_layer",
		"multimodal_projector_bias", "spatial_merge_size"))
	RegisterArchitecture(Architecture{Name: "Qwen2ForCausalLM", ModelType: "qwen2", Keys: slidingKeys,
		Defaults: map[string]any{"sliding_window": 4096, "max_window_layers": 28}})
	RegisterArchitecture(Architecture{Name: "Qwen3ForCausalLM", ModelType: "qwen3", Keys: append([]string{"attention_bias"}, slidingKeys...),
		Defaults: map[string]any{"head_dim": 128, "sliding_window": 4096, "max_window_layers": 28}})
	RegisterArchitecture(Architecture{Name: "Olmo2ForCausalLM", ModelType: "olmo2", Keys: []string{"attention_bias"},
		Defaults: map[string]any{"rms_norm_eps": 1e-5}})
	RegisterArchitecture(Architecture{Name: "GraniteForCausalLM", ModelType: "granite",
		Keys:     []string{"attention_bias", "mlp_bias", "embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling"},
		Defaults: map[string]any{"embedding_multiplier": 1.0, "attention_multiplier": 1.0, "residual_multiplier": 1.0, "logits_scaling": 1.0}})
	RegisterArchitecture(Architecture{Name: "SmolLM3ForCausalLM", ModelType: "smollm3",
		// max_window_layers is read and unused: SmolLM3 derives its layer_types from no_rope_layers.
		Keys:             append([]string{"attention_bias", "mlp_bias", "no_rope_layers", "no_rope_layer_interval"}, slidingKeys...),
		Defaults:         map[string]any{"tie_word_embeddings": true, "no_rope_layer_interval": 4},
		DefaultRopeTheta: 2000000.0})
	// Gemma 2 and 3 (text): transformers' Gemma2Config and Gemma3TextConfig defaults. hidden_act, which old
	// checkpoints carry beside hidden_activation, is read and unused, as transformers' Gemma classes leave it.
	gemmaKeys := []string{"attention_bias", "hidden_activation", "query_pre_attn_scalar", "attn_logit_softcapping",
		"final_logit_softcapping", "sliding_window", "layer_types", "use_bidirectional_attention"}
	RegisterArchitecture(Architecture{Name: "Gemma2ForCausalLM", ModelType: "gemma2", Keys: gemmaKeys,
		Defaults: map[string]any{"head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
			"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "sliding_window": 4096, "tie_word_embeddings": true}})
	// Gemma3TextConfig's defaults include the shape (a Gemma3ForConditionalGeneration text_config gives only what
	// differs from them: Gemma 3 4B's lacks the heads, head_dim, vocab_size and max_position_embeddings).
	gemma3 := Architecture{Name: "Gemma3ForCausalLM", ModelType: "gemma3_text",
		Keys: append([]string{"rope_local_base_freq", "sliding_window_pattern", "_sliding_window_pattern"}, gemmaKeys...),
		Defaults: map[string]any{"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
			"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "max_position_embeddings": 131072,
			"hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256, "sliding_window": 4096,
			"tie_word_embeddings": true},
		DefaultRopeTheta: 1000000.0, DefaultLayerTypeRopeTheta: map[string]float64{"sliding_attention": 10000.0}}
	RegisterArchitecture(gemma3)
	// Gemma 3 4B, 12B, 27B: the text decoder of the vision-language model (a SigLIP tower beside it).
	RegisterArchitecture(visionLanguage(gemma3, "Gemma3ForConditionalGeneration", "gemma3",
		"vision_config", "mm_tokens_per_image", "boi_token_index", "eoi_token_index", "image_token_index"))
	// Phi-3, Phi-3.5, Phi-4-mini: transformers' Phi3Config defaults (rms_norm_eps 1e-5).
	RegisterArchitecture(Architecture{Name: "Phi3ForCausalLM", ModelType: "phi3", Keys: []string{"sliding_window", "partial_rotary_factor"},
		// Phi3Config always has original_max_position_embeddings (4096 by default), and transformers prefers it
		// to the rope dict's.
		Defaults: map[string]any{"rms_norm_eps": 1e-5, "original_max_position_embeddings": 4096}})
	// The mixtures of experts, with their transformers config classes' defaults (the number of experts has none
	// here: transformers 5 and 4 save it under different keys, read as one by Config.experts, and a checkpoint
	// gives it).
	moeKeys := []string{"num_experts", "num_local_experts", "num_experts_per_tok"}
	RegisterArchitecture(Architecture{Name: "MixtralForCausalLM", ModelType: "mixtral", Keys: append([]string{"sliding_window"}, moeKeys...),
		Defaults: map[string]any{"rms_norm_eps": 1e-5, "num_experts_per_tok": 2, "sliding_window": nil}})
	qwenMoE := append([]string{"moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers"}, moeKeys...)
	RegisterArchitecture(Architecture{Name: "Qwen2MoeForCausalLM", ModelType: "qwen2_moe",
		Keys: append(append([]string{"qkv_bias", "shared_expert_intermediate_size"}, qwenMoE...), slidingKeys...),
		Defaults: map[string]any{"decoder_sparse_step": 1, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
			"num_experts_per_tok": 4, "norm_topk_prob": false, "qkv_bias": true, "sliding_window": 4096, "max_window_layers": 28}})
	RegisterArchitecture(Architecture{Name: "Qwen3MoeForCausalLM", ModelType: "qwen3_moe",
		Keys: append([]string{"attention_bias", "use_sliding_window", "sliding_window", "max_window_layers"}, qwenMoE...),
		Defaults: map[string]any{"decoder_sparse_step": 1, "moe_intermediate_size": 768, "num_experts_per_tok": 8,
			"norm_topk_prob": false, "sliding_window": 4096}})
	// GLM-4.5 and 4.6 (Glm4MoeConfig). num_nextn_predict_layers (num_mtp_layers) counts the multi-token-prediction
	// layers, which transformers' Glm4MoeForCausalLM does not compute.
	RegisterArchitecture(Architecture{Name: "Glm4MoeForCausalLM", ModelType: "glm4_moe",
		Keys: append([]string{"attention_bias", "partial_rotary_factor", "moe_intermediate_size", "n_routed_experts", "n_shared_experts",
			"routed_scaling_factor", "n_group", "topk_group", "first_k_dense_replace", "norm_topk_prob", "use_qk_norm",
			"num_nextn_predict_layers", "num_mtp_layers"}, moeKeys...),
		Defaults: map[string]any{"rms_norm_eps": 1e-5, "moe_intermediate_size": 1408, "num_experts_per_tok": 8, "n_shared_experts": 1,
			"routed_scaling_factor": 1.0, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1, "norm_topk_prob": true}})
	// MiniMax-M2 (MiniMaxM2Config, transformers 5 only).
	RegisterArchitecture(Architecture{Name: "MiniMaxM2ForCausalLM", ModelType: "minimax_m2", Keys: moeKeys,
		Defaults: map[string]any{"head_dim": 128, "num_experts_per_tok": 8}, DefaultRopeTheta: 5000000.0})
	RegisterArchitecture(Architecture{Name: "OlmoeForCausalLM", ModelType: "olmoe",
		Keys:     append([]string{"attention_bias", "clip_qkv", "norm_topk_prob"}, moeKeys...),
		Defaults: map[string]any{"rms_norm_eps": 1e-5, "num_experts_per_tok": 8, "norm_topk_prob": false}})
}

// visionLanguage is the Architecture of a vision-language wrapper (transformers' *ForConditionalGeneration) run as
// a text model: text's decoder, configured from the wrapper's text_config (whose model_type must be text's) and
// read from its tensors under language_model (language_model.model.* and language_model.lm_head.* as
// transformers saves them, or model.language_model.* and lm_head.* as its modules name them), the vision tower
// and projector left out, the wrapper's own keys that concern images accepted by name. Text in, text out.
func visionLanguage(text Architecture, name, modelType string, imageKeys ...string) Architecture {
	a := text
	a.Name, a.ModelType, a.TextModelType = name, modelType, text.ModelType
	a.Keys = slices.Clone(text.Keys)
	a.ImageKeys = imageKeys
	a.TensorPrefixes = map[string]string{"language_model.model.": "model.", "language_model.lm_head.": "lm_head.",
		"model.language_model.": "model.", "lm_head.": "lm_head."}
	a.SkippedTensorPrefixes = []string{"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."}
	return a
}
