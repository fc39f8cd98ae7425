package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/layerstream/layerstream/internal/sections"
)

// Config is what layerstream reads of a Hugging Face config.json: the decoder's shape and every setting that
// changes its computation, in either spelling transformers writes (see ParseConfig). Field names follow the
// JSON keys. Family-specific settings are read here and interpreted by the family (engine/model), which refuses
// the values it does not implement.
type Config struct {
	Architectures         []string `json:"architectures"`
	ModelType             string   `json:"model_type"`
	HiddenSize            int      `json:"hidden_size"`
	IntermediateSize      int      `json:"intermediate_size"`
	NumHiddenLayers       int      `json:"num_hidden_layers"`
	NumAttentionHeads     int      `json:"num_attention_heads"`
	NumKeyValueHeads      int      `json:"num_key_value_heads"`
	HeadDim               int      `json:"head_dim"`
	VocabSize             int      `json:"vocab_size"`
	MaxPositionEmbeddings int      `json:"max_position_embeddings"`
	RMSNormEps            float64  `json:"rms_norm_eps"`
	HiddenAct             string   `json:"hidden_act"`
	TieWordEmbeddings     bool     `json:"tie_word_embeddings"`
	// TorchDType is the stored dtype: "dtype" in transformers 5, "torch_dtype" in transformers 4.
	TorchDType string   `json:"-"`
	BOSTokenID *int     `json:"bos_token_id"`
	EOSTokenID TokenIDs `json:"eos_token_id"`

	// Rope is the rotary embedding: transformers 5's rope_parameters, or transformers 4's rope_theta and
	// rope_scaling. RopeByLayerType holds transformers 5's rope_parameters nested by layer type (Gemma 3:
	// "full_attention", "sliding_attention"); Rope is then the full-attention entry, if any.
	Rope            Rope            `json:"-"`
	RopeByLayerType map[string]Rope `json:"-"`

	// Biases (Llama, Granite, SmolLM3, Qwen3, OLMo 2: attention_bias puts biases on q/k/v/o_proj; mlp_bias on
	// gate/up/down_proj).
	AttentionBias bool `json:"attention_bias"`
	MLPBias       bool `json:"mlp_bias"`

	// Sliding-window attention. SlidingWindow is nil when config.json says null; LayerTypes ("full_attention",
	// "sliding_attention") is nil when absent, and the family derives it (Qwen2/3: use_sliding_window and
	// max_window_layers; SmolLM3: no_rope_layers; Mistral: every layer).
	SlidingWindow    *int     `json:"sliding_window"`
	UseSlidingWindow bool     `json:"use_sliding_window"`
	MaxWindowLayers  int      `json:"max_window_layers"`
	LayerTypes       []string `json:"layer_types"`

	// Granite's multipliers.
	EmbeddingMultiplier float64 `json:"embedding_multiplier"`
	AttentionMultiplier float64 `json:"attention_multiplier"`
	ResidualMultiplier  float64 `json:"residual_multiplier"`
	LogitsScaling       float64 `json:"logits_scaling"`

	// SmolLM3: NoRopeLayers[i] is 1 when layer i uses rotary embeddings, 0 when it does not.
	NoRopeLayers        []int `json:"no_rope_layers"`
	NoRopeLayerInterval int   `json:"no_rope_layer_interval"`

	// Gemma 2 and 3: hidden_activation is the MLP activation (transformers' Gemma classes read it, not
	// hidden_act); query_pre_attn_scalar^-½ scales the attention scores; the soft-caps are nil when null;
	// rope_local_base_freq is the local (sliding) layers' rotary base in transformers 4's spelling of Gemma 3;
	// sliding_window_pattern (Gemma 3 without layer_types): every pattern-th layer is global. Config classes
	// save _sliding_window_pattern beside layer_types, which then decide.
	HiddenActivation          string         `json:"hidden_activation"`
	QueryPreAttnScalar        float64        `json:"query_pre_attn_scalar"`
	AttnLogitSoftcapping      *float64       `json:"attn_logit_softcapping"`
	FinalLogitSoftcapping     *float64       `json:"final_logit_softcapping"`
	RopeLocalBaseFreq         *float64       `json:"rope_local_base_freq"`
	SlidingWindowPattern      *int           `json:"sliding_window_pattern"`
	SavedSlidingWindowPattern *int           `json:"_sliding_window_pattern"`
	UseBidirectionalAttention *Bidirectional `json:"use_bidirectional_attention"`

	// Mixture of experts (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE). NumExperts is the number of routed experts:
	// num_experts or num_local_experts, two spellings transformers' configs map onto each other (Mixtral's key is
	// num_local_experts, Qwen2-MoE's and OLMoE's num_experts; transformers 5 saves Qwen3-MoE's as
	// num_local_experts, 4 as num_experts); both given must agree (ParseConfig). NormTopKProb renormalizes the
	// chosen experts' weights; DecoderSparseStep and MLPOnlyLayers (Qwen-MoE) say which layers are dense;
	// QKVBias is Qwen2-MoE's switch for q/k/v_proj biases; ClipQKV (OLMoE) clamps q, k and v, nil when null.
	NumExperts                   int      `json:"num_experts"`
	NumLocalExperts              int      `json:"num_local_experts"`
	NumExpertsPerTok             int      `json:"num_experts_per_tok"`
	NormTopKProb                 bool     `json:"norm_topk_prob"`
	MoEIntermediateSize          int      `json:"moe_intermediate_size"`
	SharedExpertIntermediateSize int      `json:"shared_expert_intermediate_size"`
	DecoderSparseStep            int      `json:"decoder_sparse_step"`
	MLPOnlyLayers                []int    `json:"mlp_only_layers"`
	QKVBias                      bool     `json:"qkv_bias"`
	ClipQKV                      *float64 `json:"clip_qkv"`
	// GLM-4.5 (DeepSeek-V3's router): n_routed_experts is a third spelling of the expert count; n_shared_experts
	// shared experts of moe_intermediate_size form one of n_shared_experts times that width; the routing weights
	// are multiplied by routed_scaling_factor; n_group/topk_group limit the choice to the best groups of experts;
	// the first first_k_dense_replace layers are dense; use_qk_norm puts RMSNorms over each head of q and k.
	NRoutedExperts      int     `json:"n_routed_experts"`
	NSharedExperts      int     `json:"n_shared_experts"`
	RoutedScalingFactor float64 `json:"routed_scaling_factor"`
	NGroup              int     `json:"n_group"`
	TopKGroup           int     `json:"topk_group"`
	FirstKDenseReplace  int     `json:"first_k_dense_replace"`
	UseQKNorm           bool    `json:"use_qk_norm"`
	// NumNextNPredictLayers (num_mtp_layers) multi-token-prediction layers follow the decoder's in a GLM-4.5
	// checkpoint (model.layers.num_hidden_layers.*): transformers' Glm4MoeForCausalLM does not compute them.
	NumNextNPredictLayers int `json:"num_nextn_predict_layers"`
	NumMTPLayers          int `json:"num_mtp_layers"`
	// Gated DeltaNet linear attention (Qwen3.5, Qwen3-Next: layer_types "linear_attention"): key and value heads
	// and their sizes, and the depthwise causal conv1d's kernel.
	LinearNumKeyHeads   int `json:"linear_num_key_heads"`
	LinearNumValueHeads int `json:"linear_num_value_heads"`
	LinearKeyHeadDim    int `json:"linear_key_head_dim"`
	LinearValueHeadDim  int `json:"linear_value_head_dim"`
	LinearConvKernelDim int `json:"linear_conv_kernel_dim"`
	// GptOss: gpt-oss's keys (families_gptoss.go).
	GptOss
	// LinearTiledValueHeads: the value heads are in llama.cpp's tiled order (value head h reads key head h mod
	// linear_num_key_heads) rather than grouped by key head; the GGUF reader writes it (gguf/arch_qwen35.go).
	LinearTiledValueHeads bool `json:"linear_tiled_value_heads"`
	// LinearGroupedBA: Qwen3-Next's DeltaNet projections as llama.cpp's converter leaves them: in_proj_qkvz as
	// Qwen3.5's separate in_proj_qkv and in_proj_z, in_proj_ba still grouped per key head; the GGUF reader writes
	// it (gguf/arch_qwen3next.go).
	LinearGroupedBA bool `json:"linear_grouped_ba"`
	// Gemma4: Gemma 4's keys (families_gemma4.go).
	Gemma4
	// LatentAttention: DeepSeek-V3's multi-head latent attention keys (families_deepseek.go).
	LatentAttention
	// Llama4Text: Llama 4's keys (families_llama4.go).
	Llama4Text

	// Arch is the resolved architecture (set by ParseConfig).
	Arch Architecture `json:"-"`
}

