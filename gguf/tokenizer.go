package gguf

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/layerstream/layerstream/tokenizer"
)

// llama.cpp's token types (tokenizer.ggml.token_type).
const (
	tokenUndefined   = 0
	tokenNormal      = 1
	tokenUnknown     = 2
	tokenControl     = 3
	tokenUserDefined = 4
	tokenUnused      = 5
	tokenByte        = 6
)

// Pre-tokenizers of byte-level BPE vocabularies, by tokenizer.ggml.pre, in tokenizer.json's terms (each the
// Hugging Face equivalent of the regexes llama.cpp's llama-vocab.cpp applies for that name).
var (
	byteLevelRegex = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}
	byteLevelPlain = map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}
	splitThen      = func(pattern string) map[string]any {
		return map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]string{"Regex": pattern}, "behavior": "Isolated", "invert": false},
			byteLevelPlain}}
	}
	llama3Split = splitThen(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`)
	qwen2Split  = splitThen(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`)
	gpt4oSplit  = splitThen(`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`)
	digitsThen  = map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Digits", "individual_digits": true}, byteLevelRegex}}

	preTokenizers = map[string]struct {
		json         any
		ignoreMerges bool // llama.cpp sets ignore_merges for these (whole-word vocabulary hits skip BPE)
	}{
		"gpt-2": {json: byteLevelRegex}, "phi-2": {json: byteLevelRegex}, "mpt": {json: byteLevelRegex}, "olmo": {json: byteLevelRegex},
		"dbrx": {json: llama3Split}, "smaug-bpe": {json: llama3Split}, // llama3's regex without its ignore_merges
		"gpt-4o": {json: gpt4oSplit}, "llama4": {json: gpt4oSplit},
		"llama3": {json: llama3Split, ignoreMerges: true}, "llama-v3": {json: llama3Split, ignoreMerges: true},
		"llama-bpe": {json: llama3Split, ignoreMerges: true},
		"qwen2":     {json: qwen2Split}, "deepseek-r1-qwen": {json: qwen2Split}, "stablelm2": {json: qwen2Split},
		"smollm": {json: digitsThen}, "starcoder": {json: digitsThen}, "refact": {json: digitsThen},
		"codeshell": {json: digitsThen}, "command-r": {json: digitsThen},
	}
)

// TokenizerFiles makes tokenizer.json and tokenizer_config.json from the tokenizer.ggml.* metadata, and
// returns tokenizer.chat_template. Byte-level BPE vocabularies (model "gpt2") keep their merges and get the
// pre-tokenizer tokenizer.ggml.pre names; SentencePiece vocabularies (model "llama") become a BPE with byte
// fallback whose merges follow the scores, as llama.cpp's tokenizer merges the highest-scoring pair first.
// Control tokens become special added tokens, user-defined tokens plain added tokens.
func (g *File) TokenizerFiles() (tokenizerJSON, configJSON []byte, chatTemplate string, err error) {
	model, tokens, types, err := g.vocab()
	if err != nil {
		return nil, nil, "", err
	}
	if tokenizerJSON, err = g.tokenizerJSON(model, tokens, types); err != nil {
		return nil, nil, "", err
	}
	if configJSON, err = g.tokenizerConfig(model, tokens); err != nil {
		return nil, nil, "", err
	}
	if chatTemplate, _, err = g.String("tokenizer.chat_template"); err != nil {
		return nil, nil, "", err
	}
	// Build the tokenizer the engine will load from these files now, so a vocabulary it refuses is refused here,
	// naming the GGUF file, rather than after the split, naming the shard folder.
	if _, err := tokenizer.Parse(tokenizerJSON, configJSON); err != nil {
		return nil, nil, "", fmt.Errorf("the tokenizer made from the tokenizer.ggml.* metadata: %w", err)
	}
	return tokenizerJSON, configJSON, chatTemplate, nil
}

