package tokenizer

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tiny builds a tokenizer.json with the given vocabulary, merges and extra top-level fields.
func tiny(t testing.TB, vocab []string, merges any, model map[string]any, top map[string]any) []byte {
	t.Helper()
	v := map[string]int{}
	for i, tok := range vocab {
		v[tok] = i
	}
	m := map[string]any{"type": "BPE", "vocab": v, "merges": merges}
	for k, x := range model {
		m[k] = x
	}
	f := map[string]any{"version": "1.0", "model": m}
	for k, x := range top {
		f[k] = x
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustParse(t testing.TB, data, cfg []byte) *Tokenizer {
	t.Helper()
	tok, err := Parse(data, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func encode(t testing.TB, tok *Tokenizer, s string, special bool) []int {
	t.Helper()
	ids, err := tok.Encode(s, special)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestMergeForms checks that "a b" strings and ["a","b"] pairs give the same merges, applied by rank.
func TestMergeForms(t *testing.T) {
	vocab := []string{"a", "b", "c", "ab", "bc", "abc"}
	for _, merges := range []any{
		[]string{"b c", "a b", "a bc"},
		[][]string{{"b", "c"}, {"a", "b"}, {"a", "bc"}},
	} {
		tok := mustParse(t, tiny(t, vocab, merges, nil, nil), nil)
		// "b c" ranks first, so abc = a + bc, not ab + c.
		if got := encode(t, tok, "abcab", false); !slices.Equal(got, []int{5, 3}) {
			t.Errorf("merges %v: got %v", merges, got)
		}
	}
}

func TestUnknownAndFallback(t *testing.T) {
	vocab := []string{"<unk>", "a", "b", "<0xC3>", "<0xA9>"}
	fused := mustParse(t, tiny(t, vocab, []string{}, map[string]any{"unk_token": "<unk>", "fuse_unk": true}, nil), nil)
	if got := encode(t, fused, "axyb", false); !slices.Equal(got, []int{1, 0, 2}) {
		t.Errorf("fuse_unk: got %v", got)
	}
	plain := mustParse(t, tiny(t, vocab, []string{}, map[string]any{"unk_token": "<unk>"}, nil), nil)
	if got := encode(t, plain, "axyb", false); !slices.Equal(got, []int{1, 0, 0, 2}) {
		t.Errorf("unk: got %v", got)
	}
	fb := mustParse(t, tiny(t, vocab, []string{}, map[string]any{"unk_token": "<unk>", "byte_fallback": true},
		map[string]any{"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"}}}}), nil)
	ids := encode(t, fb, "aéz", false)
	if !slices.Equal(ids, []int{1, 3, 4, 0}) {
		t.Errorf("byte_fallback: got %v", ids)
	}
	if got := fb.Decode(ids, false); got != "aé<unk>" {
		t.Errorf("Decode = %q", got)
	}
	noUnk := mustParse(t, tiny(t, vocab, []string{}, nil, nil), nil)
	if got := encode(t, noUnk, "azb", false); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("without unk_token unknown characters are dropped: got %v", got)
	}
}

func TestIgnoreMergesAndPrefix(t *testing.T) {
	vocab := []string{"a", "b", "ab", "abb", "##b", "a##b"}
	tok := mustParse(t, tiny(t, []string{"a", "b", "ab", "abab"}, []string{"a b"}, map[string]any{"ignore_merges": true}, nil), nil)
	if got := encode(t, tok, "abab", false); !slices.Equal(got, []int{3}) {
		t.Errorf("ignore_merges: got %v", got)
	}
	pre := mustParse(t, tiny(t, vocab, []string{"a ##b"}, map[string]any{"continuing_subword_prefix": "##"}, nil), nil)
	if got := encode(t, pre, "ab", false); !slices.Equal(got, []int{2}) {
		t.Errorf("continuing_subword_prefix: got %v", got)
	}
}

func TestAddedTokenOptions(t *testing.T) {
	vocab := []string{"▁", "a", "b", "▁a", "▁b"}
	added := []any{
		map[string]any{"id": 5, "content": "<L>", "lstrip": true, "special": true},
		map[string]any{"id": 6, "content": "<R>", "rstrip": true, "special": true},
		map[string]any{"id": 7, "content": "ab", "single_word": true, "special": false},
	}
	tok := mustParse(t, tiny(t, vocab, []string{"▁ a", "▁ b"}, nil, map[string]any{
		"added_tokens":  added,
		"pre_tokenizer": map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
		"decoder":       map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"},
	}), nil)
	for _, c := range []struct {
		text string
		want []int
	}{
		{"a  <L>b", []int{3, 5, 4}}, // lstrip eats the spaces before <L>
		{"a<R>  b", []int{3, 6, 4}}, // rstrip eats the spaces after <R>
		{"ab", []int{7}},            // a whole word
		{"aab", []int{3, 1, 2}},     // not a whole word: "▁a" "a" "b"
		{"a b", []int{3, 4}},        // Metaspace: "▁a" "▁b"
		{"", nil},
	} {
		if got := encode(t, tok, c.text, false); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
	}
	if got := tok.Decode([]int{3, 4, 5}, true); got != "a b" {
		t.Errorf("Metaspace decode = %q", got)
	}
	if !tok.IsSpecial(5) || tok.IsSpecial(7) || !slices.Equal(tok.SpecialIDs(), []int{5, 6}) {
		t.Errorf("special ids %v", tok.SpecialIDs())
	}
}

func TestPostProcessorsAndConfig(t *testing.T) {
	vocab := []string{"<s>", "</s>", "a"}
	base := func(top map[string]any) []byte { return tiny(t, vocab, []string{}, nil, top) }
	cfg := []byte(`{"add_bos_token": true, "add_eos_token": true, "bos_token": {"content": "<s>"}, "eos_token": "</s>"}`)
	tok := mustParse(t, base(nil), cfg)
	if got := encode(t, tok, "a", true); !slices.Equal(got, []int{0, 2, 1}) {
		t.Errorf("add_bos/eos without post_processor: got %v", got)
	}
	if got := encode(t, tok, "a", false); !slices.Equal(got, []int{2}) {
		t.Errorf("no special tokens: got %v", got)
	}
	if tok.BOS() != 0 || tok.EOS() != 1 {
		t.Errorf("BOS, EOS = %d, %d", tok.BOS(), tok.EOS())
	}
	roberta := mustParse(t, base(map[string]any{"post_processor": map[string]any{
		"type": "RobertaProcessing", "cls": []any{"<s>", 0}, "sep": []any{"</s>", 1}}}), nil)
	if got := encode(t, roberta, "a", true); !slices.Equal(got, []int{0, 2, 1}) {
		t.Errorf("RobertaProcessing: got %v", got)
	}
	if roberta.BOS() != -1 {
		t.Errorf("BOS without tokenizer_config.json = %d, want -1", roberta.BOS())
	}
	if _, err := Parse(base(nil), []byte(`{"add_bos_token": true, "bos_token": "<nope>"}`)); err == nil ||
		!strings.Contains(err.Error(), "<nope>") {
		t.Errorf("add_bos_token with an unknown bos_token: err %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"model": {"type": "WordPiece", "vocab": {"a": 0}}}`, `unsupported model type "WordPiece"`},
		{`{"model": {"type": "Unigram", "vocab": [["a", 0]]}}`, "only BPE"},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}`, "merges: [0]"},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "normalizer": {"type": "Precompiled"}}`, `unsupported normalizer type "Precompiled"`},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "decoder": {"type": "CTC"}}`, `decoder: unsupported decoder type "CTC"`},
		{`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []}}`, "id 0 is used by both"},
		{`{"version": "1.0"}`, `no "model"`},
		{`{"model": {"type": "BPE", "vocab": {"a": 0}`, "JSON"},
	} {
		_, err := Parse([]byte(c.json), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s): err %v, want it to mention %q", c.json, err, c.want)
		}
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("Load of an empty folder: %v", err)
	}
}

func TestEncodeInvalidUTF8(t *testing.T) {
	tok := mustParse(t, tiny(t, []string{"a"}, []string{}, nil, nil), nil)
	if _, err := tok.Encode("a\xff", false); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("err %v", err)
	}
}

// TestDecodeStripStop checks a decoder that strips trailing characters: streaming must hold them back.
func TestDecodeStripStop(t *testing.T) {
	tok := mustParse(t, tiny(t, []string{"▁a", "▁", "b"}, []string{}, nil, map[string]any{
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 2},
		}},
	}), nil)
	for _, ids := range [][]int{{0, 1, 1, 1}, {1, 1, 0, 1}, {0, 1, 2, 1, 1, 1}, {1}, {1, 1, 1}} {
		want := tok.Decode(ids, false)
		if got := streamAll(t, tok, ids, false); got != want {
			t.Errorf("ids %v: stream %q, Decode %q", ids, got, want)
		}
	}
	if got := tok.Decode([]int{1, 0, 1, 1, 1}, false); got != " a " {
		t.Errorf("Decode = %q, want %q", got, " a ")
	}
}

func TestSplitSpecialTokens(t *testing.T) {
	data := tiny(t, []string{"<", "s", ">", "a"}, []string{}, nil, map[string]any{
		"added_tokens": []any{map[string]any{"id": 4, "content": "<s>", "special": true}}})
	if got := encode(t, mustParse(t, data, nil), "a<s>", false); !slices.Equal(got, []int{3, 4}) {
		t.Errorf("special token matched: got %v", got)
	}
	split := mustParse(t, data, []byte(`{"split_special_tokens": true}`))
	if got := encode(t, split, "a<s>", false); !slices.Equal(got, []int{3, 0, 1, 2}) {
		t.Errorf("split_special_tokens: got %v", got)
	}
	if got := split.Decode([]int{4, 3}, true); got != "a" {
		t.Errorf("Decode still knows the special token: got %q", got)
	}
}

// TestModelFieldOrder checks that merges read before the vocabulary or before continuing_subword_prefix (other
// writers than Hugging Face may order fields so) give the same model.
func TestModelFieldOrder(t *testing.T) {
	for _, model := range []string{
		`{"type": "BPE", "continuing_subword_prefix": "##", "vocab": {"a": 0, "##b": 1, "ab": 2, "b": 3}, "merges": ["a ##b"]}`,
		`{"merges": [["a", "##b"]], "type": "BPE", "vocab": {"a": 0, "##b": 1, "ab": 2, "b": 3}, "continuing_subword_prefix": "##"}`,
		`{"vocab": {"a": 0, "##b": 1, "ab": 2, "b": 3}, "merges": ["a ##b"], "continuing_subword_prefix": "##"}`,
	} {
		tok, err := Parse([]byte(`{"model": `+model+`}`), nil)
		if err != nil {
			t.Errorf("%s: %v", model, err)
			continue
		}
		if got := encode(t, tok, "ab", false); !slices.Equal(got, []int{2}) {
			t.Errorf("%s: got %v", model, got)
		}
	}
}

// TestChatTemplateSources: Load finds the chat template where transformers does — chat_template.jinja over
// tokenizer_config.json's, then tokenizer_config.json's, then a processor's chat_template.json — and names a
// broken chat_template.json.
func TestChatTemplateSources(t *testing.T) {
	render := func(t *testing.T, dir string) string {
		t.Helper()
		tok, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if !tok.HasChatTemplate() {
			return ""
		}
		s, err := tok.ApplyChatTemplate([]Message{{Role: "user", Content: "x"}}, false)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	write := func(t *testing.T, files map[string]string) string {
		t.Helper()
		dir := t.TempDir()
		files["tokenizer.json"] = string(tiny(t, []string{"a"}, []string{}, nil, nil))
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	const cfg, jinja, proc = `{"chat_template": "config"}`, "jinja", `{"chat_template": "processor"}`
	for _, c := range []struct {
		files map[string]string
		want  string
	}{
		{map[string]string{"tokenizer_config.json": cfg, "chat_template.jinja": jinja, "chat_template.json": proc}, "jinja"},
		{map[string]string{"tokenizer_config.json": cfg, "chat_template.json": proc}, "config"},
		{map[string]string{"chat_template.json": proc}, "processor"},
		{map[string]string{}, ""},
	} {
		if got := render(t, write(t, c.files)); got != c.want {
			t.Errorf("files %v: template %q, want %q", slices.Sorted(maps.Keys(c.files)), got, c.want)
		}
	}
	if _, err := Load(write(t, map[string]string{"chat_template.json": `{"chat_template": 3}`})); err == nil || !strings.Contains(err.Error(), "chat_template.json") {
		t.Errorf("a broken chat_template.json: %v, want an error naming it", err)
	}
}
