package tokenizer

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// matcher finds the non-overlapping matches of a pattern, left to right, as byte offsets.
type matcher interface {
	findAll(s string, yield func(start, end int))
}

// literalMatcher matches a fixed string.
type literalMatcher string

func (m literalMatcher) findAll(s string, yield func(start, end int)) {
	if m == "" {
		return
	}
	for off := 0; ; {
		i := strings.Index(s[off:], string(m))
		if i < 0 {
			return
		}
		yield(off+i, off+i+len(m))
		off += i + len(m)
	}
}

// regexMatcher is the general fallback: github.com/dlclark/regexp2 supports the lookahead Hugging Face patterns
// use, but is slow, so the common pre-tokenizer patterns have hand-written matchers (splitPattern).
type regexMatcher struct{ re *regexp2.Regexp }

func (m regexMatcher) findAll(s string, yield func(start, end int)) {
	runes := []rune(s)
	offsets := make([]int, len(runes)+1) // byte offset of each rune index
	off := 0
	for i, r := range runes {
		offsets[i] = off
		off += utf8.RuneLen(r)
	}
	offsets[len(runes)] = off
	match, err := m.re.FindRunesMatch(runes)
	for err == nil && match != nil {
		yield(offsets[match.Index], offsets[match.Index+match.Length])
		match, err = m.re.FindNextMatch(match)
	}
}

// The pre-tokenizer patterns of GPT-2 (also ByteLevel's use_regex), Llama-3 and Qwen2/Qwen3, matched by hand.
const (
	gpt2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwenPattern   = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

var (
	gpt2Split   = &splitPattern{spaceLetters: true, spaceNumbers: true}
	llama3Split = &splitPattern{foldCase: true, maxDigits: 3, newlines: true}
	qwenSplit   = &splitPattern{foldCase: true, maxDigits: 1, newlines: true}
)

// compileRegex returns a hand-written matcher for the known patterns and a regexp2 matcher otherwise.
func compileRegex(pattern string) (matcher, error) {
	switch pattern {
	case gpt2Pattern:
		return gpt2Split, nil
	case llama3Pattern:
		return llama3Split, nil
	case qwenPattern:
		return qwenSplit, nil
	}
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", pattern, err)
	}
	return regexMatcher{re}, nil
}

// splitPattern matches one of the GPT-2 family of pre-tokenizer regexes. The alternatives, tried in order:
//
//	contractions        's|'t|'re|'ve|'m|'ll|'d                (case-insensitive when foldCase)
//	letters             ' ?\p{L}+' (spaceLetters) or '[^\r\n\p{L}\p{N}]?\p{L}+'
//	numbers             ' ?\p{N}+' (spaceNumbers) or '\p{N}{1,maxDigits}'
//	punctuation         ' ?[^\s\p{L}\p{N}]+', then '[\r\n]*' when newlines
//	newline run         '\s*[\r\n]+'                           (when newlines)
//	trailing spaces     '\s+(?!\S)'
//	spaces              '\s+'
type splitPattern struct {
	foldCase     bool
	spaceLetters bool
	spaceNumbers bool
	maxDigits    int
	newlines     bool
}

// Character classes, precomputed for ASCII.
const (
	clsLetter = 1 << iota
	clsNumber
	clsSpace
	clsNewline // \r or \n
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range utf8.RuneSelf {
		r := rune(c)
		switch {
		case unicode.IsLetter(r):
			t[c] = clsLetter
		case unicode.IsNumber(r):
			t[c] = clsNumber
		case unicode.IsSpace(r):
			t[c] = clsSpace
			if r == '\r' || r == '\n' {
				t[c] |= clsNewline
			}
		}
	}
	return t
}()

// classAt returns the class bits and the size of the character at s[i] (i < len(s)).
func classAt(s string, i int) (uint8, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	switch {
	case unicode.IsLetter(r):
		return clsLetter, n
	case unicode.IsNumber(r):
		return clsNumber, n
	case unicode.IsSpace(r):
		return clsSpace, n
	}
	return 0, n
}

func (p *splitPattern) findAll(s string, yield func(start, end int)) {
	for i := 0; i < len(s); {
		end := p.matchAt(s, i)
		yield(i, end)
		i = end
	}
}

// matchAt returns the end of the match starting at i. Every character is matched by some alternative, so the
// matches tile the text.
func (p *splitPattern) matchAt(s string, i int) int {
	c0, n0 := classAt(s, i)
	// contractions
	if s[i] == '\'' {
		if n := p.contraction(s[i+1:]); n > 0 {
			return i + 1 + n
		}
	}
	var c1 uint8
	n1 := 0
	if i+n0 < len(s) {
		c1, n1 = classAt(s, i+n0)
	}
	// letters
	if c0&clsLetter != 0 {
		return scanClass(s, i+n0, clsLetter)
	}
	if c1&clsLetter != 0 {
		if p.spaceLetters && s[i] == ' ' || !p.spaceLetters && c0&(clsNewline|clsNumber) == 0 {
			return scanClass(s, i+n0+n1, clsLetter)
		}
	}
	// numbers
	if p.spaceNumbers {
		if c0&clsNumber != 0 {
			return scanClass(s, i+n0, clsNumber)
		}
		if s[i] == ' ' && c1&clsNumber != 0 {
			return scanClass(s, i+n0+n1, clsNumber)
		}
	} else if c0&clsNumber != 0 {
		end := i + n0
		for k := 1; k < p.maxDigits && end < len(s); k++ {
			c, n := classAt(s, end)
			if c&clsNumber == 0 {
				break
			}
			end += n
		}
		return end
	}
	// punctuation
	const word = clsLetter | clsNumber | clsSpace
	if c0&word == 0 || s[i] == ' ' && n1 > 0 && c1&word == 0 {
		end := scanNot(s, i+n0, word)
		if p.newlines {
			for end < len(s) && (s[end] == '\r' || s[end] == '\n') {
				end++
			}
		}
		return end
	}
	// c0 is whitespace from here on.
	end := scanClass(s, i, clsSpace)
	if p.newlines {
		if k := strings.LastIndexAny(s[i:end], "\r\n"); k >= 0 {
			return i + k + 1
		}
	}
	if end == len(s) {
		return end
	}
	if end-i > n0 { // \s+(?!\S): leave the last whitespace character for the next word
		_, last := utf8.DecodeLastRuneInString(s[i:end])
		if end-last > i {
			return end - last
		}
	}
	return end
}

// contraction returns the length of s's prefix matching s|t|re|ve|m|ll|d (after the apostrophe), or 0.
func (p *splitPattern) contraction(s string) int {
	lower := func(k int) byte {
		if k >= len(s) {
			return 0
		}
		c := s[k]
		if p.foldCase && c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		return c
	}
	switch lower(0) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if lower(1) == 'e' {
			return 2
		}
	case 'l':
		if lower(1) == 'l' {
			return 2
		}
	}
	if p.foldCase && strings.HasPrefix(s, "ſ") { // U+017F folds to 's'
		return len("ſ")
	}
	return 0
}

// scanClass returns the end of the run of characters from i having any bit of cls.
func scanClass(s string, i int, cls uint8) int {
	for i < len(s) {
		c, n := classAt(s, i)
		if c&cls == 0 {
			break
		}
		i += n
	}
	return i
}

// scanNot returns the end of the run of characters from i having no bit of cls.
func scanNot(s string, i int, cls uint8) int {
	for i < len(s) {
		c, n := classAt(s, i)
		if c&cls != 0 {
			break
		}
		i += n
	}
	return i
}