// vocab reads the tokenizer's model, tokens and token types, checked (checkVocab, and the special token ids
// within the vocabulary).
func (g *File) vocab() (model string, tokens []string, types []int, err error) {
	model, ok, err := g.String("tokenizer.ggml.model")
	if err != nil {
		return "", nil, nil, err
	}
	if !ok {
		return "", nil, nil, fmt.Errorf("no tokenizer.ggml.model: the file carries no tokenizer")
	}
	tokens, ok, err = g.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return "", nil, nil, err
	}
	if !ok || len(tokens) == 0 {
		return "", nil, nil, fmt.Errorf("no tokenizer.ggml.tokens")
	}
	types, ok, err = g.Ints("tokenizer.ggml.token_type")
	if err != nil {
		return "", nil, nil, err
	}
	if !ok {
		types = make([]int, len(tokens))
		for i := range types {
			types[i] = tokenNormal
		}
	}
	if len(types) != len(tokens) {
		return "", nil, nil, fmt.Errorf("tokenizer.ggml.token_type has %d entries, tokenizer.ggml.tokens %d", len(types), len(tokens))
	}
	if err := checkVocab(model, tokens, types); err != nil {
		return "", nil, nil, err
	}
	// llama.cpp (llama-vocab.cpp, llama_vocab::impl::load) gives a token of type 0 (LLAMA_TOKEN_TYPE_UNDEFINED)
	// the attribute LLAMA_TOKEN_ATTR_UNDEFINED, which its SentencePiece and byte-level BPE tokenizers treat as
	// they treat LLAMA_TOKEN_ATTR_UNUSED: the token stays in the vocabulary, is never matched as a special token
	// in the text, and token_to_piece prints neither ("we accept all unsupported token types, suppressing them
	// like CONTROL tokens"). It is read as an unused token, whose text layerstream's decoder prints.
	types = slices.Clone(types)
	for i, t := range types {
		if t == tokenUndefined {
			types[i] = tokenUnused
		}
	}
	for _, k := range []string{"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
		"tokenizer.ggml.padding_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		if v, ok, err := g.Int(k); err != nil {
			return "", nil, nil, err
		} else if ok && v >= len(tokens) {
			return "", nil, nil, fmt.Errorf("metadata %s is %d, past the %d tokens", k, v, len(tokens))
		}
	}
	return model, tokens, types, nil
}

// tokenizerJSON makes tokenizer.json: a byte-level BPE (model "gpt2") or SentencePiece vocabulary's (model
// "llama") model and pre-tokenizer, and the added tokens.
func (g *File) tokenizerJSON(model string, tokens []string, types []int) ([]byte, error) {
	var tok map[string]any
	var err error
	switch model {
	case "gpt2":
		tok, err = g.byteLevelBPE(tokens, types)
	case "llama":
		tok, err = g.sentencePieceBPE(tokens, types)
	default:
		err = fmt.Errorf("tokenizer.ggml.model %q is not supported (supported: gpt2, llama)", model)
	}
	if err != nil {
		return nil, err
	}
	tok["version"] = "1.0"
	tok["added_tokens"] = addedTokens(tokens, types)
	tok["post_processor"] = nil // tokenizer_config.json's add_bos_token / add_eos_token decide
	return json.Marshal(tok)
}

// tokenizerConfig makes tokenizer_config.json: the special tokens' texts, and whether BOS and EOS are added.
func (g *File) tokenizerConfig(model string, tokens []string) ([]byte, error) {
	cfg := map[string]any{}
	for k, key := range map[string]string{"bos_token": "tokenizer.ggml.bos_token_id", "eos_token": "tokenizer.ggml.eos_token_id",
		"unk_token": "tokenizer.ggml.unknown_token_id", "pad_token": "tokenizer.ggml.padding_token_id"} {
		v, ok, err := g.Int(key)
		if err != nil {
			return nil, err
		}
		if ok && tokens[v] != "" {
			cfg[k] = tokens[v]
		}
	}
	// llama.cpp adds BOS by default for SentencePiece vocabularies and not for BPE ones, unless the file says.
	addBOS := model == "llama"
	if v, ok, err := g.Bool("tokenizer.ggml.add_bos_token"); err != nil {
		return nil, err
	} else if ok {
		addBOS = v
	}
	addEOS, _, err := g.Bool("tokenizer.ggml.add_eos_token")
	if err != nil {
		return nil, err
	}
	if (addBOS && cfg["bos_token"] == nil) || (addEOS && cfg["eos_token"] == nil) {
		return nil, fmt.Errorf("tokenizer.ggml.add_bos_token/add_eos_token is set but the token id is missing")
	}
	cfg["add_bos_token"], cfg["add_eos_token"] = addBOS, addEOS
	configJSON, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(configJSON, '\n'), nil
}

