package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before pre-tokenization. nil means no normalizer.
type normalizer func(string) string

type normalizerJSON struct {
	Type        string            `json:"type"`
	Normalizers []json.RawMessage `json:"normalizers"`
	Prepend     string            `json:"prepend"`
	Pattern     patternJSON       `json:"pattern"`
	Content     string            `json:"content"`
	Left        bool              `json:"strip_left"`
	Right       bool              `json:"strip_right"`
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := typeOf(raw)
	if err != nil {
		return nil, err
	}
	var j normalizerJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", typ, err)
	}
	switch typ {
	case "Sequence":
		var steps []normalizer
		for i, r := range j.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, fmt.Errorf("Sequence[%d]: %w", i, err)
			}
			if n != nil {
				steps = append(steps, n)
			}
		}
		return func(s string) string {
			for _, n := range steps {
				s = n(s)
			}
			return s
		}, nil
	case "Prepend":
		return func(s string) string {
			if s == "" {
				return s
			}
			return j.Prepend + s
		}, nil
	case "Replace":
		m, err := parsePattern(j.Pattern)
		if err != nil {
			return nil, fmt.Errorf("Replace: %w", err)
		}
		return func(s string) string { return replaceAll(m, s, j.Content) }, nil
	case "NFC":
		return normForm(norm.NFC), nil
	case "NFD":
		return normForm(norm.NFD), nil
	case "NFKC":
		return normForm(norm.NFKC), nil
	case "NFKD":
		return normForm(norm.NFKD), nil
	case "Lowercase":
		return strings.ToLower, nil
	case "Strip":
		return func(s string) string {
			if j.Left {
				s = strings.TrimLeftFunc(s, unicode.IsSpace)
			}
			if j.Right {
				s = strings.TrimRightFunc(s, unicode.IsSpace)
			}
			return s
		}, nil
	case "StripAccents":
		return func(s string) string {
			return strings.Map(func(r rune) rune {
				if unicode.Is(unicode.Mn, r) {
					return -1
				}
				return r
			}, s)
		}, nil
	}
	return nil, unsupported("normalizer", typ, "Sequence", "Prepend", "Replace", "NFC", "NFD", "NFKC", "NFKD",
		"Lowercase", "Strip", "StripAccents")
}

func normForm(f norm.Form) normalizer {
	return func(s string) string {
		if f.IsNormalString(s) {
			return s
		}
		return f.String(s)
	}
}

// parsePattern compiles a {"String": ...} (literal) or {"Regex": ...} pattern.
func parsePattern(p patternJSON) (matcher, error) {
	switch {
	case p.String != nil:
		return literalMatcher(*p.String), nil
	case p.Regex != nil:
		return compileRegex(*p.Regex)
	}
	return nil, errors.New("pattern has neither \"String\" nor \"Regex\"")
}

// replaceAll replaces every match of m in s with content.
func replaceAll(m matcher, s, content string) string {
	if lit, ok := m.(literalMatcher); ok {
		if lit == "" {
			return s
		}
		return strings.ReplaceAll(s, string(lit), content)
	}
	var sb strings.Builder
	prev := 0
	m.findAll(s, func(start, end int) {
		sb.WriteString(s[prev:start])
		sb.WriteString(content)
		prev = end
	})
	if prev == 0 {
		return s
	}
	sb.WriteString(s[prev:])
	return sb.String()
}
