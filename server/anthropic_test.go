package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// anthropicMessage is the part of an Anthropic Message the tests read.
type anthropicMessage struct {
	ID      string `json:"id"`
	Type    string `json:"type"`
	Role    string `json:"role"`
	Model   string `json:"model"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
	Usage        struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// anthropicEvent is a streamed event: its SSE name and data.
type anthropicEvent struct {
	name string
	data map[string]any
}

func anthropicStream(t *testing.T, url, body string) []anthropicEvent {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var evs []anthropicEvent
	var name string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			name = n
		} else if d, ok := strings.CutPrefix(line, "data: "); ok {
			ev := anthropicEvent{name: name}
			if err := json.Unmarshal([]byte(d), &ev.data); err != nil || ev.data["type"] != name {
				t.Fatalf("event %s: %q (%v)", name, d, err)
			}
			evs = append(evs, ev)
		}
	}
	return evs
}

// TestAnthropicMessages: /v1/messages answers greedy requests with the OpenAI endpoint's text and token count,
// in one Message and streamed with Anthropic's events, its system prompt a string or text blocks.
func TestAnthropicMessages(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	want := openAIChat(t, ts.URL, `{"messages": [{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "Once upon a time"}], "max_tokens": 20, "temperature": 0}`)
	req := `{"model": "stories", "max_tokens": 20, "temperature": 0, "system": [{"type": "text", "text": "Tell a "}, {"type": "text", "text": "story.", "cache_control": {"type": "ephemeral"}}], "messages": [{"role": "user", "content": [{"type": "text", "text": "Once upon a time"}]}], "metadata": {"user_id": "u"}`
	code, body := post(t, ts.URL+"/v1/messages", req+`}`)
	var m anthropicMessage
	if err := json.Unmarshal(body, &m); code != 200 || err != nil {
		t.Fatalf("%d %s", code, body)
	}
	if !strings.HasPrefix(m.ID, "msg_") || m.Type != "message" || m.Role != "assistant" || m.Model != "stories" || len(m.Content) != 1 ||
		m.Content[0].Type != "text" || m.Content[0].Text != want.text || m.StopReason == nil || *m.StopReason != "max_tokens" || m.StopSequence != nil ||
		m.Usage.OutputTokens != want.tokens || m.Usage.InputTokens != want.prompt {
		t.Errorf("message %s; want %q, %d tokens", body, want.text, want.tokens)
	}
	evs := anthropicStream(t, ts.URL+"/v1/messages", req+`, "stream": true}`)
	var names []string
	text := ""
	for _, ev := range evs {
		if len(names) == 0 || names[len(names)-1] != ev.name {
			names = append(names, ev.name)
		}
		if ev.name == "content_block_delta" {
			d := ev.data["delta"].(map[string]any)
			if d["type"] != "text_delta" {
				t.Errorf("delta %v", d)
			}
			text += d["text"].(string)
		}
	}
	wantNames := "message_start content_block_start ping content_block_delta content_block_stop message_delta message_stop"
	last := evs[len(evs)-2].data
	if strings.Join(names, " ") != wantNames || text != want.text || last["delta"].(map[string]any)["stop_reason"] != "max_tokens" ||
		last["usage"].(map[string]any)["output_tokens"] != float64(want.tokens) {
		t.Errorf("stream: %v, %q, last %v; want %s, %q", names, text, last, wantNames, want.text)
	}
	// A stop sequence: stop_reason stop_sequence, naming it.
	code, body = post(t, ts.URL+"/v1/messages", `{"model": "stories", "max_tokens": 20, "temperature": 0, "system": "Tell a story.", "messages": [{"role": "user", "content": "Once upon a time"}], "stop_sequences": ["storm"]}`)
	json.Unmarshal(body, &m)
	if before, _, _ := strings.Cut(want.text, "storm"); code != 200 || m.Content[0].Text != before || *m.StopReason != "stop_sequence" || m.StopSequence == nil || *m.StopSequence != "storm" {
		t.Errorf("stop sequence: %d %s", code, body)
	}
}

// TestAnthropicErrors: required and unsupported fields are named, in Anthropic's error shape.
func TestAnthropicErrors(t *testing.T) {
	_, ts := newTestServer(t, Config{MaxTokens: 100})
	msgs := `"model": "stories", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]`
	for _, c := range []struct {
		body string
		code int
		kind string
		want string
	}{
		{`{"model": "stories", "messages": [{"role": "user", "content": "hi"}]}`, 400, "invalid_request_error", "max_tokens is required"},
		{`{"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}`, 400, "invalid_request_error", "model is required"},
		{`{` + msgs + `, "tools": [{"name": "f", "type": "web_search_20250305"}]}`, 400, "invalid_request_error", "server tools are not supported"},
		{`{` + msgs + `, "tools": [{"name": "f"}], "tool_choice": {"type": "sometimes"}}`, 400, "invalid_request_error", `type "sometimes" is not one of auto, any, tool, none`},
		{`{` + msgs + `, "thinking": {"type": "enabled"}}`, 400, "invalid_request_error", `unsupported field "thinking"`},
		{`{` + msgs + `, "temperature": 1.5}`, 400, "invalid_request_error", "temperature must be in [0, 1]"},
		{`{` + msgs + `, "max_tokens": 101}`, 400, "invalid_request_error", "max_tokens must be in [1, 100]"},
		{`{"model": "stories", "max_tokens": 5, "messages": [{"role": "system", "content": "hi"}]}`, 400, "invalid_request_error", `messages[0].role "system" is not supported`},
		{`{"model": "stories", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "The"}]}`, 400, "invalid_request_error", "final assistant message"},
		{`{"model": "stories", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}`, 400, "invalid_request_error", "images and documents are not supported"},
		{`{"model": "stories", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]}`, 400, "invalid_request_error", `want {"type": "tool_result", "tool_use_id", "content"}`},
		{`{"model": "stories", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}]}`, 400, "invalid_request_error", "tool_use blocks belong in an assistant's message"},
		{`{"model": "claude-3", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}`, 404, "not_found_error", `the model "claude-3" does not exist`},
	} {
		code, body := post(t, ts.URL+"/v1/messages", c.body)
		var m anthropicMessage
		if err := json.Unmarshal(body, &m); err != nil || code != c.code || m.Type != "error" || m.Error == nil || m.Error.Type != c.kind || !strings.Contains(m.Error.Message, c.want) {
			t.Errorf("%s: %d %s; want %d %s with %q", c.body, code, body, c.code, c.kind, c.want)
		}
	}
}

