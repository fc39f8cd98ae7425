package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// piece is a part of the text on its way to the model. byteLevel marks raw text whose bytes the model must still
// map to the byte-level alphabet (the ByteLevel pre-tokenizer defers the mapping so the BPE can index bytes
// directly). first marks the piece that starts the input text.
type piece struct {
	text      string
	byteLevel bool
	first     bool
}

// preTokenizer splits a piece into words, passing each to emit. nil means the whole piece is one word.
type preTokenizer func(p piece, emit func(piece))

type preTokenizerJSON struct {
	Type            string            `json:"type"`
	Pretokenizers   []json.RawMessage `json:"pretokenizers"`
	AddPrefixSpace  *bool             `json:"add_prefix_space"`
	UseRegex        *bool             `json:"use_regex"`
	Pattern         patternJSON       `json:"pattern"`
	Behavior        string            `json:"behavior"`
	Invert          bool              `json:"invert"`
	Replacement     string            `json:"replacement"`
	PrependScheme   string            `json:"prepend_scheme"`
	Split           *bool             `json:"split"`
	IndividualDigit bool              `json:"individual_digits"`
}

func parsePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := typeOf(raw)
	if err != nil {
		return nil, err
	}
	var j preTokenizerJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", typ, err)
	}
	switch typ {
	case "Sequence":
		var steps []preTokenizer
		for i, r := range j.Pretokenizers {
			p, err := parsePreTokenizer(r)
			if err != nil {
				return nil, fmt.Errorf("Sequence[%d]: %w", i, err)
			}
			if p != nil {
				steps = append(steps, p)
			}
		}
		return sequence(steps), nil
	case "ByteLevel":
		addPrefix := j.AddPrefixSpace != nil && *j.AddPrefixSpace
		useRegex := j.UseRegex == nil || *j.UseRegex
		return func(p piece, emit func(piece)) {
			p = plain(p)
			if addPrefix && !strings.HasPrefix(p.text, " ") {
				p.text = " " + p.text
			}
			if !useRegex {
				emit(piece{text: p.text, byteLevel: true, first: p.first})
				return
			}
			gpt2Split.findAll(p.text, func(start, end int) {
				emit(piece{text: p.text[start:end], byteLevel: true, first: p.first && start == 0})
			})
		}, nil
	case "Split":
		m, err := parsePattern(j.Pattern)
		if err != nil {
			return nil, fmt.Errorf("Split: %w", err)
		}
		b, err := parseBehavior(j.Behavior)
		if err != nil {
			return nil, fmt.Errorf("Split: %w", err)
		}
		return func(p piece, emit func(piece)) {
			p = plain(p)
			splitPiece(p, m.findAll, b, j.Invert, emit)
		}, nil
	case "Metaspace":
		return parseMetaspace(j)
	case "Whitespace":
		return func(p piece, emit func(piece)) {
			p = plain(p)
			splitPiece(p, whitespaceWords, behaviorRemoved, true, emit)
		}, nil
	case "WhitespaceSplit":
		return func(p piece, emit func(piece)) {
			p = plain(p)
			splitPiece(p, runsOf(unicode.IsSpace), behaviorRemoved, false, emit)
		}, nil
	case "Digits":
		b := behaviorContiguous
		if j.IndividualDigit {
			b = behaviorIsolated
		}
		return func(p piece, emit func(piece)) {
			splitPiece(plain(p), eachOf(unicode.IsNumber), b, false, emit)
		}, nil
	case "Punctuation":
		b := behaviorIsolated
		if j.Behavior != "" {
			if b, err = parseBehavior(j.Behavior); err != nil {
				return nil, fmt.Errorf("Punctuation: %w", err)
			}
		}
		return func(p piece, emit func(piece)) {
			splitPiece(plain(p), eachOf(isPunctuation), b, false, emit)
		}, nil
	}
	return nil, unsupported("pre_tokenizer", typ, "Sequence", "ByteLevel", "Split", "Metaspace", "Whitespace",
		"WhitespaceSplit", "Digits", "Punctuation")
}

// sequence runs steps one after the other: each piece step k emits goes through step k+1.
func sequence(steps []preTokenizer) preTokenizer {
	if len(steps) == 0 {
		return nil
	}
	return func(p piece, emit func(piece)) {
		// The emitters are built once per call, not once per piece.
		for k := len(steps) - 1; k >= 1; k-- {
			step, next := steps[k], emit
			emit = func(q piece) { step(q, next) }
		}
		steps[0](p, emit)
	}
}

// plain maps a byte-level piece to its byte-level characters, for pre-tokenizers that follow ByteLevel.
func plain(p piece) piece {
	if p.byteLevel {
		p.text, p.byteLevel = byteLevelString(p.text), false
	}
	return p
}

