// Package tokenizer reads Hugging Face tokenizer.json files and turns text into token ids and back, matching the
// reference implementation id for id: BPE models (byte-level like GPT-2/Qwen/Llama-3 and SentencePiece-style with
// byte fallback like Llama-2), their normalizers, pre-tokenizers, added and special tokens, post-processors and
// decoders. It also streams decoded text one token at a time and renders chat templates.
//
// A Tokenizer is safe for concurrent use.
package tokenizer

import (
	"errors"
	"slices"
	"unicode/utf8"
)

// Tokenizer encodes text to ids and decodes ids to text.
type Tokenizer struct {
	model        *bpe
	normalizer   normalizer
	preTokenizer preTokenizer
	post         postProcessor
	decoder      *decoder

	added      map[string]int // added token content → id
	addedByID  map[int]*addedToken
	specialIDs []int
	rawAdded   *addedSet // added tokens matched in the raw text
	normAdded  *addedSet // added tokens matched in the normalized text

	bos, eos         int
	bosText, eosText string
	chatTemplate     string
}

// ErrInvalidUTF8 is returned by Encode for text that is not valid UTF-8.
var ErrInvalidUTF8 = errors.New("tokenizer: text is not valid UTF-8")

// Encode turns text into token ids. Added and special tokens written in the text (like "<|im_start|>") are
// recognized; addSpecialTokens adds what the post-processor (or tokenizer_config.json's add_bos_token /
// add_eos_token) asks for, such as a leading BOS.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) ([]int, error) {
	if !utf8.ValidString(text) {
		return nil, ErrInvalidUTF8
	}
	ids := make([]int, 0, len(text)/3+len(t.post.prefix)+len(t.post.suffix)+1)
	if addSpecialTokens {
		ids = append(ids, t.post.prefix...)
	}
	var err error
	first := true
	word := func(p piece) {
		if err == nil {
			ids, err = t.model.encode(p.text, p.byteLevel, ids)
		}
	}
	token := func(a *addedToken) error {
		ids = append(ids, a.id)
		first = false
		return nil
	}
	normalizedPart := func(s string) error {
		if s == "" {
			return nil
		}
		p := piece{text: s, first: first}
		first = false
		if t.preTokenizer == nil {
			word(p)
		} else {
			t.preTokenizer(p, word)
		}
		return err
	}
	rawPart := func(s string) error {
		if t.normalizer != nil {
			s = t.normalizer(s)
		}
		return t.normAdded.split(s, normalizedPart, token)
	}
	if err := t.rawAdded.split(text, rawPart, token); err != nil {
		return nil, err
	}
	if addSpecialTokens {
		ids = append(ids, t.post.suffix...)
	}
	return ids, nil
}

// IDToken returns the vocabulary entry of id, or "" for an id outside the vocabulary.
func (t *Tokenizer) IDToken(id int) string {
	if a, ok := t.addedByID[id]; ok {
		return a.content
	}
	if id >= 0 && id < len(t.model.tokens) {
		return t.model.tokens[id]
	}
	return ""
}

// TokenID returns the id of a vocabulary entry or added token.
func (t *Tokenizer) TokenID(tok string) (int, bool) {
	if id, ok := t.added[tok]; ok {
		return id, true
	}
	id, ok := t.model.vocab[tok]
	return id, ok
}

// VocabSize is one past the largest id the tokenizer knows (model vocabulary and added tokens).
func (t *Tokenizer) VocabSize() int {
	n := t.model.size()
	for id := range t.addedByID {
		n = max(n, id+1)
	}
	return n
}

// BOS is the id of tokenizer_config.json's bos_token, or -1.
func (t *Tokenizer) BOS() int { return t.bos }

// EOS is the id of tokenizer_config.json's eos_token, or -1.
func (t *Tokenizer) EOS() int { return t.eos }

// SpecialIDs returns the ids of the special added tokens, ascending.
func (t *Tokenizer) SpecialIDs() []int { return slices.Clone(t.specialIDs) }

// IsSpecial reports whether id is a special added token (skipped by Decode when asked).
func (t *Tokenizer) IsSpecial(id int) bool {
	a, ok := t.addedByID[id]
	return ok && a.special
}
