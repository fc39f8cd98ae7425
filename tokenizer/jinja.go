package tokenizer

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// What transformers' Jinja (jinja2) accepts in chat templates and gonja does not, made to fit:
//   - conditional expressions inside other expressions: gonja parses "x if c else y" only as a whole {{ }} output
//     (Gemma 3: {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}). Each one
//     is rewritten into ((c) and [x] or [y])[0], which gonja's and/or evaluate as Python does: lazily, and to an
//     operand's value (the one-element lists keep a falsy x from falling through to y);
//   - transformers' {% generation %} block (SmolLM3), which renders its body (controlStructures);
//   - x[-n] where x has exactly n items: gonja v2.9.1 finds nothing (its bound check is off by one), so a
//     one-message chat's messages[-1], or Qwen3's content.split('</think>')[-1] of a content without the tag,
//     came out empty. Each x[-n] is rewritten into x[-n:][0] (rewriteNegativeIndexes), which gonja slices right;
//   - str.replace(old, new) without a count (SmolLM3), which gonja's requires, and strip, lstrip, rstrip and
//     split without arguments, which gonja's refuse (methods).

// methods are gonja's methods of values, with Python's str.replace: gonja's requires the count argument.
var methods = func() exec.Methods {
	m := builtins.Methods
	str := map[string]exec.Method[string]{}
	for _, name := range strMethodNames {
		if f, ok := m.Str.Get(name); ok {
			str[name] = f
		}
	}
	str["replace"] = func(self string, _ *exec.Value, arguments *exec.VarArgs) (any, error) {
		var old, repl string
		count := -1 // Python: every occurrence
		if err := arguments.Take(
			exec.PositionalArgument("old", nil, exec.StringArgument(&old)),
			exec.PositionalArgument("new", nil, exec.StringArgument(&repl)),
			exec.PositionalArgument("count", exec.AsValue(-1), exec.IntArgument(&count)),
		); err != nil {
			return nil, exec.ErrInvalidCall(err)
		}
		return strings.Replace(self, old, repl, count), nil // as Python's, an empty old included
	}
	for name, f := range pyStrMethods {
		str[name] = f
	}
	m.Str = exec.NewMethodSet(str)
	return m
}()

// pyStrMethods are Python's strip, lstrip, rstrip and split with their defaults (whitespace): gonja's take a
// single space for a missing argument, as a number, which fails.
var pyStrMethods = map[string]exec.Method[string]{
	"strip":  stripMethod(true, true),
	"lstrip": stripMethod(true, false),
	"rstrip": stripMethod(false, true),
	"split": func(self string, _ *exec.Value, arguments *exec.VarArgs) (any, error) {
		var sep *string
		maxsplit := -1
		if err := arguments.Take(
			exec.PositionalArgument("sep", exec.AsValue(nil), optString(&sep)),
			exec.PositionalArgument("maxsplit", exec.AsValue(-1), exec.IntArgument(&maxsplit)),
		); err != nil {
			return nil, exec.ErrInvalidCall(err)
		}
		return pySplit(self, sep, maxsplit)
	},
}

// stripMethod is Python's str.strip (left and right), lstrip or rstrip: whitespace, or the characters given.
func stripMethod(left, right bool) exec.Method[string] {
	return func(self string, _ *exec.Value, arguments *exec.VarArgs) (any, error) {
		var chars *string
		if err := arguments.Take(exec.PositionalArgument("chars", exec.AsValue(nil), optString(&chars))); err != nil {
			return nil, exec.ErrInvalidCall(err)
		}
		cut := pyIsSpace
		if chars != nil {
			set := *chars
			cut = func(r rune) bool { return strings.ContainsRune(set, r) }
		}
		if left {
			self = strings.TrimLeftFunc(self, cut)
		}
		if right {
			self = strings.TrimRightFunc(self, cut)
		}
		return self, nil
	}
}

