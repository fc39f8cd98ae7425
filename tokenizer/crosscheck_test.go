package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCrossCheck replays cases made by Hugging Face's reference implementation (tokenizers 0.23, see
// testdata/crosscheck/gen.py) for component variants the shared real tokenizers do not use: the GPT-2 and
// Llama-3 pre-tokenizers, ignore_merges, Split behaviors and the regexp2 fallback, normalizers, added-token
// options, Metaspace pre-tokenizers and decoders, Whitespace/Digits/Punctuation.
func TestCrossCheck(t *testing.T) {
	files, err := filepath.Glob("testdata/crosscheck/*.json")
	if err != nil {
		t.Fatal(err)
	}
	bases := map[string]map[string]any{}
	for _, name := range []string{"bytelevel", "metaspace"} {
		b, err := os.ReadFile("testdata/crosscheck/base-" + name + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		bases[name] = m
	}
	n := 0
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		if strings.HasPrefix(name, "base-") || strings.HasPrefix(name, "real-") {
			continue
		}
		n++
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var v struct {
				Base     string         `json:"base"`
				Override map[string]any `json:"override"`
				Cases    []crossCase    `json:"cases"`
				Decode   []crossCase    `json:"decode"` // decodings only: no text
			}
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			tok := mustParse(t, variant(t, bases[v.Base], v.Override), nil)
			for _, c := range v.Cases {
				ids, err := tok.Encode(c.Text, true)
				if err != nil || !slices.Equal(ids, c.IDs) {
					t.Errorf("Encode(%q)\n got %v (%v)\nwant %v", c.Text, ids, err, c.IDs)
				}
			}
			for _, d := range slices.Concat(v.Cases, v.Decode) {
				if got := tok.Decode(d.IDs, false); got != d.Decoded {
					t.Errorf("Decode(%v) = %q, want %q", d.IDs, got, d.Decoded)
				}
				if got := tok.Decode(d.IDs, true); got != d.DecodedSkip {
					t.Errorf("Decode(%v, skip special) = %q, want %q", d.IDs, got, d.DecodedSkip)
				}
				if got := streamAll(t, tok, d.IDs, true); got != d.DecodedSkip {
					t.Errorf("stream(%v) = %q, want %q", d.IDs, got, d.DecodedSkip)
				}
			}
		})
	}
	if n == 0 {
		t.Fatal("no cross-check cases in testdata/crosscheck")
	}
}

// variant applies gen.py's overrides ("model.x" sets a model field) to a base tokenizer.json.
func variant(t *testing.T, base map[string]any, over map[string]any) []byte {
	t.Helper()
	tj := map[string]any{}
	for k, v := range base {
		tj[k] = v
	}
	model := map[string]any{}
	for k, v := range base["model"].(map[string]any) {
		model[k] = v
	}
	for k, v := range over {
		if f, ok := strings.CutPrefix(k, "model."); ok {
			model[f] = v
		} else {
			tj[k] = v
		}
	}
	tj["model"] = model
	b, err := json.Marshal(tj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// crossCase is one case of the reference's fixtures: a text, its ids, and their decodings with and without
// special tokens.
type crossCase struct {
	Text        string `json:"text"`
	IDs         []int  `json:"ids"`
	Decoded     string `json:"decoded"`
	DecodedSkip string `json:"decoded_skip"`
}

// TestCrossCheckReal replays the reference's encodings and decodings of tricky texts (special-token spellings,
// odd whitespace, combining and wide characters) with the shared real tokenizers.
func TestCrossCheckReal(t *testing.T) {
	files, err := filepath.Glob("testdata/crosscheck/real-*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no real-tokenizer cases in testdata/crosscheck (%v)", err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Tokenizer string      `json:"tokenizer"`
			Cases     []crossCase `json:"cases"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		t.Run(v.Tokenizer, func(t *testing.T) {
			tok := loadShared(t, v.Tokenizer)
			for _, c := range v.Cases {
				ids, err := tok.Encode(c.Text, true)
				if err != nil || !slices.Equal(ids, c.IDs) {
					t.Errorf("Encode(%q)\n got %v (%v)\nwant %v", c.Text, ids, err, c.IDs)
				}
				if got := tok.Decode(c.IDs, false); got != c.Decoded {
					t.Errorf("Decode(%v) = %q, want %q", c.IDs, got, c.Decoded)
				}
				if got := streamAll(t, tok, c.IDs, true); got != c.DecodedSkip {
					t.Errorf("stream(%v) = %q, want %q", c.IDs, got, c.DecodedSkip)
				}
			}
		})
	}
}
