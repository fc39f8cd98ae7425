package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// patternJSON is a Split/Replace pattern: {"String": "..."} or {"Regex": "..."}.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// tokenizerConfig holds the fields of tokenizer_config.json this package uses.
type tokenizerConfig struct {
	AddBOS       *bool           `json:"add_bos_token"`
	AddEOS       *bool           `json:"add_eos_token"`
	SplitSpecial bool            `json:"split_special_tokens"`
	BOSToken     json.RawMessage `json:"bos_token"`
	EOSToken     json.RawMessage `json:"eos_token"`
	ChatTemplate json.RawMessage `json:"chat_template"`
}

// isNull reports whether a raw JSON value is absent or null.
func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// tokenString reads a token given either as a string or as an AddedToken object {"content": ...}.
func tokenString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("want a string or {\"content\": ...}, got %.40s", raw)
	}
	return obj.Content, nil
}

// Load reads tokenizer.json and, when present, tokenizer_config.json (special-token flags and the chat template)
// from a model folder. The chat template is found as transformers finds it: chat_template.jinja, which takes
// priority over tokenizer_config.json's chat_template (transformers: "clobbers any template in the config"),
// then tokenizer_config.json's, then a processor's chat_template.json (vision-language checkpoints may keep
// theirs only there; layerstream renders it for text).
func Load(dir string) (*Tokenizer, error) { return LoadNamed(dir, dir) }

// LoadNamed is Load, naming the tokenizer in its errors as name instead of dir: a shard folder holds copies
// of its checkpoint's tokenizer files, and a broken one is to be fixed where it came from.
func LoadNamed(dir, name string) (*Tokenizer, error) {
	cfg := filepath.Join(dir, "tokenizer_config.json")
	if _, err := os.Stat(cfg); err != nil {
		cfg = ""
	}
	t, err := loadFiles(filepath.Join(dir, "tokenizer.json"), cfg, name)
	if err != nil {
		return nil, err
	}
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		t.chatTemplate = string(b)
	}
	if t.chatTemplate == "" {
		path := filepath.Join(dir, "chat_template.json")
		if b, err := os.ReadFile(path); err == nil {
			var proc struct {
				ChatTemplate json.RawMessage `json:"chat_template"`
			}
			if err := json.Unmarshal(b, &proc); err != nil {
				return nil, fmt.Errorf("tokenizer in %s: chat_template.json: %w", name, err)
			}
			if t.chatTemplate, err = parseChatTemplate(proc.ChatTemplate); err != nil {
				return nil, fmt.Errorf("tokenizer in %s: chat_template.json chat_template: %w", name, err)
			}
		}
	}
	return t, nil
}

