package tokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
)

type goldenCase struct {
	Text    string `json:"text"`
	IDs     []int  `json:"ids"`
	Decoded string `json:"decoded"`
}

func loadGolden(t *testing.T, name string) []goldenCase {
	t.Helper()
	b, err := os.ReadFile(testutil.SharedPath(t, "golden", "tokenizer."+name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) == 0 {
		t.Fatalf("golden %s has no cases", name)
	}
	return g.Cases
}

// goldenTokenizers maps each golden file to the tokenizer folder it was made from.
var goldenTokenizers = []struct{ name, dir string }{
	{"stories260K", "stories260K-hf"},
	{"llama2-32k", "tokenizers/llama2-32k"},
	{"qwen3", "tokenizers/qwen3"},
}

func loadShared(t testing.TB, dir string) *Tokenizer {
	t.Helper()
	tok, err := Load(testutil.SharedPath(t, "models", dir))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestGoldenEncode(t *testing.T) {
	for _, g := range goldenTokenizers {
		t.Run(g.name, func(t *testing.T) {
			tok := loadShared(t, g.dir)
			for _, c := range loadGolden(t, g.name) {
				got, err := tok.Encode(c.Text, true)
				if err != nil {
					t.Errorf("Encode(%q): %v", c.Text, err)
					continue
				}
				if !slices.Equal(got, c.IDs) {
					t.Errorf("Encode(%q)\n got %v\nwant %v", c.Text, got, c.IDs)
				}
				if dec := tok.Decode(c.IDs, false); dec != c.Decoded {
					t.Errorf("Decode(%v) = %q, want %q", c.IDs, dec, c.Decoded)
				}
			}
		})
	}
}