// checkVocab refuses, by key and index, the vocabulary entries layerstream cannot turn into tokenizer.json
// faithfully. It refuses nothing llama.cpp reads as written (llama-vocab.cpp, llama_vocab::impl::load):
//   - token types outside 0-6: llama.cpp maps any value but 1-6 to LLAMA_TOKEN_ATTR_UNDEFINED without a word,
//     as it maps 0 (LLAMA_TOKEN_TYPE_UNDEFINED, read here as unused: TokenizerFiles); no converter writes other
//     values (gguf-py's TokenType is 1-6), so one is taken for a damaged file rather than read as undefined.
//   - tokens that are not valid UTF-8: tokenizer.json (JSON) cannot hold them. A byte-level BPE vocabulary
//     ("gpt2") stores its tokens in GPT-2's byte-to-unicode form, always valid UTF-8 (llama.cpp decodes anything
//     else as "[UNK_BYTE_…]"); a SentencePiece one ("llama") holds UTF-8 pieces and its bytes as "<0xNN>" tokens.
//   - the same token twice (empty ones aside, which llama.cpp renames "[EMPTY_<id>]"): llama.cpp aborts on it
//     (GGML_ASSERT(id_to_token.size() == token_to_id.size())).
//   - a SentencePiece byte token (type 6) not spelled "<0xNN>" with uppercase hex digits: llama.cpp reads the
//     byte from characters 3-4 of its text and looks bytes up as "<0x%02X>", as tokenizer.json's byte fallback does.
func checkVocab(model string, tokens []string, types []int) error {
	for i, t := range types {
		if t < tokenUndefined || t > tokenByte {
			return fmt.Errorf("metadata tokenizer.ggml.token_type[%d]: %d (want 0-6: undefined, normal, unknown, control, user-defined, unused or byte; llama.cpp would silently treat the token as undefined)", i, t)
		}
	}
	seen := make(map[string]int, len(tokens))
	for i, t := range tokens {
		if !utf8.ValidString(t) {
			why := "a SentencePiece vocabulary (tokenizer.ggml.model \"llama\") holds UTF-8 pieces, its byte tokens as \"<0xNN>\""
			if model == "gpt2" {
				why = "a byte-level BPE vocabulary (tokenizer.ggml.model \"gpt2\") holds its tokens in GPT-2's byte-to-unicode form, always valid UTF-8"
			}
			return fmt.Errorf("metadata tokenizer.ggml.tokens[%d]: %q is not valid UTF-8 (%s)", i, t, why)
		}
		if j, dup := seen[t]; dup && t != "" {
			return fmt.Errorf("metadata tokenizer.ggml.tokens[%d]: %q repeats tokenizer.ggml.tokens[%d] (llama.cpp refuses a repeated token too)", i, t, j)
		}
		seen[t] = i
		if model == "llama" && types[i] == tokenByte && !isByteToken(t) {
			return fmt.Errorf("metadata tokenizer.ggml.tokens[%d]: %q has type 6 (byte) in tokenizer.ggml.token_type: want \"<0xNN>\" (two uppercase hex digits)", i, t)
		}
	}
	return nil
}

