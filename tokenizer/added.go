package tokenizer

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's added_tokens: matched in the text before the model sees it.
type addedToken struct {
	id         int
	content    string // as matched and decoded: normalized when normalized is set
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
}

// addedSet matches a group of added tokens leftmost-longest, as Hugging Face's AddedVocabulary does.
type addedSet struct {
	first [256]bool              // first bytes of the tokens
	byte0 map[byte][]*addedToken // candidates by first byte, longest first
}

func newAddedSet(tokens []*addedToken) *addedSet {
	if len(tokens) == 0 {
		return nil
	}
	s := &addedSet{byte0: map[byte][]*addedToken{}}
	for _, t := range tokens {
		c := t.content[0]
		s.first[c] = true
		s.byte0[c] = append(s.byte0[c], t)
	}
	for _, l := range s.byte0 {
		slices.SortStableFunc(l, func(a, b *addedToken) int { return len(b.content) - len(a.content) })
	}
	return s
}

// split cuts text at the added tokens it holds. Plain text goes to text, tokens to token.
func (s *addedSet) split(text string, plain func(string) error, token func(*addedToken) error) error {
	if text == "" {
		return nil
	}
	if s == nil {
		return plain(text)
	}
	done := 0 // text before done has been passed on
	for i := 0; i < len(text); i++ {
		if !s.first[text[i]] {
			continue
		}
		for _, t := range s.byte0[text[i]] {
			if !strings.HasPrefix(text[i:], t.content) {
				continue
			}
			start, end := i, i+len(t.content)
			if t.singleWord && (endsWithWord(text[:start]) || startsWithWord(text[end:])) {
				continue
			}
			if t.lstrip {
				start = max(done, len(strings.TrimRightFunc(text[:start], unicode.IsSpace)))
			}
			if t.rstrip {
				end = len(text) - len(strings.TrimLeftFunc(text[end:], unicode.IsSpace))
			}
			if start > done {
				if err := plain(text[done:start]); err != nil {
					return err
				}
			}
			if err := token(t); err != nil {
				return err
			}
			done = end
			i = end - 1
			break
		}
	}
	if done < len(text) {
		return plain(text[done:])
	}
	return nil
}

func isWordChar(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) || r == '_' }

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

// initAdded registers added_tokens: ids, the special set, and the raw and normalized matchers. With splitSpecial
// (tokenizer_config.json's split_special_tokens) special tokens written in the text are not matched: they are
// encoded as ordinary text.
func (t *Tokenizer) initAdded(list []addedTokenJSON, splitSpecial bool) error {
	t.added = map[string]int{}
	t.addedByID = map[int]*addedToken{}
	var raw, normalized []*addedToken
	next := 0
	for i, a := range list {
		if a.Content == "" {
			return fmt.Errorf("added_tokens[%d] (id %d) has empty content", i, a.ID)
		}
		if a.ID < 0 || a.ID > maxID {
			return fmt.Errorf("added_tokens[%d] %q has id %d (want 0..%d)", i, a.Content, a.ID, maxID)
		}
		// As Hugging Face's AddedVocabulary does, ids are assigned again: a token the model has keeps the model's
		// id, a new one takes the next id after the added ones (or after the model vocabulary).
		if _, dup := t.added[a.Content]; dup {
			continue
		}
		id, ok := t.model.vocab[a.Content]
		if !ok {
			id = len(t.model.vocab)
			if len(t.added) > 0 {
				id = next
			}
		}
		next = max(next, id+1)
		if id != a.ID {
			slog.Warn("tokenizer: added token id differs from the one the vocabulary order gives", "token", a.Content, "file_id", a.ID, "id", id)
			a.ID = id
		}
		at := &addedToken{id: a.ID, content: a.Content, singleWord: a.SingleWord, lstrip: a.LStrip, rstrip: a.RStrip,
			normalized: a.Normalized, special: a.Special}
		t.added[a.Content] = a.ID
		t.addedByID[a.ID] = at
		if at.special {
			t.specialIDs = append(t.specialIDs, a.ID)
			if splitSpecial {
				continue
			}
		}
		if at.normalized {
			// Matched in normalized text, so normalized too; Hugging Face also decodes it so.
			if t.normalizer != nil {
				at.content = t.normalizer(at.content)
			}
			if at.content != "" {
				normalized = append(normalized, at)
			}
		} else {
			raw = append(raw, at)
		}
	}
	slices.Sort(t.specialIDs)
	t.rawAdded = newAddedSet(raw)
	t.normAdded = newAddedSet(normalized)
	return nil
}
