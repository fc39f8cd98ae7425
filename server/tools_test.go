package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestParseCalls(t *testing.T) {
	names := []string{"get_weather", "f"}
	for _, c := range []struct {
		text, content string
		calls         []string // name + " " + arguments
	}{
		{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "", []string{`get_weather {"city":"Paris"}`}},
		{"Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", "Let me look.", []string{`get_weather {"city":"Paris"}`, "f {}"}},
		{"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}", "", []string{`get_weather {"city":"Paris"}`}},                                   // cut before </tool_call> (a stop token)
		{`{"name": "get_weather", "parameters": {"city": "Paris"}}`, "", []string{`get_weather {"city":"Paris"}`}},                                                         // Llama 3.x
		{`[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "f", "arguments": "{}"}]`, "", []string{`get_weather {"city":"Paris"}`, "f {}"}}, // Mistral
		{` [{"name": "f", "arguments": {"x": [1, 2]}}]`, "", []string{`f {"x":[1,2]}`}},                                                                                    // Mistral, its special marker left out of the text
		{"```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```", "", []string{`get_weather {"city":"Paris"}`}},                                  // Qwen2.5-Coder
		{"Sure:\n```json\n{\"name\": \"f\", \"arguments\": {}}\n```\n", "Sure:", []string{"f {}"}},
		{`{"name": "other", "arguments": {}}`, `{"name": "other", "arguments": {}}`, nil}, // not an offered tool
		{`{"answer": 42}`, `{"answer": 42}`, nil},
		{"Here is code:\n```json\n{\"a\": 1}\n```", "Here is code:\n```json\n{\"a\": 1}\n```", nil},
		{"<tool_call>\nnot json\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", nil},
		{"Plain answer.", "Plain answer.", nil},
	} {
		content, calls := parseCalls(c.text, names)
		var got []string
		for _, call := range calls {
			got = append(got, call.name+" "+call.arguments)
			if len(call.id) != 9 {
				t.Errorf("id %q", call.id)
			}
		}
		if content != c.content || fmt.Sprint(got) != fmt.Sprint(c.calls) {
			t.Errorf("%q: content %q, calls %q; want %q, %q", c.text, content, got, c.content, c.calls)
		}
	}
}

func TestContentSafe(t *testing.T) {
	for text, want := range map[string]int{
		"Hello":              5,
		"Hello <tool":        6,
		"Hello <tool_call>{": 6,
		"  {\"name\"":        0,
		"\n":                 0,
		"See ``":             4,
		"[TOOL_CALLS] [":     0,
		"A list: [1, 2]":     14,
		"x\n```json\n{\"a\"": 2,
	} {
		if got := contentSafe(text); got != want {
			t.Errorf("%q: %d, want %d", text, got, want)
		}
	}
}

const weatherTool = `{"type": "function", "function": {"name": "get_weather", "description": "The weather of a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false}}}`

type toolAnswer struct {
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
}