// isByteToken reports whether t is a SentencePiece byte token, "<0xNN>" with uppercase hex digits.
func isByteToken(t string) bool {
	if len(t) != 6 || t[:3] != "<0x" || t[5] != '>' {
		return false
	}
	for _, c := range t[3:5] {
		if !('0' <= c && c <= '9' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// addedTokens lists control tokens (special) and user-defined tokens (not special) as tokenizer.json's
// added_tokens: llama.cpp matches both in the raw text before splitting it.
func addedTokens(tokens []string, types []int) []map[string]any {
	var out []map[string]any
	for id, t := range tokens {
		if (types[id] != tokenControl && types[id] != tokenUserDefined) || t == "" {
			continue
		}
		out = append(out, map[string]any{"id": id, "content": t, "single_word": false, "lstrip": false, "rstrip": false,
			"normalized": false, "special": types[id] == tokenControl})
	}
	return out
}

func vocabMap(tokens []string) map[string]int {
	v := make(map[string]int, len(tokens))
	for id, t := range tokens {
		if _, dup := v[t]; !dup {
			v[t] = id
		}
	}
	return v
}

func (g *File) byteLevelBPE(tokens []string, types []int) (map[string]any, error) {
	merges, ok, err := g.Strings("tokenizer.ggml.merges")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("tokenizer.ggml.model is gpt2 but tokenizer.ggml.merges is missing")
	}
	// Hugging Face's BPE (and layerstream's tokenizer) needs both parts of a merge and their join in the
	// vocabulary; llama.cpp skips a merge it cannot use, but no vocabulary converted from Hugging Face has one.
	vocab := vocabMap(tokens)
	for i, m := range merges {
		a, b, ok := strings.Cut(m, " ")
		if !ok || a == "" || b == "" || strings.Contains(b, " ") {
			return nil, fmt.Errorf("metadata tokenizer.ggml.merges[%d]: %q is not two tokens separated by a space", i, m)
		}
		for _, part := range []string{a, b, a + b} {
			if _, ok := vocab[part]; !ok {
				return nil, fmt.Errorf("metadata tokenizer.ggml.merges[%d]: %q: %q is not in tokenizer.ggml.tokens", i, m, part)
			}
		}
	}
	pre, _, err := g.String("tokenizer.ggml.pre")
	if err != nil {
		return nil, err
	}
	p, ok := preTokenizers[pre]
	if !ok {
		names := slices.Sorted(maps.Keys(preTokenizers))
		return nil, fmt.Errorf("tokenizer.ggml.pre %q is not supported (supported: %s)", pre, strings.Join(names, ", "))
	}
	return map[string]any{
		"normalizer":    nil,
		"pre_tokenizer": p.json,
		"decoder":       map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": p.ignoreMerges,
			"vocab": vocab, "merges": merges},
	}, nil
}

// sentencePieceBPE turns a SentencePiece vocabulary with scores into a BPE: merge (a, b) exists when a, b and
// a+b are all tokens, ranked by the score of a+b (highest first), which is the order llama.cpp's SentencePiece
// tokenizer merges in.
func (g *File) sentencePieceBPE(tokens []string, types []int) (map[string]any, error) {
	scores, ok, err := g.Float32s("tokenizer.ggml.scores")
	if err != nil {
		return nil, err
	}
	if !ok || len(scores) != len(tokens) {
		return nil, fmt.Errorf("tokenizer.ggml.model is llama but tokenizer.ggml.scores has %d entries for %d tokens", len(scores), len(tokens))
	}
	for i, s := range scores {
		if s != s {
			return nil, fmt.Errorf("metadata tokenizer.ggml.scores[%d]: NaN (want a number: the scores order the merges)", i)
		}
	}
	vocab := vocabMap(tokens)
	type merge struct {
		a, b  string
		score float32
		id    int
	}
	var merges []merge
	for id, t := range tokens {
		if types[id] != tokenNormal && types[id] != tokenUserDefined {
			continue
		}
		for k := range t { // byte offsets of the runes
			if k == 0 {
				continue
			}
			a, b := t[:k], t[k:]
			if _, ok := vocab[a]; !ok {
				continue
			}
			if _, ok := vocab[b]; !ok {
				continue
			}
			merges = append(merges, merge{a, b, scores[id], id})
		}
	}
	slices.SortStableFunc(merges, func(x, y merge) int {
		switch {
		case x.score > y.score:
			return -1
		case x.score < y.score:
			return 1
		case x.id != y.id:
			return x.id - y.id
		}
		return vocab[x.a] - vocab[y.a]
	})
	out := make([][2]string, len(merges))
	for i, m := range merges {
		out[i] = [2]string{m.a, m.b}
	}
	unk := "<unk>"
	if v, ok, err := g.Int("tokenizer.ggml.unknown_token_id"); err != nil {
		return nil, err
	} else if ok {
		unk = tokens[v]
	}
	byteFallback := slices.Contains(types, tokenByte)
	prefix := true
	if v, ok, err := g.Bool("tokenizer.ggml.add_space_prefix"); err != nil {
		return nil, err
	} else if ok {
		prefix = v
	}
	replace := map[string]any{"type": "Replace", "pattern": map[string]string{"String": " "}, "content": "▁"}
	normalizer := any(replace)
	decoders := []any{map[string]any{"type": "Replace", "pattern": map[string]string{"String": "▁"}, "content": " "}}
	if byteFallback {
		decoders = append(decoders, map[string]any{"type": "ByteFallback"})
	}
	decoders = append(decoders, map[string]any{"type": "Fuse"})
	if prefix {
		normalizer = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "Prepend", "prepend": "▁"}, replace}}
		decoders = append(decoders, map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0})
	}
	if !utf8.ValidString(unk) {
		return nil, fmt.Errorf("tokenizer.ggml.unknown_token_id names a token that is not valid UTF-8")
	}
	return map[string]any{
		"normalizer":    normalizer,
		"pre_tokenizer": nil,
		"decoder":       map[string]any{"type": "Sequence", "decoders": decoders},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": unk, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": true, "byte_fallback": byteFallback, "ignore_merges": false,
			"vocab": vocab, "merges": out},
	}, nil
}