// loadFiles reads a tokenizer.json and an optional tokenizer_config.json (configJSON may be ""), naming the
// tokenizer in its parse errors as name.
func loadFiles(tokenizerJSON, configJSON, name string) (*Tokenizer, error) {
	data, err := os.ReadFile(tokenizerJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var cfgData []byte
	if configJSON != "" {
		if cfgData, err = os.ReadFile(configJSON); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	t, err := Parse(data, cfgData)
	if err != nil {
		return nil, fmt.Errorf("tokenizer in %s: %w", name, err)
	}
	return t, nil
}

// Parse builds a tokenizer from the bytes of tokenizer.json and tokenizer_config.json (configData may be nil).
func Parse(tokenizerData, configData []byte) (*Tokenizer, error) {
	t := &Tokenizer{bos: -1, eos: -1}
	parseModel := func(s *jsonScanner) error {
		var err error
		if t.model, err = parseBPE(s); err != nil {
			return fmt.Errorf("model: %w", err)
		}
		return nil
	}
	fields, err := rawFields(tokenizerData, map[string]func(*jsonScanner) error{"model": parseModel})
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	var added []addedTokenJSON
	if raw := fields["added_tokens"]; !isNull(raw) {
		if err := json.Unmarshal(raw, &added); err != nil {
			return nil, fmt.Errorf("tokenizer.json added_tokens: %w", err)
		}
	}
	if t.model == nil {
		return nil, errors.New("tokenizer.json: no \"model\"")
	}
	var cfg tokenizerConfig
	if len(configData) > 0 {
		if err := json.Unmarshal(configData, &cfg); err != nil {
			return nil, fmt.Errorf("tokenizer_config.json: %w", err)
		}
	}

	if t.normalizer, err = parseNormalizer(fields["normalizer"]); err != nil {
		return nil, fmt.Errorf("tokenizer.json normalizer: %w", err)
	}
	if t.preTokenizer, err = parsePreTokenizer(fields["pre_tokenizer"]); err != nil {
		return nil, fmt.Errorf("tokenizer.json pre_tokenizer: %w", err)
	}
	if t.decoder, err = parseDecoder(fields["decoder"]); err != nil {
		return nil, fmt.Errorf("tokenizer.json decoder: %w", err)
	}
	if err := t.initAdded(added, cfg.SplitSpecial); err != nil {
		return nil, fmt.Errorf("tokenizer.json added_tokens: %w", err)
	}
	t.model.useMetaspaceWords(t.preTokenizer == nil)

	bos, err := tokenString(cfg.BOSToken)
	if err != nil {
		return nil, fmt.Errorf("tokenizer_config.json bos_token: %w", err)
	}
	eos, err := tokenString(cfg.EOSToken)
	if err != nil {
		return nil, fmt.Errorf("tokenizer_config.json eos_token: %w", err)
	}
	if id, ok := t.TokenID(bos); ok && bos != "" {
		t.bos = id
	}
	if id, ok := t.TokenID(eos); ok && eos != "" {
		t.eos = id
	}
	t.bosText, t.eosText = bos, eos

	if isNull(fields["post_processor"]) {
		// No post-processor: tokenizer_config.json's add_bos_token / add_eos_token decide (as transformers does).
		if cfg.AddBOS != nil && *cfg.AddBOS {
			if t.bos < 0 {
				return nil, fmt.Errorf("tokenizer_config.json: add_bos_token is true but bos_token %q is not in the vocabulary", bos)
			}
			t.post.prefix = []int{t.bos}
		}
		if cfg.AddEOS != nil && *cfg.AddEOS {
			if t.eos < 0 {
				return nil, fmt.Errorf("tokenizer_config.json: add_eos_token is true but eos_token %q is not in the vocabulary", eos)
			}
			t.post.suffix = []int{t.eos}
		}
	} else if t.post, err = parsePostProcessor(fields["post_processor"], t); err != nil {
		return nil, fmt.Errorf("tokenizer.json post_processor: %w", err)
	}

	if t.chatTemplate, err = parseChatTemplate(cfg.ChatTemplate); err != nil {
		return nil, fmt.Errorf("tokenizer_config.json chat_template: %w", err)
	}
	return t, nil
}

// parseChatTemplate accepts a template string or a list of {"name", "template"} (the "default" one is used).
func parseChatTemplate(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return "", fmt.Errorf("want a string or a list of {name, template}: %w", err)
	}
	var names []string
	for _, e := range list {
		if e.Name == "default" {
			return e.Template, nil
		}
		names = append(names, e.Name)
	}
	return "", fmt.Errorf("no template named \"default\" among %s", strings.Join(names, ", "))
}

// typeOf reads the "type" field of a component.
func typeOf(raw json.RawMessage) (string, error) {
	var h struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &h); err != nil {
		return "", err
	}
	if h.Type == "" {
		return "", fmt.Errorf("component without a \"type\": %.60s", raw)
	}
	return h.Type, nil
}

// unsupported names a component type this package does not implement, listing those it does.
func unsupported(kind, typ string, supported ...string) error {
	slices.Sort(supported)
	return fmt.Errorf("unsupported %s type %q (supported: %s)", kind, typ, strings.Join(supported, ", "))
}
