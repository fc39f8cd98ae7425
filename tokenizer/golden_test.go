package tokenizer

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

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

// More texts for round trips and streaming: markup, code, mixed scripts, invalid-looking byte sequences.
var extraTexts = []string{
	"<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
	"The quick brown fox jumps over the lazy dog. THE END!!! 12,345.67 — «quotes» ‘single’",
	"def f(x):\n\treturn x ** 2  # square\n\n\n",
	"Ünïcödé ñ ß Ελληνικά русский עברית العربية हिन्दी 한국어 中文 🤖🎉👩‍👩‍👧",
	"'s 'S 'LL 'Re don't WON'T I'M",
	"   leading and trailing   \n\n  ",
	"\r\n\r\n\t \u00a0\u3000x",
}

// TestRoundTripByteLevel checks decode(encode(x)) == x for the byte-level tokenizer (after its NFC normalizer).
func TestRoundTripByteLevel(t *testing.T) {
	tok := loadShared(t, "tokenizers/qwen3")
	texts := extraTexts
	for _, c := range loadGolden(t, "qwen3") {
		texts = append(texts, c.Text)
	}
	for _, text := range texts {
		ids, err := tok.Encode(text, false)
		if err != nil {
			t.Fatalf("Encode(%q): %v", text, err)
		}
		if got := tok.Decode(ids, false); got != text {
			t.Errorf("Decode(Encode(%q)) = %q", text, got)
		}
	}
}

// TestStreamMatchesDecode streams every golden and extra encoding id by id: the pieces must be whole UTF-8
// characters and concatenate to Decode.
func TestStreamMatchesDecode(t *testing.T) {
	for _, g := range goldenTokenizers {
		t.Run(g.name, func(t *testing.T) {
			tok := loadShared(t, g.dir)
			var all [][]int
			for _, c := range loadGolden(t, g.name) {
				all = append(all, c.IDs)
			}
			for _, text := range extraTexts {
				ids, err := tok.Encode(text, true)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, ids)
			}
			for _, ids := range all {
				for _, skip := range []bool{false, true} {
					want := tok.Decode(ids, skip)
					got := streamAll(t, tok, ids, skip)
					if got != want {
						t.Errorf("skip=%v ids %v: stream %q, Decode %q", skip, ids, got, want)
					}
				}
			}
		})
	}
}

// streamAll decodes ids through a StreamDecoder, failing on a piece that is not valid UTF-8 or holds a
// replacement character the full text does not have.
func streamAll(t *testing.T, tok *Tokenizer, ids []int, skip bool) string {
	t.Helper()
	d := tok.NewStreamDecoder(skip)
	var sb strings.Builder
	for _, id := range ids {
		p := d.Next(id)
		if !utf8.ValidString(p) {
			t.Errorf("piece %q after id %d is not valid UTF-8", p, id)
		}
		sb.WriteString(p)
	}
	sb.WriteString(d.Flush())
	return sb.String()
}

// TestStreamGoldenGeneration streams llama2.c's greedy stories260K generation. llama2.c printed the prompt's
// pieces, the generated pieces (dropping the space after BOS) and then a final "\n" of its own (run.c's
// printf("\n") after the loop); Decode of the ids, skipping BOS, is the text without that last newline.
func TestStreamGoldenGeneration(t *testing.T) {
	cases := testutil.StoriesGolden(t)
	tok := loadShared(t, "stories260K-hf")
	for _, c := range cases {
		ids := append(slices.Clone(c.PromptIDs), c.GeneratedIDs...)
		want, ok := strings.CutSuffix(c.Text, "\n")
		if !ok {
			t.Fatalf("golden text %q does not end with llama2.c's newline", c.Text)
		}
		if got := streamAll(t, tok, ids, true); got != want {
			t.Errorf("stream:\n got %q\nwant %q", got, want)
		}
		if got := tok.Decode(ids, true); got != want {
			t.Errorf("Decode:\n got %q\nwant %q", got, want)
		}
	}
}