// TokenIDs is a token id field that Hugging Face configs write as either a number or a list.
type TokenIDs []int

// UnmarshalJSON accepts null, a number or a list of numbers.
func (t *TokenIDs) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "null" {
		*t = nil
		return nil
	}
	if strings.HasPrefix(s, "[") {
		var ids []int
		if err := json.Unmarshal(b, &ids); err != nil {
			return err
		}
		*t = ids
		return nil
	}
	var id int
	if err := json.Unmarshal(b, &id); err != nil {
		return fmt.Errorf("token id: want a number or a list of numbers, got %s", s)
	}
	*t = TokenIDs{id}
	return nil
}

// ErrUnsupportedArchitecture is wrapped by errors about unknown `architectures`.
var ErrUnsupportedArchitecture = errors.New("unsupported architecture")

// IgnoreKeysEnv names the environment variable that lists (comma-separated) config.json keys layerstream does
// not know but should skip: the escape hatch of the unknown-key policy, for a key the user has checked does not
// change the computation.
const IgnoreKeysEnv = "LAYERSTREAM_IGNORE_CONFIG_KEYS"

// LoadConfig reads and validates a config.json.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// required are the keys config.json must give: no default would be safe.
var required = []string{"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "max_position_embeddings"}

// ParseConfig decodes config.json bytes, fills transformers' defaults for absent keys and validates the result.
//
// Both spellings are read: transformers 5 writes "rope_parameters" ({rope_theta, rope_type, factor, ...}) and
// "dtype"; transformers 4 writes top-level "rope_theta" and "rope_scaling", and "torch_dtype". A model that keeps
// its decoder in a nested "text_config" is read from there (the top level supplies keys the text_config lacks).
//
// Every key is accounted for: the keys every decoder implements (commonKeys), the family's own (Architecture.Keys),
// or a short list known not to change the computation (HarmlessKeys). Any other key is refused by name with its
// value, unless IgnoreKeysEnv lists it.
func ParseConfig(b []byte) (*Config, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("malformed JSON: %w", err)
	}
	if top == nil {
		return nil, errors.New("config.json is not a JSON object")
	}
	var names []string
	if raw, ok := top["architectures"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &names); err != nil {
			return nil, fmt.Errorf("config: architectures: want a list of names, got %s", short(raw))
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%w: no \"architectures\" entry (supported: %s)", ErrUnsupportedArchitecture, strings.Join(SupportedArchitectures(), ", "))
	}
	arch, ok := architectures[names[0]]
	if !ok {
		return nil, fmt.Errorf("%w %q (supported: %s)", ErrUnsupportedArchitecture, names[0], strings.Join(SupportedArchitectures(), ", "))
	}
	m, text, err := decoderKeys(top, arch.TextModelType != "")
	if err != nil {
		return nil, err
	}
	if arch.TextModelType != "" && text == nil {
		return nil, fmt.Errorf("config: %s keeps its decoder's settings in text_config, which config.json lacks", arch.Name)
	}
	if err := checkKeys(m, arch); err != nil {
		return nil, err
	}
	c := &Config{Arch: arch}
	for _, k := range required {
		if _, def := arch.Defaults[k]; !def && isAbsentOrNull(m, k) { // only the family's config class may default it
			return nil, fmt.Errorf("config: missing field %s", k)
		}
	}
	// Absent keys get transformers' defaults: the family's, else the common ones.
	filled := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		filled[k] = v
	}
	for _, d := range []map[string]any{arch.Defaults, commonDefaults} {
		for k, v := range d {
			if _, ok := filled[k]; !ok {
				b, _ := json.Marshal(v)
				filled[k] = b
			}
		}
	}
	b, _ = json.Marshal(filled)
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if arch.TextModelType != "" {
		if err := c.wrapperTypes(arch, top, text); err != nil {
			return nil, err
		}
	} else if c.ModelType != "" && c.ModelType != arch.ModelType {
		return nil, fmt.Errorf("config: model_type %q does not match architectures[0] %q (model_type %q): transformers would build a different model", c.ModelType, arch.Name, arch.ModelType)
	}
	if c.ModelType == "" {
		c.ModelType = arch.ModelType
	}
	if c.TorchDType, err = dtypeOf(filled); err != nil {
		return nil, err
	}
	if c.NumKeyValueHeads == 0 && isAbsentOrNull(filled, "num_key_value_heads") {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.HeadDim == 0 && isAbsentOrNull(filled, "head_dim") && c.NumAttentionHeads > 0 {
		if c.HiddenSize%c.NumAttentionHeads != 0 {
			return nil, fmt.Errorf("config: hidden_size (%d) is not a multiple of num_attention_heads (%d), and no head_dim is given", c.HiddenSize, c.NumAttentionHeads)
		}
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.Rope, c.RopeByLayerType, err = parseRope(filled, c); err != nil {
		return nil, err
	}
	if err := c.experts(); err != nil {
		return nil, err
	}
	return c, c.Validate()
}

// experts reads the number of routed experts from any of its spellings into NumExperts (and NumLocalExperts,
// NRoutedExperts), refusing two that disagree; and Qwen2-MoE's sliding_window 0 as none.
func (c *Config) experts() error {
	n, agree := 0, true
	var given []string
	for _, v := range []struct {
		key string
		n   int
	}{{"num_experts", c.NumExperts}, {"num_local_experts", c.NumLocalExperts}, {"n_routed_experts", c.NRoutedExperts}} {
		if v.n == 0 {
			continue
		}
		given = append(given, fmt.Sprintf("%s %d", v.key, v.n))
		agree = agree && (n == 0 || v.n == n)
		n = v.n
	}
	if !agree {
		return fmt.Errorf("config: %s disagree (transformers reads them as one setting)", strings.Join(given, " and "))
	}
	c.NumExperts, c.NumLocalExperts, c.NRoutedExperts = n, n, n
	if c.SlidingWindow != nil && *c.SlidingWindow == 0 && c.Arch.ModelType == "qwen2_moe" && !c.UseSlidingWindow {
		// Qwen2MoeConfig (transformers 5) saves sliding_window 0 for "none" when use_sliding_window is false.
		c.SlidingWindow = nil
	}
	return nil
}

// UnreadLayers are the tensor name prefixes of the layers a checkpoint holds beyond the decoder's that the
// architecture's transformers class does not compute: GLM-4.5's and DeepSeek-V3's multi-token-prediction layers
// (Glm4MoeForCausalLM._keys_to_ignore_on_load_unexpected; DeepseekV3ForCausalLM's names model.layers.61, the
// layer after DeepSeek-V3's 61), and Qwen3-Next's and Qwen3.5's (mtp.*, their classes'
// _keys_to_ignore_on_load_unexpected).
func (c *Config) UnreadLayers() []string {
	var out []string
	switch c.ModelType {
	case "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next":
		out = append(out, "mtp.")
	}
	if c.Arch.ModelType == "glm4_moe" || c.Arch.ModelType == "deepseek_v3" {
		for i := range max(c.NumNextNPredictLayers, c.NumMTPLayers) {
			out = append(out, fmt.Sprintf("model.layers.%d.", c.NumHiddenLayers+i))
		}
	}
	return out
}

// decoderKeys returns the keys that describe the decoder: the top level's, or a nested text_config's with the
// top level's other keys added where the text_config lacks them; and the text_config (nil when absent). A
// wrapper's top-level tie_word_embeddings is its own, not the decoder's (see wrapperTypes).
func decoderKeys(top map[string]json.RawMessage, wrapper bool) (map[string]json.RawMessage, map[string]json.RawMessage, error) {
	raw, ok := top["text_config"]
	if !ok || isNull(raw) {
		return top, nil, nil
	}
	var text map[string]json.RawMessage
	if err := json.Unmarshal(raw, &text); err != nil || text == nil {
		return nil, nil, fmt.Errorf("config: text_config: want an object, got %s", short(raw))
	}
	m := make(map[string]json.RawMessage, len(top)+len(text))
	for k, v := range top {
		if k != "text_config" && !(wrapper && k == "tie_word_embeddings") {
			m[k] = v
		}
	}
	for k, v := range text {
		if k == "architectures" { // the wrapper's architectures decide the model
			continue
		}
		m[k] = v
	}
	return m, text, nil
}

// wrapperTypes checks a vision-language wrapper's config against its Architecture: the top level's model_type is
// the wrapper's, text_config's (absent: the wrapper config class's default) the decoder's, which becomes
// c.ModelType. And the two tie_word_embeddings: transformers 4 ties lm_head to the embedding by text_config's,
// transformers 5 by the top level's (and then only when the checkpoint lacks lm_head or holds the embedding's
// values in it). A top level saying false where text_config's says true (or defaults to it) is read differently
// by the two, and refused; true where text_config says false leaves a checkpoint with its own lm_head untied in
// both (Mistral Small 3.1: no top-level key, Mistral3Config's default true).
func (c *Config) wrapperTypes(arch Architecture, top, text map[string]json.RawMessage) error {
	var wrapper, decoder string
	if raw, ok := top["model_type"]; ok && json.Unmarshal(raw, &wrapper) == nil && wrapper != arch.ModelType {
		return fmt.Errorf("config: model_type %q does not match architectures[0] %q (model_type %q): transformers would build a different model", wrapper, arch.Name, arch.ModelType)
	}
	decoder = arch.TextModelType
	if raw, ok := text["model_type"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &decoder); err != nil {
			return fmt.Errorf("config: text_config.model_type: want a string, got %s", short(raw))
		}
	}
	if decoder != arch.TextModelType {
		return fmt.Errorf("config: text_config.model_type %q: layerstream runs %s with a %q decoder in text_config only (another decoder computes differently: Ministral 3's \"ministral3\", for one, scales attention by position); refusing rather than running it as %q", decoder, arch.Name, arch.TextModelType, arch.TextModelType)
	}
	c.ModelType = decoder
	if raw, ok := top["tie_word_embeddings"]; ok && !isNull(raw) {
		var tie bool
		if err := json.Unmarshal(raw, &tie); err != nil {
			return fmt.Errorf("config: tie_word_embeddings: want true or false, got %s", short(raw))
		}
		if !tie && c.TieWordEmbeddings {
			return fmt.Errorf("config: tie_word_embeddings is false at the top level but true in text_config (or its default): transformers 4 ties lm_head to the embedding (text_config's), transformers 5 does not (the top level's); refusing a checkpoint the two read differently")
		}
	}
	return nil
}

