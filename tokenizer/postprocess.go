package tokenizer

import (
	"encoding/json"
	"fmt"
)

// postProcessor adds the special tokens around an encoded text (only when Encode is asked to).
type postProcessor struct {
	prefix, suffix []int
}

type postProcessorJSON struct {
	Type          string            `json:"type"`
	Processors    []json.RawMessage `json:"processors"`
	Single        []templateItem    `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int `json:"ids"`
	} `json:"special_tokens"`
	Cls []any `json:"cls"`
	Sep []any `json:"sep"`
}

type templateItem struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

func parsePostProcessor(raw json.RawMessage, t *Tokenizer) (postProcessor, error) {
	var pp postProcessor
	typ, err := typeOf(raw)
	if err != nil {
		return pp, err
	}
	var j postProcessorJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return pp, fmt.Errorf("%s: %w", typ, err)
	}
	switch typ {
	case "ByteLevel": // only trims offsets, which this package does not report
		return pp, nil
	case "Sequence":
		for i, r := range j.Processors {
			p, err := parsePostProcessor(r, t)
			if err != nil {
				return pp, fmt.Errorf("Sequence[%d]: %w", i, err)
			}
			pp.prefix = append(pp.prefix, p.prefix...)
			pp.suffix = append(p.suffix, pp.suffix...)
		}
		return pp, nil
	case "TemplateProcessing":
		seen := false
		for i, item := range j.Single {
			switch {
			case item.Sequence != nil:
				if seen {
					return pp, fmt.Errorf("TemplateProcessing: single[%d]: a second sequence", i)
				}
				seen = true
			case item.SpecialToken != nil:
				st, ok := j.SpecialTokens[item.SpecialToken.ID]
				if !ok {
					return pp, fmt.Errorf("TemplateProcessing: single[%d]: special token %q missing from special_tokens", i, item.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					if t.IDToken(id) == "" {
						return pp, fmt.Errorf("TemplateProcessing: special token %q: id %d is not in the vocabulary", item.SpecialToken.ID, id)
					}
				}
				if seen {
					pp.suffix = append(pp.suffix, st.IDs...)
				} else {
					pp.prefix = append(pp.prefix, st.IDs...)
				}
			default:
				return pp, fmt.Errorf("TemplateProcessing: single[%d]: neither SpecialToken nor Sequence", i)
			}
		}
		if !seen {
			return pp, fmt.Errorf("TemplateProcessing: the single template has no sequence")
		}
		return pp, nil
	case "RobertaProcessing", "BertProcessing":
		cls, err := pairID(j.Cls, t)
		if err != nil {
			return pp, fmt.Errorf("%s cls: %w", typ, err)
		}
		sep, err := pairID(j.Sep, t)
		if err != nil {
			return pp, fmt.Errorf("%s sep: %w", typ, err)
		}
		pp.prefix, pp.suffix = []int{cls}, []int{sep}
		return pp, nil
	}
	return pp, unsupported("post_processor", typ, "TemplateProcessing", "ByteLevel", "RobertaProcessing",
		"BertProcessing", "Sequence")
}

// pairID reads a ["token", id] pair and checks it against the vocabulary.
func pairID(p []any, t *Tokenizer) (int, error) {
	if len(p) != 2 {
		return 0, fmt.Errorf("want [\"token\", id], got %v", p)
	}
	tok, ok1 := p[0].(string)
	f, ok2 := p[1].(float64)
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("want [\"token\", id], got %v", p)
	}
	if id, ok := t.TokenID(tok); !ok || id != int(f) {
		return 0, fmt.Errorf("token %q with id %d does not match the vocabulary", tok, int(f))
	}
	return int(f), nil
}