// TestStreamHoldsPartialCharacters checks that an emoji spelled with four byte-fallback (llama) or byte-level
// (qwen) tokens comes out whole, at once.
func TestStreamHoldsPartialCharacters(t *testing.T) {
	for _, dir := range []string{"tokenizers/llama2-32k", "tokenizers/qwen3"} {
		tok := loadShared(t, dir)
		ids, err := tok.Encode("a🙂b", false)
		if err != nil {
			t.Fatal(err)
		}
		d := tok.NewStreamDecoder(true)
		var pieces []string
		for _, id := range ids {
			if p := d.Next(id); p != "" {
				pieces = append(pieces, p)
			}
		}
		if p := d.Flush(); p != "" {
			pieces = append(pieces, p)
		}
		if strings.Join(pieces, "") != "a🙂b" && strings.Join(pieces, "") != " a🙂b" {
			t.Errorf("%s: pieces %q", dir, pieces)
		}
		for _, p := range pieces {
			if strings.ContainsRune(p, utf8.RuneError) || (strings.Contains(p, "\xf0") && !strings.Contains(p, "🙂")) {
				t.Errorf("%s: piece %q splits the emoji (ids %v)", dir, p, ids)
			}
		}
	}
}

// TestStreamInvalidBytes checks that byte tokens that never form a character give what Decode gives.
func TestStreamInvalidBytes(t *testing.T) {
	for _, dir := range []string{"tokenizers/llama2-32k", "tokenizers/qwen3"} {
		tok := loadShared(t, dir)
		emoji := byteTokens(t, tok, []byte("🙂"))
		hi, _ := tok.Encode("hi", false)
		cases := [][]int{
			emoji[2:],                              // continuation bytes only
			append(slices.Clone(emoji[:2]), hi...), // a cut sequence, then text
			append(slices.Clone(hi), emoji[:3]...), // a cut sequence at the end
		}
		for _, ids := range cases {
			want := tok.Decode(ids, false)
			if !strings.ContainsRune(want, utf8.RuneError) {
				t.Errorf("%s: Decode(%v) = %q has no U+FFFD", dir, ids, want)
			}
			if got := streamAll(t, tok, ids, false); got != want {
				t.Errorf("%s: stream(%v) = %q, Decode %q", dir, ids, got, want)
			}
		}
	}
}

// byteTokens returns the ids of the single-byte tokens spelling b: "<0xXX>" (byte fallback) or byte-level ones.
func byteTokens(t *testing.T, tok *Tokenizer, b []byte) []int {
	t.Helper()
	var ids []int
	for _, c := range b {
		id, ok := tok.TokenID(fmt.Sprintf("<0x%02X>", c))
		if !ok {
			id, ok = tok.TokenID(string(byteLevelRunes[c]))
		}
		if !ok {
			t.Fatalf("no token for byte 0x%02X", c)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestStreamPrime checks that a stream primed with the prompt keeps the space before the first generated word
// (the Llama decoder strips one leading space at the start of the text).
func TestStreamPrime(t *testing.T) {
	tok := loadShared(t, "stories260K-hf")
	prompt := encode(t, tok, "Once upon a", true)
	rest := encode(t, tok, "Once upon a time", true)[len(prompt):] // "▁time"
	d := tok.NewStreamDecoder(true)
	d.Prime(prompt)
	var sb strings.Builder
	for _, id := range rest {
		sb.WriteString(d.Next(id))
	}
	sb.WriteString(d.Flush())
	if got := sb.String(); got != " time" {
		t.Errorf("after priming with %v, ids %v stream %q, want %q", prompt, rest, got, " time")
	}
}

// TestConcurrentUse encodes and decodes from several goroutines at once (run with -race).
func TestConcurrentUse(t *testing.T) {
	tok := loadShared(t, "tokenizers/llama2-32k")
	cases := loadGolden(t, "llama2-32k")
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				c := cases[(g+i)%len(cases)]
				ids, err := tok.Encode(c.Text, true)
				if err != nil || !slices.Equal(ids, c.IDs) {
					t.Errorf("Encode(%q) = %v, %v", c.Text, ids, err)
					return
				}
				if got := streamAll(t, tok, ids, false); got != c.Decoded {
					t.Errorf("stream %q, want %q", got, c.Decoded)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestMergeShortMatchesQueue checks that the scanning merge of short words and the priority-queue merge agree,
// by encoding with every word sent through the queue.
func TestMergeShortMatchesQueue(t *testing.T) {
	texts := slices.Clone(extraTexts)
	for _, c := range loadGolden(t, "qwen3") {
		texts = append(texts, c.Text, strings.Repeat(c.Text, 5))
	}
	for _, dir := range []string{"tokenizers/qwen3", "tokenizers/llama2-32k"} {
		short, long := loadShared(t, dir), loadShared(t, dir)
		for _, text := range texts {
			want := encode(t, short, text, true)
			maxShortWord = 0
			got := encode(t, long, text, true)
			maxShortWord = 48
			if !slices.Equal(got, want) {
				t.Errorf("%s %q: queue %v, scan %v", dir, text, got, want)
			}
		}
	}
}