// checkKeys refuses every key that neither the family, nor every decoder, implements and that is not known to be
// harmless, naming each with its value.
func checkKeys(m map[string]json.RawMessage, arch Architecture) error {
	ignore := map[string]bool{}
	for _, k := range strings.Split(os.Getenv(IgnoreKeysEnv), ",") {
		if k = strings.TrimSpace(k); k != "" {
			ignore[k] = true
		}
	}
	var unknown []string
	for _, k := range sortedKeys(m) {
		switch {
		case slices.Contains(commonKeys, k), slices.Contains(arch.Keys, k), slices.Contains(HarmlessKeys, k),
			slices.Contains(arch.ImageKeys, k):
		case harmlessValues[k] != "" && strings.TrimSpace(string(m[k])) == harmlessValues[k]:
		case ignore[k]:
			slog.Warn("config.json: skipping a key layerstream does not implement, as "+IgnoreKeysEnv+" asks", "key", k, "value", short(m[k]))
		case k == "quantization_config" && len(arch.QuantMethods) > 0:
			if err := checkQuantization(m[k], arch); err != nil {
				return err
			}
		case k == "quantization_config":
			return fmt.Errorf("config: quantization_config %s: quantized checkpoints are not supported (layerstream reads f32, bf16 and f16 safetensors)", short(m[k]))
		default:
			unknown = append(unknown, fmt.Sprintf("%s (value %s)", k, short(m[k])))
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("config: %s does not implement key %s: layerstream refuses config keys it does not know rather than ignore what may change the computation (if you have checked that a key does not, list it in %s=key1,key2; see %s, %q)",
			arch.Name, strings.Join(unknown, ", "), IgnoreKeysEnv, sections.File, sections.UnknownKey)
	}
	return nil
}

// dtypeOf reads the stored dtype: "dtype" (transformers 5) or "torch_dtype" (transformers 4); both must agree.
// It is the dtype transformers loads the model in by default, which sets the compute dtype --dtype auto picks
// (and Gemma's embedding scale): a value other than the three float dtypes (an integer dtype, a typo) is refused
// by name. The value comes back as torch names it: "float32", "bfloat16" or "float16".
func dtypeOf(m map[string]json.RawMessage) (string, error) {
	var vals, names []string
	for _, k := range []string{"dtype", "torch_dtype"} {
		raw, ok := m[k]
		if !ok || isNull(raw) {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("config: %s: want a string, got %s", k, short(raw))
		}
		d, ok := ParseTorchDType(s)
		if !ok {
			return "", fmt.Errorf("config: %s %q: want float32, bfloat16 or float16 (the dtype the model computes in, as transformers loads it; the tensors' own dtypes say how they are stored)", k, s)
		}
		vals, names = append(vals, s), append(names, torchNames[d])
	}
	if len(vals) == 2 && names[0] != names[1] {
		return "", fmt.Errorf("config: dtype %q and torch_dtype %q disagree", vals[0], vals[1])
	}
	if len(vals) == 0 {
		return "", nil
	}
	return names[0], nil
}

// Validate checks that the dimensions are positive and consistent.
func (c *Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers}, {"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads}, {"head_dim", c.HeadDim}, {"vocab_size", c.VocabSize},
		{"max_position_embeddings", c.MaxPositionEmbeddings},
	} {
		if f.v <= 0 {
			return fmt.Errorf("config: %s must be positive, got %d", f.name, f.v)
		}
	}
	if !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0) {
		return fmt.Errorf("config: rms_norm_eps must be a positive number, got %g (a norm of zero activations would divide by zero)", c.RMSNormEps)
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("config: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.LayerTypes != nil && len(c.LayerTypes) != c.NumHiddenLayers {
		return fmt.Errorf("config: layer_types has %d entries for num_hidden_layers %d", len(c.LayerTypes), c.NumHiddenLayers)
	}
	if c.NoRopeLayers != nil && len(c.NoRopeLayers) != c.NumHiddenLayers {
		return fmt.Errorf("config: no_rope_layers has %d entries for num_hidden_layers %d", len(c.NoRopeLayers), c.NumHiddenLayers)
	}
	if c.SlidingWindow != nil && *c.SlidingWindow <= 0 {
		return fmt.Errorf("config: sliding_window must be positive or null, got %d", *c.SlidingWindow)
	}
	return nil
}

