package gguf

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// TestNonFiniteFloatsRefused: a NaN or an infinity in a float metadata value (float32 or float64) is refused
// naming the file and the key, not passed on to config.json (where it surfaced as `json: invalid number literal
// "NaN"`, naming neither); a norm's epsilon and the rotary base must also be above 0.
func TestNonFiniteFloatsRefused(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	f32 := func(k string, v float32) KV { return KV{k, Value{Type: TypeFloat32, V: v}} }
	cases := []struct {
		kvs  []KV
		want string
	}{
		{[]KV{f32("llama.rope.freq_base", nan)}, "metadata llama.rope.freq_base: NaN (want a finite positive number)"},
		{[]KV{f32("llama.rope.freq_base", inf)}, "metadata llama.rope.freq_base: +Inf (want a finite positive number)"},
		{[]KV{f32("llama.rope.freq_base", 0)}, "metadata llama.rope.freq_base: 0 (want a finite positive number)"},
		{[]KV{f32("llama.attention.layer_norm_rms_epsilon", nan)}, "metadata llama.attention.layer_norm_rms_epsilon: NaN (want a finite positive number)"},
		{[]KV{f32("llama.attention.layer_norm_rms_epsilon", -inf)}, "metadata llama.attention.layer_norm_rms_epsilon: -Inf (want a finite positive number)"},
		{[]KV{{"llama.attention.layer_norm_rms_epsilon", Value{Type: TypeFloat64, V: math.NaN()}}}, "metadata llama.attention.layer_norm_rms_epsilon: NaN (want a finite positive number)"},
		{[]KV{{"llama.rope.scaling.type", Value{Type: TypeString, V: "linear"}}, f32("llama.rope.scaling.factor", nan)}, "metadata llama.rope.scaling.factor: NaN (want a finite number)"},
		{[]KV{f32("llama.rope.scale_linear", inf)}, "metadata llama.rope.scale_linear: +Inf (want a finite number)"},
		{[]KV{f32("llama.rope.scaling.attn_factor", nan)}, "metadata llama.rope.scaling.attn_factor: NaN (want a finite number)"},
	}
	for _, c := range cases {
		path := writeTemp(t, tinyLlama(t4{extraKV: c.kvs}).bytes())
		if _, err := openCheckpointAndFiles(path); err == nil || !strings.Contains(err.Error(), "gguf "+path+": "+c.want) {
			t.Errorf("got %v, want an error containing %q", err, "gguf "+path+": "+c.want)
		}
	}
	// A rotary factor tensor (rope_freqs.weight) holding a NaN is refused by tensor and index too.
	f := tinyLlama(t4{})
	f.tensor("rope_freqs.weight", quant.F32, f32Bytes(1, 1, 1, nan, 1, 1, 1, 1), tinyHidden/tinyHeads/2)
	path := writeTemp(t, f.bytes())
	want := `tensor "rope_freqs.weight": factor [3] is NaN (want a finite positive number)`
	if _, err := OpenCheckpoint(path); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want an error containing %q", err, want)
	}
}

// TestSentencePieceVocabularyRefused: vocabulary entries tokenizer.json cannot hold as llama.cpp reads them are
// refused by key and index, naming the file, when the checkpoint is opened (before any split).
func TestSentencePieceVocabularyRefused(t *testing.T) {
	types := []int32{2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1, 1}
	scores := []float32{0, 0, 0, 0, 0, -1, -2, -3, -4, -5, -6, -7}
	cases := []struct {
		edit func(tokens []string, types []int32, scores []float32)
		want string
	}{
		{func(_ []string, ty []int32, _ []float32) { ty[7] = 99 }, "metadata tokenizer.ggml.token_type[7]: 99 (want 0-6"},
		{func(_ []string, ty []int32, _ []float32) { ty[5] = -1 }, "metadata tokenizer.ggml.token_type[5]: -1 (want 0-6"},
		{func(to []string, _ []int32, _ []float32) { to[6] = "\xff" }, `metadata tokenizer.ggml.tokens[6]: "\xff" is not valid UTF-8 (a SentencePiece vocabulary`},
		{func(to []string, _ []int32, _ []float32) { to[8] = "a" }, `metadata tokenizer.ggml.tokens[8]: "a" repeats tokenizer.ggml.tokens[6]`},
		{func(to []string, _ []int32, _ []float32) { to[4] = "<0x6g>" }, `metadata tokenizer.ggml.tokens[4]: "<0x6g>" has type 6 (byte) in tokenizer.ggml.token_type: want "<0xNN>"`},
		{func(to []string, _ []int32, _ []float32) { to[4] = "<0x6a>" }, `metadata tokenizer.ggml.tokens[4]: "<0x6a>" has type 6 (byte)`},
		{func(_ []string, _ []int32, sc []float32) { sc[9] = float32(math.NaN()) }, "metadata tokenizer.ggml.scores[9]: NaN"},
	}
	for _, c := range cases {
		to, ty, sc := slices.Clone(tinyTokens), slices.Clone(types), slices.Clone(scores)
		c.edit(to, ty, sc)
		path := writeTemp(t, tinyLlama(t4{extraKV: []KV{
			{"tokenizer.ggml.tokens", Value{Type: TypeArray, Elem: TypeString, V: to}},
			{"tokenizer.ggml.token_type", Value{Type: TypeArray, Elem: TypeInt32, V: ty}},
			{"tokenizer.ggml.scores", Value{Type: TypeArray, Elem: TypeFloat32, V: sc}},
		}}).bytes())
		if _, err := openCheckpointAndFiles(path); err == nil || !strings.Contains(err.Error(), "gguf "+path+": "+c.want) {
			t.Errorf("got %v, want an error containing %q", err, "gguf "+path+": "+c.want)
		}
	}
	// Empty tokens may repeat: llama.cpp renames each "[EMPTY_<id>]".
	to := slices.Clone(tinyTokens)
	to[10], to[11] = "", ""
	path := writeTemp(t, tinyLlama(t4{extraKV: []KV{{"tokenizer.ggml.tokens", Value{Type: TypeArray, Elem: TypeString, V: to}}}}).bytes())
	if _, err := OpenCheckpoint(path); err != nil {
		t.Errorf("two empty tokens: %v", err)
	}
}

