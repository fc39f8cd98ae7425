package tokenizer

import (
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/internal/hffixture"
)

// TestChatTemplateTools renders a tool round trip (tools offered, the assistant's call, the tool's result) with
// the templates of the families whose tool formats the server parses: each shows the tool's definition, the
// call and the result in its own format.
func TestChatTemplateTools(t *testing.T) {
	tools := []any{map[string]any{"type": "function", "function": map[string]any{
		"name": "get_weather", "description": "Weather of a city",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}, "required": []any{"city"}}}}}
	msgs := []Message{
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ToolCalls: []ToolCall{{ID: "abcdefghi", Name: "get_weather", Arguments: map[string]any{"city": "Paris"}}}},
		{Role: "tool", ToolCallID: "abcdefghi", Name: "get_weather", Content: `{"temp": 21}`},
	}
	for model, want := range map[string][]string{
		"qwen2.5-instruct":   {"<tools>", `"name": "get_weather"`, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "<tool_response>\n{\"temp\": 21}\n</tool_response>"},
		"llama-3.1-instruct": {`"name": "get_weather"`, `{"name": "get_weather", "parameters": {"city": "Paris"}}`, "<|start_header_id|>ipython<|end_header_id|>\n\n\"{\\\"temp\\\": 21}\""},
	} {
		f, err := hffixture.LoadChat(model)
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := NewChatTemplate(f.Template, f.SpecialTokens)
		if err != nil {
			t.Fatal(err)
		}
		tpl = tpl.WithClock(func() time.Time { return time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC) })
		got, err := tpl.Render(msgs, true, map[string]any{"tools": tools})
		if err != nil {
			t.Errorf("%s: %v", model, err)
			continue
		}
		check(t, model, got, want)
	}
	// Mistral 7B v0.3's template (this version) offers the tools before the last user message (user_messages[-1],
	// the only one here), and knows no tool messages.
	f, err := hffixture.LoadChat("mistral-7b-instruct-v0.3")
	if err != nil {
		t.Fatal(err)
	}
	tpl, err := NewChatTemplate(f.Template, f.SpecialTokens)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render([]Message{{Role: "user", Content: "Weather in Paris?"}}, true, map[string]any{"tools": tools})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "mistral-7b-instruct-v0.3", got, []string{"[AVAILABLE_TOOLS][{'function': {", "'name': 'get_weather'", "[/AVAILABLE_TOOLS][INST]Weather in Paris?[/INST]"})
}

func check(t *testing.T, model, got string, want []string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: no %q in\n%s", model, w, got)
		}
	}
}

// TestNegativeIndex: x[-n] finds the item of a list of exactly n items (gonja's own bound check misses it),
// in subscripts only; list literals and text stay.
func TestNegativeIndex(t *testing.T) {
	src := `{{ messages[-1]['content'] }}|{{ 'a</think>b'.split('</think>')[-1] }}|{{ 'ab'.split('</think>')[ -1 ] }}|{% set l = [-1] %}{{ l[0] }}|{{ "[-1]" }}|[-1]`
	if got := rewriteNegativeIndexes(src); got != `{{ messages[-1:][0]['content'] }}|{{ 'a</think>b'.split('</think>')[-1:][0] }}|{{ 'ab'.split('</think>')[-1:][0] }}|{% set l = [-1] %}{{ l[0] }}|{{ "[-1]" }}|[-1]` {
		t.Errorf("rewritten: %s", got)
	}
	tpl, err := NewChatTemplate(src, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render([]Message{{Role: "user", Content: "hi"}}, true, nil)
	if want := "hi|b|ab|-1|[-1]|[-1]"; err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
}