// GenerationConfig is the subset of generation_config.json that sampling uses.
type GenerationConfig struct {
	BOSTokenID        *int     `json:"bos_token_id"`
	EOSTokenID        TokenIDs `json:"eos_token_id"`
	PadTokenID        TokenIDs `json:"pad_token_id"`
	DoSample          bool     `json:"do_sample"`
	Temperature       *float64 `json:"temperature"`
	TopK              *int     `json:"top_k"`
	TopP              *float64 `json:"top_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	MaxNewTokens      *int     `json:"max_new_tokens"`
}

// LoadGenerationConfig reads generation_config.json. A missing file is not an error: it returns an empty config.
func LoadGenerationConfig(path string) (*GenerationConfig, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return &GenerationConfig{}, nil
	}
	if err != nil {
		return nil, err
	}
	var g GenerationConfig
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, fmt.Errorf("%s: malformed JSON: %w", path, err)
	}
	if err := g.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &g, nil
}

// check refuses sampling values no sampler accepts (JSON holds no NaN nor Inf), whether or not do_sample uses
// them: they would otherwise surface as errors in requests that set none.
func (g *GenerationConfig) check() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("%s %v is out of range (want %s)", field, v, want)
	}
	switch {
	case g.Temperature != nil && *g.Temperature < 0:
		return bad("temperature", *g.Temperature, "≥ 0")
	case g.TopK != nil && *g.TopK < 0:
		return bad("top_k", *g.TopK, "≥ 0")
	case g.TopP != nil && (*g.TopP < 0 || *g.TopP > 1):
		return bad("top_p", *g.TopP, "in [0, 1]")
	case g.RepetitionPenalty != nil && *g.RepetitionPenalty < 0:
		return bad("repetition_penalty", *g.RepetitionPenalty, "≥ 0, 1 for off")
	}
	return nil
}

// EOSTokenIDs returns the stop tokens: generation_config's list when present, else config.json's.
func EOSTokenIDs(c *Config, g *GenerationConfig) []int {
	if g != nil && len(g.EOSTokenID) > 0 {
		return g.EOSTokenID
	}
	return c.EOSTokenID
}

func isNull(raw json.RawMessage) bool { return strings.TrimSpace(string(raw)) == "null" }

func isAbsentOrNull(m map[string]json.RawMessage, k string) bool {
	raw, ok := m[k]
	return !ok || isNull(raw)
}

// short is a JSON value for an error message, cut to a readable length.
func short(raw json.RawMessage) string {
	s := strings.Join(strings.Fields(string(raw)), " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