// TestUndefinedTokenType: a token of type 0 (LLAMA_TOKEN_TYPE_UNDEFINED) is accepted as llama.cpp accepts it
// (llama-vocab.cpp gives it LLAMA_TOKEN_ATTR_UNDEFINED, which its SentencePiece and byte-level BPE tokenizers
// treat as they treat an unused token's: in the vocabulary, never matched as a special token), so the tokenizer
// made is the one of the same file with type 5 (unused) there.
func TestUndefinedTokenType(t *testing.T) {
	files := func(typ int32) []byte {
		t.Helper()
		ty := []int32{2, 3, 3, 6, 6, 1, 1, typ, 1, 1, 1, 1}
		f, err := Open(writeTemp(t, tinyLlama(t4{extraKV: []KV{{"tokenizer.ggml.token_type", Value{Type: TypeArray, Elem: TypeInt32, V: ty}}}}).bytes()))
		if err != nil {
			t.Fatal(err)
		}
		tok, _, _, err := f.TokenizerFiles()
		if err != nil {
			t.Fatalf("token type %d: %v", typ, err)
		}
		return tok
	}
	if undefined, unused := files(0), files(tokenUnused); string(undefined) != string(unused) {
		t.Errorf("type 0 made another tokenizer than type 5 (unused):\n%s\n%s", undefined, unused)
	}
}

// TestByteLevelVocabularyRefused: a byte-level BPE ("gpt2") vocabulary with a token that is not valid UTF-8 (one
// byte overwritten with 0xff, as a corrupted download has it), or a merge whose parts or join are not tokens, is
// refused by key and index when the tokenizer is made; it used to pass here and fail only after the split, when
// the engine loaded tokenizer.json, naming the shard folder.
func TestByteLevelVocabularyRefused(t *testing.T) {
	g := openFamily(t, "llama2")
	tokens, _, err := g.Strings("tokenizer.ggml.tokens")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := g.TokenizerFiles(); err != nil {
		t.Fatal(err)
	}
	i := slices.Index(tokens, "ĠĠ")
	if i < 0 {
		t.Fatal("no ĠĠ token")
	}
	cases := []struct {
		key  string
		v    Value
		want string
	}{
		{"tokenizer.ggml.tokens", Value{Type: TypeArray, Elem: TypeString, V: slices.Replace(slices.Clone(tokens), i, i+1, "\xff")},
			`metadata tokenizer.ggml.tokens[` + strconv.Itoa(i) + `]: "\xff" is not valid UTF-8 (a byte-level BPE vocabulary (tokenizer.ggml.model "gpt2") holds its tokens in GPT-2's byte-to-unicode form`},
		{"tokenizer.ggml.tokens", Value{Type: TypeArray, Elem: TypeString, V: slices.Replace(slices.Clone(tokens), i, i+1, "t")},
			`metadata tokenizer.ggml.tokens[` + strconv.Itoa(i) + `]: "t" repeats tokenizer.ggml.tokens[`},
		{"tokenizer.ggml.merges", Value{Type: TypeArray, Elem: TypeString, V: []string{"Ġ Ġ", "ĠĠ Ġ"}},
			`metadata tokenizer.ggml.merges[1]: "ĠĠ Ġ": "ĠĠĠ" is not in tokenizer.ggml.tokens`},
		{"tokenizer.ggml.merges", Value{Type: TypeArray, Elem: TypeString, V: []string{"Ġx Ġ"}},
			`metadata tokenizer.ggml.merges[0]: "Ġx Ġ": "Ġx" is not in tokenizer.ggml.tokens`},
		{"tokenizer.ggml.merges", Value{Type: TypeArray, Elem: TypeString, V: []string{"Ġ Ġ Ġ"}},
			`metadata tokenizer.ggml.merges[0]: "Ġ Ġ Ġ" is not two tokens separated by a space`},
	}
	for _, c := range cases {
		g := openFamily(t, "llama2")
		setKV(g, c.key, &c.v)
		if _, err := checkpointAndFiles(g); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
}
