package tokenizer

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/layerstream/layerstream/internal/testutil"
	"golang.org/x/text/unicode/norm"
)

// FuzzLoad feeds arbitrary tokenizer.json bytes to Parse: errors are fine, panics are not. What loads must also
// encode, decode and stream without panicking.
func FuzzLoad(f *testing.F) {
	f.Add(tiny(f, []string{"a", "b", "ab"}, []string{"a b"}, nil, nil))
	f.Add(tiny(f, []string{"▁", "a", "<0x41>"}, [][]string{{"▁", "a"}}, map[string]any{"byte_fallback": true, "unk_token": "a"},
		map[string]any{"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"}, map[string]any{"type": "NFKC"}}},
			"pre_tokenizer": map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\d+|\s`}, "behavior": "MergedWithNext", "invert": false},
			"decoder":       map[string]any{"type": "Strip", "content": "a", "start": 2, "stop": 1},
			"added_tokens":  []any{map[string]any{"id": 9, "content": "<x>", "lstrip": true, "rstrip": true, "special": true}}}))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0, "\u0120": 1}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}, "decoder": {"type": "ByteLevel"}}`))
	// The Llama-2 layout, small: seeds stay small so that the fuzzer's minimizing stays quick.
	f.Add(tiny(f, []string{"<unk>", "<s>", "▁", "a", "b", "▁a", "<0xC3>", "<0xA9>"}, []string{"▁ a"},
		map[string]any{"unk_token": "<unk>", "byte_fallback": true, "fuse_unk": true}, map[string]any{
			"added_tokens": []any{map[string]any{"id": 0, "content": "<unk>", "special": true},
				map[string]any{"id": 1, "content": "<s>", "special": true}},
			"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
				map[string]any{"type": "Prepend", "prepend": "▁"},
				map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"}}},
			"post_processor": map[string]any{"type": "TemplateProcessing",
				"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>"}}, map[string]any{"Sequence": map[string]any{"id": "A"}}},
				"special_tokens": map[string]any{"<s>": map[string]any{"id": "<s>", "ids": []int{1}}}},
			"decoder": map[string]any{"type": "Sequence", "decoders": []any{
				map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
				map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"},
				map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0}}}}))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse(data, []byte(`{"chat_template": "{{ messages[0].content }}", "bos_token": "a"}`))
		if err != nil {
			return
		}
		for _, text := range []string{"", "ab a  b\n<x> 12 ▁é🙂", "<x><x>"} {
			ids, err := tok.Encode(text, true)
			if err != nil {
				continue
			}
			want := tok.Decode(ids, false)
			d := tok.NewStreamDecoder(false)
			var sb strings.Builder
			for _, id := range ids {
				sb.WriteString(d.Next(id))
			}
			sb.WriteString(d.Flush())
			if sb.String() != want {
				t.Errorf("ids %v: stream %q, Decode %q", ids, sb.String(), want)
			}
		}
		tok.Decode([]int{-1, 0, 1, 2, 3, 1 << 30}, true)
		tok.IDToken(-5)
		tok.VocabSize()
		if _, err := tok.ApplyChatTemplate([]Message{{Role: "user", Content: "hi"}}, true); err != nil {
			t.Errorf("ApplyChatTemplate: %v", err)
		}
	})
}

var (
	fuzzOnce            sync.Once
	fuzzQwen, fuzzLlama *Tokenizer
	fuzzLoadErr         error
)

// FuzzEncode encodes arbitrary text with the real Qwen3 (byte-level) and Llama-2 (byte fallback) tokenizers:
// no panics, streaming equals Decode, and for byte-level decode(encode(x)) is x (after the NFC normalizer).
func FuzzEncode(f *testing.F) {
	qwenDir := testutil.SharedPath(f, "models", "tokenizers", "qwen3")
	llamaDir := testutil.SharedPath(f, "models", "tokenizers", "llama2-32k")
	for _, s := range extraTexts {
		f.Add(s)
	}
	f.Add("Hello, my dog is cute")
	f.Add("\xff\xfe")
	f.Fuzz(func(t *testing.T, text string) {
		fuzzOnce.Do(func() {
			if fuzzQwen, fuzzLoadErr = Load(qwenDir); fuzzLoadErr == nil {
				fuzzLlama, fuzzLoadErr = Load(llamaDir)
			}
		})
		if fuzzLoadErr != nil {
			t.Fatal(fuzzLoadErr)
		}
		for _, tok := range []*Tokenizer{fuzzQwen, fuzzLlama} {
			ids, err := tok.Encode(text, true)
			if !utf8.ValidString(text) {
				if !errors.Is(err, ErrInvalidUTF8) {
					t.Fatalf("Encode(%q): err %v, want ErrInvalidUTF8", text, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("Encode(%q): %v", text, err)
			}
			want := tok.Decode(ids, false)
			if got := streamAll(t, tok, ids, false); got != want {
				t.Fatalf("Encode(%q) = %v: stream %q, Decode %q", text, ids, got, want)
			}
			if tok == fuzzQwen && want != norm.NFC.String(text) {
				t.Fatalf("qwen3: Decode(Encode(%q)) = %q", text, want)
			}
		}
	})
}