// TestToolCalls: tool_choice required (or a named function) constrains stories260K's answer to a call of the
// tool with arguments of its schema, answered as message.tool_calls or streamed as delta.tool_calls with finish
// reason tool_calls; the call and the tool's result go back through the chat template for the next answer.
func TestToolCalls(t *testing.T) {
	_, ts := newTestServer(t, Config{MaxTokens: 300})
	url := ts.URL + "/v1/chat/completions"
	user := `{"role": "user", "content": "What is the weather in Paris?"}`
	for _, choice := range []string{`"required"`, `{"type": "function", "function": {"name": "get_weather"}}`} {
		body := `{"messages": [` + user + `], "tools": [` + weatherTool + `, {"type": "function", "function": {"name": "other"}}], "tool_choice": ` + choice + `, "temperature": 0, "max_tokens": 250}`
		code, b := post(t, url, body)
		var a toolAnswer
		if code != 200 || json.Unmarshal(b, &a) != nil || len(a.Choices) != 1 {
			t.Fatalf("%s: %d %s", choice, code, b)
		}
		ch := a.Choices[0]
		if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.Content != nil {
			t.Fatalf("%s: %s", choice, b)
		}
		call := ch.Message.ToolCalls[0]
		var args struct {
			City string `json:"city"`
			Unit string `json:"unit"`
		}
		if call.Type != "function" || strings.Contains(choice, "get_weather") && call.Function.Name != "get_weather" || json.Unmarshal([]byte(call.Function.Arguments), &args) != nil {
			t.Errorf("%s: call %+v", choice, call)
		}
		if call.Function.Name == "get_weather" && args.Unit != "c" && args.Unit != "f" {
			t.Errorf("%s: arguments %s", choice, call.Function.Arguments)
		}
		// Streamed: the same call, as delta.tool_calls.
		resp, err := http.Post(url, "application/json", strings.NewReader(strings.Replace(body, `"temperature"`, `"stream": true, "temperature"`, 1)))
		if err != nil {
			t.Fatal(err)
		}
		var deltas []map[string]any
		finish := ""
		sc := strings.Split(readAll(t, resp), "\n")
		for _, line := range sc {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var c struct {
				Choices []struct {
					Delta struct {
						Content   *string          `json:"content"`
						ToolCalls []map[string]any `json:"tool_calls"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
			}
			json.Unmarshal([]byte(data), &c)
			for _, ch := range c.Choices {
				if ch.Delta.Content != nil && *ch.Delta.Content != "" {
					t.Errorf("%s: streamed content %q", choice, *ch.Delta.Content)
				}
				deltas = append(deltas, ch.Delta.ToolCalls...)
				if ch.FinishReason != nil {
					finish = *ch.FinishReason
				}
			}
		}
		if len(deltas) != 1 || finish != "tool_calls" {
			t.Fatalf("%s: streamed calls %v, finish %q", choice, deltas, finish)
		}
		if f := deltas[0]["function"].(map[string]any); f["name"] != call.Function.Name || f["arguments"] != call.Function.Arguments || deltas[0]["index"] != 0.0 {
			t.Errorf("%s: streamed %v, want %+v", choice, deltas[0], call)
		}
		// The call and its result, back through the template.
		callJSON, _ := json.Marshal(map[string]any{"id": call.ID, "type": "function", "function": map[string]any{"name": call.Function.Name, "arguments": call.Function.Arguments}})
		next := `{"messages": [` + user + `, {"role": "assistant", "content": null, "tool_calls": [` + string(callJSON) + `]}, {"role": "tool", "tool_call_id": "` + call.ID + `", "content": "21 degrees"}], "tools": [` + weatherTool + `], "temperature": 0, "max_tokens": 20}`
		code, b = post(t, url, next)
		if code != 200 || json.Unmarshal(b, &a) != nil || a.Choices[0].Message.Content == nil || *a.Choices[0].Message.Content == "" {
			t.Errorf("the tool's result: %d %s", code, b)
		}
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := fmt.Fprint(&b, ""); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return b.String()
}

// TestChoicesN: n choices share the batch, each sampled with the seed plus its index: each is the answer of
// one request with that seed, in its place, streamed or not.
func TestChoicesN(t *testing.T) {
	_, ts := newTestServer(t, Config{MaxTokens: 100})
	for _, ep := range []struct{ url, body string }{
		{ts.URL + "/v1/chat/completions", `"messages": [{"role": "user", "content": "Tell a story."}]`},
		{ts.URL + "/v1/completions", `"prompt": "Once upon a time"`},
	} {
		var want []string
		for i := range 3 {
			code, b := post(t, ep.url, fmt.Sprintf(`{%s, "max_tokens": 12, "temperature": 1, "seed": %d}`, ep.body, 7+i))
			var c completion
			if code != 200 || json.Unmarshal(b, &c) != nil {
				t.Fatalf("%d %s", code, b)
			}
			want = append(want, c.Choices[0].Text+c.Choices[0].Message.Content)
		}
		code, b := post(t, ep.url, fmt.Sprintf(`{%s, "max_tokens": 12, "temperature": 1, "seed": 7, "n": 3}`, ep.body))
		var c struct {
			Choices []struct {
				Index   int    `json:"index"`
				Text    string `json:"text"`
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
			Usage usageJSON `json:"usage"`
		}
		if code != 200 || json.Unmarshal(b, &c) != nil || len(c.Choices) != 3 {
			t.Fatalf("n 3: %d %s", code, b)
		}
		for i, ch := range c.Choices {
			if ch.Index != i || ch.Text+ch.Message.Content != want[i] {
				t.Errorf("%s choice %d: %q, want %q", ep.url, i, ch.Text+ch.Message.Content, want[i])
			}
		}
		if c.Usage.CompletionTokens != 36 {
			t.Errorf("usage %+v", c.Usage)
		}
		resp, err := http.Post(ep.url, "application/json", strings.NewReader(fmt.Sprintf(`{%s, "max_tokens": 12, "temperature": 1, "seed": 7, "n": 3, "stream": true}`, ep.body)))
		if err != nil {
			t.Fatal(err)
		}
		got := make([]string, 3)
		finished := 0
		for _, line := range strings.Split(readAll(t, resp), "\n") {
			data, ok := strings.CutPrefix(line, "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var ev struct {
				Choices []struct {
					Index int    `json:"index"`
					Text  string `json:"text"`
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
			}
			json.Unmarshal([]byte(data), &ev)
			for _, ch := range ev.Choices {
				got[ch.Index] += ch.Text + ch.Delta.Content
				if ch.FinishReason != nil {
					finished++
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || finished != 3 {
			t.Errorf("%s streamed: %q (%d finished), want %q", ep.url, got, finished, want)
		}
	}
}