// TestAuthHeaders: with a key, x-api-key is accepted as well as a Bearer token (anthropic-version tolerated),
// a wrong one is refused in each API's error shape, and the chat page's files need no key.
func TestAuthHeaders(t *testing.T) {
	_, ts := newTestServer(t, Config{APIKey: "s3cret"})
	do := func(method, path string, h map[string]string, body string) (int, string) {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		bufio.NewReader(resp.Body).WriteTo(&b)
		return resp.StatusCode, b.String()
	}
	msg := `{"model": "stories", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}`
	for _, c := range []struct {
		method, path string
		h            map[string]string
		code         int
		want         string
	}{
		{"POST", "/v1/messages", map[string]string{"x-api-key": "s3cret", "anthropic-version": "2023-06-01"}, 200, `"type":"message"`},
		{"POST", "/v1/messages", map[string]string{"x-api-key": "wrong"}, 401, `"type":"authentication_error"`},
		{"POST", "/v1/messages", nil, 401, `"type":"error"`},
		{"GET", "/api/tags", map[string]string{"Authorization": "Bearer s3cret"}, 200, `"models"`},
		{"GET", "/api/tags", map[string]string{"x-api-key": "s3cret"}, 200, `"models"`},
		{"GET", "/api/tags", nil, 401, `{"error":"missing or wrong API key`},
		{"GET", "/api/info", nil, 401, `"error"`},
		{"GET", "/api/pipeline", map[string]string{"Authorization": "Bearer nope"}, 401, `"error"`},
		{"GET", "/v1/models", map[string]string{"x-api-key": "s3cret"}, 200, `"stories"`},
		{"GET", "/", nil, 200, "<!doctype html>"},
		{"GET", "/page/chat.js", nil, 200, "use strict"},
	} {
		code, body := do(c.method, c.path, c.h, msg)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("%s %s %v: %d %.200s; want %d with %q", c.method, c.path, c.h, code, body, c.code, c.want)
		}
	}
}

// TestAnthropicTools: tool_choice any constrains the answer to a call, a tool_use block (stop reason tool_use),
// streamed as a tool_use block with its input as one input_json_delta; the call and a tool_result block go back
// through the template.
func TestAnthropicTools(t *testing.T) {
	_, ts := newTestServer(t, Config{MaxTokens: 300})
	req := `{"model": "stories", "max_tokens": 200, "temperature": 0, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}], "tool_choice": {"type": "any"}`
	code, body := post(t, ts.URL+"/v1/messages", req+`}`)
	var m struct {
		Content []struct {
			Type  string         `json:"type"`
			ID    string         `json:"id"`
			Name  string         `json:"name"`
			Input map[string]any `json:"input"`
		} `json:"content"`
		StopReason string `json:"stop_reason"`
	}
	if err := json.Unmarshal(body, &m); code != 200 || err != nil || m.StopReason != "tool_use" || len(m.Content) != 1 ||
		m.Content[0].Type != "tool_use" || m.Content[0].Name != "get_weather" || m.Content[0].Input["city"] == nil || !strings.HasPrefix(m.Content[0].ID, "toolu_") {
		t.Fatalf("%d %s", code, body)
	}
	evs := anthropicStream(t, ts.URL+"/v1/messages", req+`, "stream": true}`)
	var partial, stop string
	for _, ev := range evs {
		switch ev.name {
		case "content_block_delta":
			if d := ev.data["delta"].(map[string]any); d["type"] == "input_json_delta" {
				partial += d["partial_json"].(string)
			} else if d["text"] != "" {
				t.Errorf("text streamed: %v", d)
			}
		case "message_delta":
			stop, _ = ev.data["delta"].(map[string]any)["stop_reason"].(string)
		}
	}
	var input map[string]any
	if json.Unmarshal([]byte(partial), &input) != nil || input["city"] != m.Content[0].Input["city"] || stop != "tool_use" {
		t.Errorf("stream: input %q, stop %q; want %v", partial, stop, m.Content[0].Input)
	}
	use, _ := json.Marshal(m.Content[0])
	next := `{"model": "stories", "max_tokens": 20, "temperature": 0, "messages": [{"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": [` + string(use) + `]}, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "` + m.Content[0].ID + `", "content": [{"type": "text", "text": "21 degrees"}]}]}], "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}`
	if code, body := post(t, ts.URL+"/v1/messages", next); code != 200 || !strings.Contains(string(body), `"type":"text"`) {
		t.Errorf("after the tool_result: %d %s", code, body)
	}
}
