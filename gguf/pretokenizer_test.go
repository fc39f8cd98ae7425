package gguf

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/tokenizer"
)

// TestPreTokenizersMatchLlamaCpp checks every tokenizer.ggml.pre name layerstream maps against llama.cpp's own
// tokenization: gguf/testdata/llamacpp/pretokenizers.json (scripts/fixtures/gguf_pretokenizers.py) holds, per
// name, llama.cpp's ids for a set of texts on a vocabulary-only file with the Qwen3 vocabulary and merges
// (../shared/models/tokenizers/qwen3) under that name. The same metadata is rebuilt here (tokens in id order, the
// added tokens control tokens, merges "a b"), turned into tokenizer.json by TokenizerFiles and tokenized.
func TestPreTokenizersMatchLlamaCpp(t *testing.T) {
	var ref struct {
		Cases map[string][]struct {
			Text string `json:"text"`
			IDs  []int  `json:"ids"`
		} `json:"cases"`
	}
	b, err := os.ReadFile("testdata/llamacpp/pretokenizers.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	var src struct {
		Model struct {
			Vocab  map[string]int    `json:"vocab"`
			Merges []json.RawMessage `json:"merges"`
		} `json:"model"`
		Added []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	b, err = os.ReadFile(testutil.SharedPath(t, "models", "tokenizers", "qwen3", "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &src); err != nil {
		t.Fatal(err)
	}
	n := len(src.Model.Vocab) + len(src.Added)
	tokens, types := make([]string, n), make([]int32, n)
	for tok, id := range src.Model.Vocab {
		tokens[id], types[id] = tok, tokenNormal
	}
	for _, a := range src.Added {
		tokens[a.ID], types[a.ID] = a.Content, tokenControl
	}
	merges := make([]string, len(src.Model.Merges))
	for i, m := range src.Model.Merges {
		var pair []string
		if err := json.Unmarshal(m, &pair); err != nil {
			if err := json.Unmarshal(m, &merges[i]); err != nil {
				t.Fatalf("merge %d: %s", i, m)
			}
			continue
		}
		merges[i] = strings.Join(pair, " ")
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range preTokenizers {
			if !yield(k) {
				return
			}
		}
	})
	loaded := map[string]*tokenizer.Tokenizer{} // by tokenizer.json: names llama.cpp treats alike map alike
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			cases, ok := ref.Cases[name]
			if !ok {
				t.Fatalf("no llama.cpp reference for tokenizer.ggml.pre %q: add it to scripts/fixtures/gguf_pretokenizers.py", name)
			}
			f := (&testFile{}).kv("general.architecture", "llama").kv("tokenizer.ggml.model", "gpt2").
				kv("tokenizer.ggml.pre", name).kv("tokenizer.ggml.tokens", tokens).kv("tokenizer.ggml.token_type", types).
				kv("tokenizer.ggml.merges", merges).kv("tokenizer.ggml.add_bos_token", false)
			g, err := parseBytes(t, f.bytes())
			if err != nil {
				t.Fatal(err)
			}
			tj, cfg, _, err := g.TokenizerFiles()
			if err != nil {
				t.Fatal(err)
			}
			tk := loaded[string(tj)]
			if tk == nil {
				dir := t.TempDir()
				for file, b := range map[string][]byte{"tokenizer.json": tj, "tokenizer_config.json": cfg} {
					if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if tk, err = tokenizer.Load(dir); err != nil {
					t.Fatal(err)
				}
				loaded[string(tj)] = tk
			}
			for _, c := range cases {
				ids, err := tk.Encode(c.Text, false)
				if err != nil || !slices.Equal(ids, c.IDs) {
					t.Errorf("Encode(%q) = %v (%v), llama.cpp %v", c.Text, ids, err, c.IDs)
				}
			}
		})
	}
}
