package tokenizer

import (
	"errors"
	"testing"
	"time"

	"github.com/layerstream/layerstream/internal/hffixture"
)

// TestChatTemplateFixtures renders every case of testdata/chat (real models' templates, with the string
// transformers' apply_chat_template returned, strftime_now at a fixed time) and requires the same string, or,
// where the template refused the conversation, an error holding the template's message.
func TestChatTemplateFixtures(t *testing.T) {
	models := hffixture.ChatModels()
	if len(models) == 0 {
		t.Fatal("no chat fixtures in testdata/chat (made by scripts/fixtures/make_chat_fixtures.py)")
	}
	for _, model := range models {
		t.Run(model, func(t *testing.T) {
			f, err := hffixture.LoadChat(model)
			if err != nil {
				t.Fatal(err)
			}
			now, err := f.Now()
			if err != nil {
				t.Fatal(err)
			}
			tpl, err := NewChatTemplate(f.Template, f.SpecialTokens)
			if err != nil {
				t.Fatal(err)
			}
			tpl = tpl.WithClock(func() time.Time { return now })
			for _, c := range f.Cases {
				msgs := make([]Message, len(c.Messages))
				for i, m := range c.Messages {
					msgs[i] = Message{Role: m.Role, Content: m.Content}
				}
				got, err := tpl.Render(msgs, c.AddGenerationPrompt, c.TemplateKwargs)
				if c.Error != "" {
					var te *TemplateError
					if !errors.As(err, &te) || te.Message != c.Error {
						t.Errorf("%s: got %q, %v; want the template's error %q", c.Name, got, err, c.Error)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", c.Name, err)
				} else if got != c.Expected {
					t.Errorf("%s:\n got %q\nwant %q", c.Name, got, c.Expected)
				}
			}
		})
	}
}

// TestJinjaCompat: what gonja does not parse or compute as jinja2 does, made to fit (jinja.go). The expected
// strings are jinja2 3.1.6's renderings (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks).
func TestJinjaCompat(t *testing.T) {
	for _, c := range []struct {
		src  string
		vars map[string]any
		want string
	}{
		{"{{ 'a' + ('b' if x else 'c') + 'd' }}", map[string]any{"x": true}, "abd"},
		{"{{ 'a' + ('b' if x else 'c') + 'd' }}", map[string]any{"x": false}, "acd"},
		{"{% set y = 1 if x else 2 %}{{ y }}", map[string]any{"x": false}, "2"},
		{"{{ ('p' if a else 'q' if b else 'r') }}", map[string]any{"a": false, "b": true}, "q"},
		{"{{ ('p' if a else 'q' if b else 'r') }}", map[string]any{"a": false, "b": false}, "r"},
		{"{{ ('' if x else 'no') ~ '|' }}", map[string]any{"x": true}, "|"}, // a falsy first branch
		{"{{ ('a' if x) ~ '|' }}", map[string]any{"x": false}, "|"},
		{"{{ [1, 2, 3] | join('-' if x else '+') }}", map[string]any{"x": false}, "1+2+3"},
		{"{{ {'k': 'v' if x else 'w'}['k'] }}", map[string]any{"x": false}, "w"},
		{"{% for i in [1, 2, 3] if i > 1 %}{{ i }}{% endfor %}", nil, "23"},
		{"{{ 'x if y else z' }}", nil, "x if y else z"},
		{"{{ x if y else z }}", map[string]any{"x": 1, "y": false, "z": 3}, "3"},
		{"{{ (messages[0] if messages else 'none') }}", map[string]any{"messages": []any{}}, "none"}, // lazy
		{"{% macro f(s='d' if x else 'e') %}{{ s }}{% endmacro %}{{ f() }}", map[string]any{"x": true}, "d"},
		{"{{ (1 if x else 2) + (3 if y else 4) }}", map[string]any{"x": true, "y": false}, "5"},
		{"{{ ((1 if x else 2) if y else 5) }}", map[string]any{"x": false, "y": true}, "2"},
		{"{{ 'a' ~ (x | upper if x else 'none') }}", map[string]any{"x": "hi"}, "aHI"},
		{"{{ '  a b  '.strip() ~ '|' ~ '  a b  '.rstrip() ~ '|' ~ 'xxaxx'.strip('x') }}", nil, "a b|  a b|a"},
		{"{{ ' a  b c '.split() | join(',') }}|{{ 'a,b,,c'.split(',') | join(';') }}|{{ 'a b c'.split(None, 1) | join(';') }}", nil, "a,b,c|a;b;;c|a;b c"},
		{"{{ 'aXbXc'.replace('X', '-') }}|{{ 'aXbXc'.replace('X', '-', 1) }}", nil, "a-b-c|a-bXc"},
		{"{% generation %}{{ 'in' }}{% endgeneration %}|", nil, "in|"},
	} {
		tpl, err := NewChatTemplate(c.src, nil)
		if err != nil {
			t.Errorf("%s: %v", c.src, err)
			continue
		}
		got, err := tpl.Render(nil, false, c.vars)
		if err != nil || got != c.want {
			t.Errorf("%s with %v: got %q, %v; want %q", c.src, c.vars, got, err, c.want)
		}
	}
	for _, name := range strMethodNames {
		if _, ok := methods.Str.Get(name); !ok {
			t.Errorf("gonja has no string method %q", name)
		}
	}
}

// TestStrftime: Python's strftime directives, at the fixtures' fixed time.
func TestStrftime(t *testing.T) {
	now := time.Date(2025, 3, 9, 14, 5, 6, 0, time.Local)
	for format, want := range map[string]string{
		"%d %b %Y": "09 Mar 2025", "%d %B %Y": "09 March 2025", "%Y-%m-%d %H:%M:%S": "2025-03-09 14:05:06",
		"%A %-d %B": "Sunday 9 March", "%I%p %y %j %%": "02PM 25 068 %", "%Q": "%Q",
	} {
		if got := strftime(now, format); got != want {
			t.Errorf("strftime(%q) = %q, want %q", format, got, want)
		}
	}
}

// FuzzChatTemplate: any template compiles and renders, or gives an error: never a panic or a hang.
func FuzzChatTemplate(f *testing.F) {
	for _, model := range hffixture.ChatModels() {
		if c, err := hffixture.LoadChat(model); err == nil {
			f.Add(c.Template)
		}
	}
	f.Add("{{ (a if b else c if d) ~ [x if y else z][0] }}{% for i in l if (i if j else k) %}{% endfor %}")
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := NewChatTemplate(src, map[string]string{"bos_token": "<s>"})
		if err != nil {
			return
		}
		tpl.Render([]Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}, {Role: "assistant", Content: "a"}}, true, nil)
	})
}