func parseMetaspace(j preTokenizerJSON) (preTokenizer, error) {
	rep := j.Replacement
	if rep == "" {
		rep = metaspace
	}
	if utf8.RuneCountInString(rep) != 1 {
		return nil, fmt.Errorf("Metaspace: replacement %q is not one character", rep)
	}
	scheme := j.PrependScheme
	if scheme == "" { // older files: add_prefix_space
		scheme = "always"
		if j.AddPrefixSpace != nil && !*j.AddPrefixSpace {
			scheme = "never"
		}
	}
	if scheme != "always" && scheme != "first" && scheme != "never" {
		return nil, fmt.Errorf("Metaspace: prepend_scheme %q (want always, first or never)", scheme)
	}
	split := j.Split == nil || *j.Split
	return func(p piece, emit func(piece)) {
		p = plain(p)
		p.text = strings.ReplaceAll(p.text, " ", rep)
		if !strings.HasPrefix(p.text, rep) && (scheme == "always" || scheme == "first" && p.first) {
			p.text = rep + p.text
		}
		if !split {
			emit(p)
			return
		}
		splitPiece(p, literalMatcher(rep).findAll, behaviorMergedWithNext, false, emit)
	}, nil
}

// Split behaviors, as in Hugging Face's SplitDelimiterBehavior.
type behavior int

const (
	behaviorRemoved behavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

func parseBehavior(s string) (behavior, error) {
	switch s {
	case "Removed":
		return behaviorRemoved, nil
	case "Isolated":
		return behaviorIsolated, nil
	case "MergedWithPrevious":
		return behaviorMergedWithPrevious, nil
	case "MergedWithNext":
		return behaviorMergedWithNext, nil
	case "Contiguous":
		return behaviorContiguous, nil
	}
	return 0, fmt.Errorf("behavior %q (want Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)", s)
}

type span struct {
	start, end int
	match      bool
}

// splitPiece splits p at the matches found by find, keeping or merging the matches as b says; invert swaps
// matches and the text between them. Empty pieces are dropped.
func splitPiece(p piece, find func(string, func(int, int)), b behavior, invert bool, emit func(piece)) {
	s := p.text
	if s == "" {
		return
	}
	if b == behaviorIsolated {
		// Every match and every gap is a piece: no need to collect them first.
		prev := 0
		find(s, func(start, end int) {
			if start > prev {
				emit(piece{text: s[prev:start], first: p.first && prev == 0})
			}
			if end > start {
				emit(piece{text: s[start:end], first: p.first && start == 0})
			}
			prev = end
		})
		if prev < len(s) {
			emit(piece{text: s[prev:], first: p.first && prev == 0})
		}
		return
	}
	var spans []span
	prev := 0
	find(s, func(start, end int) {
		if start > prev {
			spans = append(spans, span{prev, start, invert})
		}
		spans = append(spans, span{start, end, !invert})
		prev = end
	})
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), invert})
	}
	var out []span // spans to emit; match marks those to remove
	switch b {
	case behaviorIsolated:
		out = spans
		for i := range out {
			out[i].match = false
		}
	case behaviorRemoved:
		out = spans
	case behaviorContiguous:
		prevMatch := false
		for i, sp := range spans {
			if i > 0 && sp.match == prevMatch {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
	case behaviorMergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
	case behaviorMergedWithNext:
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, span{sp.start, sp.end, false})
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	for _, sp := range out {
		if !sp.match && sp.end > sp.start {
			emit(piece{text: s[sp.start:sp.end], first: p.first && sp.start == 0})
		}
	}
}

// eachOf matches every single character satisfying f.
func eachOf(f func(rune) bool) func(string, func(int, int)) {
	return func(s string, yield func(int, int)) {
		for i, r := range s {
			if f(r) {
				yield(i, i+utf8.RuneLen(r))
			}
		}
	}
}

// runsOf matches every maximal run of characters satisfying f.
func runsOf(f func(rune) bool) func(string, func(int, int)) {
	return func(s string, yield func(int, int)) {
		start := -1
		for i, r := range s {
			switch {
			case f(r) && start < 0:
				start = i
			case !f(r) && start >= 0:
				yield(start, i)
				start = -1
			}
		}
		if start >= 0 {
			yield(start, len(s))
		}
	}
}

// whitespaceWords matches \w+|[^\w\s]+ (the Whitespace pre-tokenizer keeps these and drops the rest).
func whitespaceWords(s string, yield func(int, int)) {
	isWord := func(r rune) bool {
		return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) || unicode.Is(unicode.Pc, r)
	}
	start, kind := -1, 0 // kind 1: word run, 2: symbol run
	for i, r := range s {
		k := 2
		if isWord(r) {
			k = 1
		} else if unicode.IsSpace(r) {
			k = 0
		}
		if k != kind && start >= 0 {
			yield(start, i)
			start = -1
		}
		if k != 0 && start < 0 {
			start = i
		}
		kind = k
	}
	if start >= 0 {
		yield(start, len(s))
	}
}

func isPunctuation(r rune) bool {
	return r < utf8.RuneSelf && unicode.IsPunct(r) || r < utf8.RuneSelf && unicode.IsSymbol(r) || unicode.IsPunct(r)
}