// pySplit is Python's str.split: at runs of whitespace, dropping empty parts, when sep is nil; else at each sep;
// at most maxsplit times when maxsplit ≥ 0.
func pySplit(s string, sep *string, maxsplit int) ([]any, error) {
	var parts []string
	switch {
	case sep == nil:
		rest := strings.TrimLeftFunc(s, pyIsSpace)
		for rest != "" {
			if maxsplit >= 0 && len(parts) == maxsplit {
				parts = append(parts, rest)
				break
			}
			i := strings.IndexFunc(rest, pyIsSpace)
			if i < 0 {
				parts = append(parts, rest)
				break
			}
			parts = append(parts, rest[:i])
			rest = strings.TrimLeftFunc(rest[i:], pyIsSpace)
		}
	case *sep == "":
		return nil, fmt.Errorf("split: empty separator")
	default:
		n := -1
		if maxsplit >= 0 {
			n = maxsplit + 1
		}
		parts = strings.SplitN(s, *sep, n)
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

// pyIsSpace is Python's str.isspace for one character.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// optString takes a string argument that may be None.
func optString(out **string) exec.ArgumentTransmuter {
	return func(v *exec.Value) error {
		switch {
		case v.IsNil():
			*out = nil
		case v.IsString():
			s := v.String()
			*out = &s
		default:
			return fmt.Errorf("%s is not a string or None", v.String())
		}
		return nil
	}
}

// strMethodNames are the string methods gonja v2.9.1 defines (TestJinjaMethods checks they all exist).
var strMethodNames = []string{"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith",
	"expandtabs", "find", "format", "format_map", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit",
	"islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip",
	"partition", "removeprefix", "removesuffix", "replace", "rfind", "rjust", "rpartition", "rsplit", "rstrip",
	"split", "splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill"}

// controlStructures are gonja's control structures and transformers' generation block.
var controlStructures = exec.NewControlStructureSet(map[string]parser.ControlStructureParser{
	"generation": generationParser,
}).Update(builtins.ControlStructures)

// generationBlock is transformers' {% generation %}...{% endgeneration %}: it marks the assistant's tokens for
// return_assistant_tokens_mask and renders its body, in a scope of its own (a jinja2 call block).
type generationBlock struct {
	location *tokens.Token
	body     *nodes.Wrapper
}

func (g *generationBlock) Position() *tokens.Token { return g.location }
func (g *generationBlock) String() string {
	return fmt.Sprintf("generation(Line=%d Col=%d)", g.location.Line, g.location.Col)
}
func (g *generationBlock) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	return r.Inherit().ExecuteWrapper(g.body)
}

func generationParser(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	g := &generationBlock{location: p.Current()}
	if !args.End() {
		return nil, args.Error("generation takes no arguments", args.Current())
	}
	body, end, err := p.WrapUntil("endgeneration")
	if err != nil {
		return nil, err
	}
	if !end.End() {
		return nil, end.Error("endgeneration takes no arguments", end.Current())
	}
	g.body = body
	return g, nil
}

// rewriteConditionals rewrites every conditional expression of a template ("x if c else y", "x if c") into
// ((c) and [x] or [y])[0] (y is an undefined name when absent, as jinja2 leaves it). src must have "\n" line
// ends. Block statements' own "if" (the statement, and a for loop's filter) stay.
func rewriteConditionals(src string) (string, error) {
	for n := 0; ; n++ {
		c, ok, err := lastConditional(src)
		if err != nil || !ok {
			return src, err
		}
		if n == maxConditionals { // each one costs a pass over the template: bound what a template can ask
			return "", fmt.Errorf("more than %d conditional expressions", maxConditionals)
		}
		x := strings.TrimSpace(src[c.start:c.ifAt])
		cond, alt := src[c.ifAt+len("if"):c.end], "__layerstream_undefined"
		if c.elseAt >= 0 {
			cond, alt = src[c.ifAt+len("if"):c.elseAt], strings.TrimSpace(src[c.elseAt+len("else"):c.end])
		}
		src = src[:c.start] + " ((" + strings.TrimSpace(cond) + ") and [" + x + "] or [" + alt + "])[0] " + src[c.end:]
	}
}

// maxConditionals bounds the conditional expressions of a template (real ones have a few dozen).
const maxConditionals = 1000

// conditional locates one conditional expression in a template by byte offsets: x from start to ifAt, c to
// elseAt (to end without an else: elseAt -1), y from elseAt+4 to end.
type conditional struct{ start, ifAt, elseAt, end int }

// lastConditional finds the template's last conditional expression (by the position of its "if"): those
// inside its x, c or y, and those before it, are rewritten by later calls.
func lastConditional(src string) (conditional, bool, error) {
	cfg := config.New()
	cfg.KeepTrailingNewline = true // src is lexed as is: positions index it
	var all []*tokens.Token
	s := tokens.LexAll(src, cfg)
	for ; !s.End(); s.Next() {
		all = append(all, s.Current())
	}
	if s.IsError() {
		return conditional{}, false, fmt.Errorf("line %d: %s", s.Current().Line, s.Current().Val)
	}
	var found conditional
	ok := false
	for i := 0; i < len(all); i++ {
		if all[i].Type != tokens.VariableBegin && all[i].Type != tokens.BlockBegin {
			continue
		}
		j := i + 1
		for j < len(all) && all[j].Type != tokens.VariableEnd && all[j].Type != tokens.BlockEnd {
			j++
		}
		if j == len(all) {
			return conditional{}, false, fmt.Errorf("line %d: a tag is not closed", all[i].Line)
		}
		if c, has := tagConditional(all[i:j+1], all[i].Type == tokens.BlockBegin); has && (!ok || c.ifAt > found.ifAt) {
			found, ok = c, true
		}
		i = j
	}
	return found, ok, nil
}

// tagConditional finds the last conditional expression of one tag, given its tokens from the begin to the end
// delimiter. In a block tag the first name is the statement ("if", "set", "for"...), and a for statement's
// own "if" at the outermost level is its loop filter.
func tagConditional(tag []*tokens.Token, block bool) (conditional, bool) {
	// An expression is bounded by the tag's delimiters, the statement's name, and at its depth by a comma, a
	// colon or "=", or the brackets around it.
	first := 1 // the first token of the tag's expressions
	statement := ""
	if block && len(tag) > 2 {
		first, statement = 2, tag[1].Val
	}
	depth := make([]int, len(tag))
	d := 0
	for k := first; k < len(tag)-1; k++ {
		switch tag[k].Type {
		case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
			depth[k] = d
			d++
		case tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
			d--
			depth[k] = d
		default:
			depth[k] = d
		}
	}
	bounds := func(k, d int) bool {
		t := tag[k]
		return depth[k] < d || (depth[k] == d && (t.Type == tokens.Comma || t.Type == tokens.Colon || t.Type == tokens.Assign))
	}
	for k := len(tag) - 2; k >= first; k-- {
		t := tag[k]
		if t.Type != tokens.Name || t.Val != "if" || (statement == "for" && depth[k] == 0) {
			continue
		}
		// x reaches back to a bound, or to an "else" at its depth: this conditional is that one's y
		// (conditionals nest to the right).
		d := depth[k]
		m := k - 1
		for m >= first && !bounds(m, d) && (depth[m] != d || tag[m].Type != tokens.Name || tag[m].Val != "else") {
			m--
		}
		if m == k-1 {
			continue // nothing before "if": not a conditional expression
		}
		c := conditional{start: tag[m].Pos + len(tag[m].Val), ifAt: t.Pos, elseAt: -1, end: tag[len(tag)-1].Pos}
		for n := k + 1; n < len(tag)-1; n++ {
			if bounds(n, d) {
				c.end = tag[n].Pos
				break
			}
			if depth[n] == d && tag[n].Type == tokens.Name && tag[n].Val == "else" && c.elseAt < 0 {
				c.elseAt = tag[n].Pos
			}
		}
		return c, true
	}
	return conditional{}, false
}

// negativeIndex is a subscript by a negative integer literal: [-1], [ -2 ].
var negativeIndex = regexp.MustCompile(`^\[\s*-\s*([0-9]+)\s*\]`)

// subscripted reports whether a "[" after out subscripts what out ends with (a name, a call, a subscript, a
// string) rather than opening a list.
func subscripted(out string) bool {
	if out == "" {
		return false
	}
	c := out[len(out)-1]
	return c == '_' || c == ')' || c == ']' || c == '\'' || c == '"' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// rewriteNegativeIndexes rewrites every subscript x[-n] (n a literal) inside the template's tags ({{ }}, {% %};
// not in their string literals, nor in comments or the text between tags) into x[-n:][0].
func rewriteNegativeIndexes(src string) string {
	var b strings.Builder
	inTag := false
	for i := 0; i < len(src); {
		switch {
		case !inTag && (strings.HasPrefix(src[i:], "{{") || strings.HasPrefix(src[i:], "{%")):
			inTag = true
			b.WriteString(src[i : i+2])
			i += 2
		case !inTag && strings.HasPrefix(src[i:], "{#"):
			end := strings.Index(src[i:], "#}")
			if end < 0 {
				end = len(src) - i - 2
			}
			b.WriteString(src[i : i+end+2])
			i += end + 2
		case !inTag:
			b.WriteByte(src[i])
			i++
		case strings.HasPrefix(src[i:], "}}") || strings.HasPrefix(src[i:], "%}"):
			inTag = false
			b.WriteString(src[i : i+2])
			i += 2
		case src[i] == '\'' || src[i] == '"':
			q := src[i]
			j := i + 1
			for j < len(src) && src[j] != q {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			j = min(j+1, len(src))
			b.WriteString(src[i:j])
			i = j
		default:
			if m := negativeIndex.FindStringSubmatch(src[i:]); m != nil && subscripted(b.String()) {
				b.WriteString("[-" + m[1] + ":][0]")
				i += len(m[0])
				continue
			}
			b.WriteByte(src[i])
			i++
		}
	}
	return b.String()
}
