package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// Architecture describes one supported Hugging Face architecture family.
type Architecture struct {
	Name      string // the `architectures` entry, e.g. "LlamaForCausalLM"
	ModelType string // the `model_type`, e.g. "llama"
	// QKVBias is true when the attention q/k/v projections always carry biases (Qwen2).
	QKVBias bool
}

var architectures = map[string]Architecture{}

// RegisterArchitecture makes an architecture known to config validation. Model packages call it from init.
func RegisterArchitecture(a Architecture) { architectures[a.Name] = a }

func init() {
	RegisterArchitecture(Architecture{Name: "LlamaForCausalLM", ModelType: "llama"})
	RegisterArchitecture(Architecture{Name: "MistralForCausalLM", ModelType: "mistral"})
	RegisterArchitecture(Architecture{Name: "Qwen2ForCausalLM", ModelType: "qwen2", QKVBias: true})
}

// SupportedArchitectures lists the registered architecture names, sorted.
func SupportedArchitectures() []string {
	names := make([]string, 0, len(architectures))
	for n := range architectures {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Config is the subset of a Hugging Face config.json that decoder-only transformers need.
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
	RopeTheta             float64  `json:"rope_theta"`
	HiddenAct             string   `json:"hidden_act"`
	TieWordEmbeddings     bool     `json:"tie_word_embeddings"`
	AttentionBias         bool     `json:"attention_bias"`
	MLPBias               bool     `json:"mlp_bias"`
	TorchDType            string   `json:"torch_dtype"`
	SlidingWindow         *int     `json:"sliding_window"`
	BOSTokenID            *int     `json:"bos_token_id"`
	EOSTokenID            TokenIDs `json:"eos_token_id"`
	// RopeScaling is kept raw; models that support a scaling type interpret it.
	RopeScaling json.RawMessage `json:"rope_scaling"`

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

// ParseConfig decodes config.json bytes, fills Hugging Face defaults and validates the result.
func ParseConfig(b []byte) (*Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("malformed JSON: %w", err)
	}
	if len(c.Architectures) == 0 {
		return nil, fmt.Errorf("%w: no \"architectures\" entry (supported: %s)", ErrUnsupportedArchitecture, strings.Join(SupportedArchitectures(), ", "))
	}
	arch, ok := architectures[c.Architectures[0]]
	if !ok {
		return nil, fmt.Errorf("%w %q (supported: %s)", ErrUnsupportedArchitecture, c.Architectures[0], strings.Join(SupportedArchitectures(), ", "))
	}
	c.Arch = arch
	if c.ModelType == "" {
		c.ModelType = arch.ModelType
	}
	if c.NumKeyValueHeads == 0 {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if c.HeadDim == 0 && c.NumAttentionHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.HiddenAct == "" {
		c.HiddenAct = "silu"
	}
	if c.MaxPositionEmbeddings == 0 {
		c.MaxPositionEmbeddings = 2048
	}
	return &c, c.Validate()
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
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("config: num_attention_heads (%d) must be a multiple of num_key_value_heads (%d)", c.NumAttentionHeads, c.NumKeyValueHeads)
	}
	if c.HeadDim%2 != 0 {
		return fmt.Errorf("config: head_dim must be even for rotary embeddings, got %d", c.HeadDim)
	}
	if c.HiddenAct != "silu" {
		return fmt.Errorf("config: hidden_act %q is not supported (supported: silu)", c.HiddenAct)
	}
	return nil
}

// HasQKVBias reports whether q/k/v projections carry biases.
func (c *Config) HasQKVBias() bool { return c.Arch.QKVBias || c.AttentionBias }

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
	return &g, nil
}

// EOSTokenIDs returns the stop tokens: generation_config's list when present, else config.json's.
func EOSTokenIDs(c *Config, g *GenerationConfig) []int {
	if g != nil && len(g.EOSTokenID) > 0 {
		return g.EOSTokenID
	}
	return c.EOSTokenID
}
