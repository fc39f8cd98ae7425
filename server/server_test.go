package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/profiler"
	"github.com/layerstream/layerstream/tokenizer"
)

// TestMain points the layerstream cache (where checkpoints are split on first use) at a temporary folder.
func TestMain(m *testing.M) { os.Exit(testutil.RunWithCache(m)) }

// newTestServer serves stories260K (with a chat template) on a loopback listener, its pipeline profiled live
// as serve does.
func newTestServer(t *testing.T, cfg Config) (*Server, *httptest.Server) {
	t.Helper()
	if cfg.Profiler == nil {
		cfg.Profiler = profiler.NewLive()
	}
	e, err := engine.Open(context.Background(), testutil.ChatModel(t), engine.Options{MaxBatch: 64, Profiler: cfg.Profiler})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	cfg.Engine = e
	if cfg.ModelID == "" {
		cfg.ModelID = "stories"
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// completion is the part of a (chat) completion response or chunk the tests read.
type completion struct {
	Object  string `json:"object"`
	Choices []struct {
		Text    string `json:"text"`
		Message struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta struct {
			Role    *string `json:"role"`
			Content *string `json:"content"`
		} `json:"delta"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
	Usage *usageJSON `json:"usage"`
	Error *struct {
		Message string  `json:"message"`
		Param   *string `json:"param"`
	} `json:"error"`
}

// readStream reads server-sent events up to "data: [DONE]" (done reports whether it came).
func readStream(t *testing.T, r io.Reader) (events []completion, done bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			return events, true
		}
		var c completion
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		events = append(events, c)
	}
	return events, false
}

// streamText joins a stream's text and returns its finish reason and usage.
func streamText(events []completion) (text, finish string, usage *usageJSON) {
	for _, c := range events {
		for _, ch := range c.Choices {
			text += ch.Text
			if ch.Delta.Content != nil {
				text += *ch.Delta.Content
			}
			if ch.FinishReason != nil {
				finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			usage = c.Usage
		}
	}
	return text, finish, usage
}

// TestCompletions: a greedy completion is the engine's text, streamed or not, with its usage and finish reason.
func TestCompletions(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	want, err := s.cfg.Engine.GenerateText(context.Background(), engine.TextRequest{Prompt: "Once upon a time", MaxNewTokens: 30}, nil)
	if err != nil {
		t.Fatal(err)
	}
	code, body := post(t, ts.URL+"/v1/completions", `{"model": "stories", "prompt": "Once upon a time", "max_tokens": 30, "temperature": 0}`)
	var c completion
	if err := json.Unmarshal(body, &c); code != 200 || err != nil {
		t.Fatalf("%d %s (%v)", code, body, err)
	}
	if c.Object != "text_completion" || c.Choices[0].Text != want.Text || *c.Choices[0].FinishReason != "length" ||
		*c.Usage != (usageJSON{PromptTokens: len(want.PromptIDs), CompletionTokens: 30, TotalTokens: len(want.PromptIDs) + 30}) {
		t.Errorf("completion %s, want text %q", body, want.Text)
	}
	// top_p 0 keeps the most likely token alone (OpenAI's and transformers' meaning): greedy's text at any
	// temperature and seed, not a draw from the whole distribution.
	for _, seed := range []int{1, 2} {
		code, body := post(t, ts.URL+"/v1/completions", fmt.Sprintf(`{"prompt": "Once upon a time", "max_tokens": 30, "temperature": 2, "top_p": 0, "seed": %d}`, seed))
		var c completion
		if err := json.Unmarshal(body, &c); code != 200 || err != nil || c.Choices[0].Text != want.Text {
			t.Errorf("top_p 0, seed %d: %d %s, want greedy's %q", seed, code, body, want.Text)
		}
	}
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(
		`{"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	events, done := readStream(t, resp.Body)
	text, finish, usage := streamText(events)
	if !done || text != want.Text || finish != "length" || usage == nil || usage.CompletionTokens != 30 || len(events) < 10 {
		t.Errorf("stream: %d events, done %v, text %q, finish %q, usage %+v; want %q", len(events), done, text, finish, usage, want.Text)
	}
	// A stop string ends the text before it, with finish_reason "stop"; logprobs come per token.
	code, body = post(t, ts.URL+"/v1/completions", `{"prompt": "Once upon a time", "max_tokens": 30, "temperature": 0, "stop": ["Lily"], "logprobs": 2}`)
	var l struct {
		Choices []struct {
			Text     string             `json:"text"`
			Finish   string             `json:"finish_reason"`
			Logprobs completionLogprobs `json:"logprobs"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(body, &l); code != 200 || err != nil {
		t.Fatalf("%d %s", code, body)
	}
	ch := l.Choices[0]
	if ch.Text != ", there was a little girl named " || ch.Finish != "stop" || len(ch.Logprobs.Tokens) == 0 ||
		len(ch.Logprobs.TopLogprobs[0]) != 2 || len(ch.Logprobs.TextOffset) != len(ch.Logprobs.Tokens) {
		t.Errorf("stop and logprobs: %s", body)
	}
}

// TestChatCompletions: the chat template renders the messages; streaming starts with the assistant role and
// carries the same text as the plain response; logprobs follow OpenAI's layout.
func TestChatCompletions(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	msgs := []tokenizer.Message{{Role: "system", Content: "Tell a story."}, {Role: "user", Content: "Once upon a time"}}
	want, err := s.cfg.Engine.GenerateText(context.Background(), engine.TextRequest{Messages: msgs, MaxNewTokens: 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := `{"model": "stories", "messages": [{"role": "system", "content": "Tell a story."}, {"role": "user", "content": [{"type": "text", "text": "Once upon "}, {"type": "text", "text": "a time"}]}], "max_tokens": 20, "temperature": 0, "logprobs": true, "top_logprobs": 3, "user": "u1", "n": 1, "presence_penalty": 0}`
	code, body := post(t, ts.URL+"/v1/chat/completions", req)
	var c completion
	if err := json.Unmarshal(body, &c); code != 200 || err != nil {
		t.Fatalf("%d %s", code, body)
	}
	var lp struct {
		Content []chatLogprob `json:"content"`
	}
	json.Unmarshal(c.Choices[0].Logprobs, &lp)
	if c.Object != "chat.completion" || c.Choices[0].Message.Role != "assistant" || c.Choices[0].Message.Content != want.Text ||
		len(lp.Content) != 20 || len(lp.Content[0].TopLogprobs) != 3 || lp.Content[0].Logprob != lp.Content[0].TopLogprobs[0].Logprob {
		t.Errorf("chat completion %s, want content %q", body, want.Text)
	}
	if bytes.Contains(body, []byte(`"top_logprobs":null`)) {
		t.Errorf("a most likely token carries top_logprobs of its own (not in OpenAI's layout): %s", body)
	}
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(strings.Replace(req, `"max_tokens"`, `"stream": true, "max_tokens"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events, done := readStream(t, resp.Body)
	text, finish, usage := streamText(events)
	if !done || text != want.Text || finish != "length" || usage != nil || events[0].Choices[0].Delta.Role == nil || *events[0].Choices[0].Delta.Role != "assistant" {
		t.Errorf("chat stream: done %v, text %q, finish %q, usage %v, first %+v", done, text, finish, usage, events[0])
	}
}

// TestRequestErrors: malformed JSON, unknown fields, values that would change the result, oversized bodies,
// bounds and unknown models are refused with OpenAI's error body naming the field.
func TestRequestErrors(t *testing.T) {
	_, ts := newTestServer(t, Config{MaxBodyBytes: 4096, MaxTokens: 100})
	chat, comp := ts.URL+"/v1/chat/completions", ts.URL+"/v1/completions"
	msgs := `"messages": [{"role": "user", "content": "hi"}]`
	for _, c := range []struct {
		url, body string
		code      int
		param     string
		want      string
	}{
		{comp, `{"prompt": "x",`, 400, "", "not a JSON object"},
		{comp, `[1, 2]`, 400, "", "not a JSON object"},
		{comp, `null`, 400, "", "not a JSON object"},
		{comp, `{"prompt": "x", "foo": 1}`, 400, "foo", `unsupported field "foo"`},
		{comp, `{"prompt": "x", "suffix": "end"}`, 400, "suffix", `suffix is accepted only as ""`},
		{comp, `{"prompt": "x", "echo": true}`, 400, "echo", "echo is accepted only as false"},
		{comp, `{"prompt": ["a", "b"]}`, 400, "prompt", "one prompt per request"},
		{comp, `{"prompt": ""}`, 400, "prompt", "prompt is empty"},
		{comp, `{}`, 400, "prompt", "prompt is required"},
		{comp, `{"prompt": "x", "max_tokens": 101}`, 400, "max_tokens", "max_tokens must be in [1, 100]"},
		{comp, `{"prompt": "x", "max_tokens": "5"}`, 400, "max_tokens", "want an integer"},
		{comp, `{"prompt": "x", "temperature": 3}`, 400, "temperature", "temperature must be in [0, 2]"},
		{comp, `{"prompt": "x", "logprobs": 6}`, 400, "logprobs", "logprobs must be in [0, 5]"},
		{comp, `{"prompt": "x", "repetition_penalty": 0}`, 400, "repetition_penalty", "repetition_penalty must be in (0, 100] (1 is off), got 0"},
		{comp, `{"prompt": "x", "repetition_penalty": -1}`, 400, "repetition_penalty", "repetition_penalty must be in (0, 100] (1 is off), got -1"},
		{comp, `{"prompt": "x", "repetition_penalty": 101}`, 400, "repetition_penalty", "repetition_penalty must be in (0, 100] (1 is off), got 101"},
		{comp, `{"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}`, 400, "stop", "at most 4"},
		{comp, `{"prompt": "x", "stream_options": {"include_usage": true}}`, 400, "stream_options", "only allowed with stream"},
		{comp, `{"prompt": "x", "model": "gpt-4"}`, 404, "model", `the model "gpt-4" does not exist`},
		{comp, `{"prompt": [1, 99999]}`, 400, "prompt", "outside the vocabulary"},
		{comp, `{"prompt": [1.5]}`, 400, "prompt", "prompt[0]: a token id is an integer ≥ 0, got 1.5"},
		{comp, `{"prompt": [[]]}`, 400, "prompt", "prompt[0] is empty: want at least one token id"},
		{comp, `{"prompt": []}`, 400, "prompt", "prompt is empty: want a string, or an array of token ids"},
		{comp, `{"prompt": [[1, -2]]}`, 400, "prompt", "prompt[0][1]: a token id is an integer ≥ 0, got -2"},
		{comp, `{"prompt": [[1], [2]]}`, 400, "prompt", "one prompt per request (got 2)"},
		{comp, `{"prompt": [""]}`, 400, "prompt", "prompt is empty"},
		{comp, `{"prompt": "` + strings.Repeat("a ", 600) + `"}`, 400, "prompt", "leave no room"},
		{comp, `{"prompt": "` + strings.Repeat("a ", 450) + `", "max_tokens": 100}`, 400, "max_tokens", "exceeds the model's context"},
		{chat, `{"messages": [{"role": "user", "content": "` + strings.Repeat("a ", 450) + `"}], "max_completion_tokens": 100}`, 400, "max_completion_tokens", "exceeds the model's context"},
		{comp, `{"prompt": "` + strings.Repeat("a ", 3000) + `"}`, 413, "", "exceeds 4096 bytes"},
		{chat, `{` + msgs + `, "n": 9}`, 400, "n", "n must be in [1, 8], got 9"},
		{comp, `{"prompt": "x", "n": 0}`, 400, "n", "n must be in [1, 8], got 0"},
		{chat, `{` + msgs + `, "frequency_penalty": 2.5}`, 400, "frequency_penalty", "frequency_penalty must be in [-2, 2], got 2.5"},
		{chat, `{` + msgs + `, "presence_penalty": -3}`, 400, "presence_penalty", "presence_penalty must be in [-2, 2], got -3"},
		{chat, `{` + msgs + `, "min_p": 1.5}`, 400, "min_p", "min_p must be in [0, 1], got 1.5"},
		{chat, `{` + msgs + `, "logit_bias": {"5": 101}}`, 400, "logit_bias", `logit_bias["5"] must be in [-100, 100], got 101`},
		{chat, `{` + msgs + `, "logit_bias": {"x": 1}}`, 400, "logit_bias", `logit_bias: key "x" is not a token id`},
		{chat, `{` + msgs + `, "logit_bias": [1]}`, 400, "logit_bias", "logit_bias: want an object from token ids to numbers"},
		{chat, `{` + msgs + `, "logit_bias": {"99999": 1}}`, 400, "logit_bias", "logit bias: token id 99999 is outside the vocabulary"},
		{chat, `{` + msgs + `, "tools": [{"type": "function"}]}`, 400, "tools[0].type", `only tools of type "function", with a function, are supported`},
		{chat, `{` + msgs + `, "tool_choice": "required"}`, 400, "tool_choice", `tool_choice "required" needs tools`},
		{chat, `{` + msgs + `, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}`, 400, "tool_choice.function.name", `"g" is none of the tools`},
		{chat, `{` + msgs + `, "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "string", "format": "date"}}}}}], "tool_choice": "required"}`, 400, "tools[0].function.parameters.properties.a.format", `the keyword "format" is not supported`},
		{chat, `{"messages": [{"role": "assistant", "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": 3}}]}]}`, 400, "messages[0].tool_calls", `want [{"id", "type": "function"`},
		{chat, `{` + msgs + `, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "a+"}}}}`, 400, "response_format.json_schema.schema.pattern", `the keyword "pattern" is not supported`},
		{chat, `{` + msgs + `, "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}`, 400, "response_format.json_schema.schema", `is required with type json_schema`},
		{chat, `{` + msgs + `, "response_format": {"type": "yaml"}}`, 400, "response_format.type", `"yaml" is not supported`},
		{chat, `{` + msgs + `, "top_logprobs": 2}`, 400, "top_logprobs", "needs logprobs: true"},
		{chat, `{` + msgs + `, "max_tokens": 0}`, 400, "max_tokens", "must be in [1, 100]"},
		{chat, `{"messages": []}`, 400, "messages", "1 to 4096 messages"},
		{chat, `{"messages": [{"role": "user", "content": "hi", "name": "bob"}]}`, 400, "messages[0].name", "messages[0].name is only supported in a tool's message"},
		{chat, `{"messages": [{"role": "user", "content": "hi", "refusal": "x"}]}`, 400, "messages[0].refusal", "messages[0].refusal is not supported"},
		{chat, `{"messages": [{"role": "tool", "content": "hi"}]}`, 400, "messages[0].tool_call_id", `tool_call_id is required in a tool's message`},
		{chat, `{"messages": [{"role": "critic", "content": "hi"}]}`, 400, "messages[0].role", `role "critic" is not supported`},
		{chat, `{"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "x"}}]}]}`, 400, "messages[0].content", `part 1 has type "image_url": images, audio and files are not supported`},
		{chat, `{"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x"}}]}]}`, 400, "messages[0].content", "images, audio and files are not supported"},
		{chat, `{"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {}}]}]}`, 400, "messages[0].content", "part 0: want"},
		{chat, `{"messages": [{"role": "user", "content": 5}]}`, 400, "messages[0].content", "want a string or an array"},
		{chat, `{"messages": [{"role": "user"}]}`, 400, "messages[0].content", "required"},
		{ts.URL + "/v1/embeddings", `{}`, 404, "", "no route POST /v1/embeddings"},
	} {
		code, body := post(t, c.url, c.body)
		var e completion
		json.Unmarshal(body, &e)
		param := ""
		if e.Error != nil && e.Error.Param != nil {
			param = *e.Error.Param
		}
		if code != c.code || e.Error == nil || !strings.Contains(e.Error.Message, c.want) || param != c.param {
			t.Errorf("%s: %d %s; want %d, param %q, message with %q", excerpt([]byte(c.body)), code, body, c.code, c.param, c.want)
		}
	}
	// A route asked with another method: 405 with Allow.
	resp, err := http.Get(chat)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET /v1/chat/completions: %d, Allow %q; want 405, POST", resp.StatusCode, resp.Header.Get("Allow"))
	}
	// Null counts as absent; harmless fields are accepted.
	if code, body := post(t, comp, `{"prompt": "x", "max_tokens": 2, "user": "me", "metadata": {"k": "v"}, "store": false, "seed": null, "stop": null, "logit_bias": {}, "best_of": 1}`); code != 200 {
		t.Errorf("harmless fields: %d %s", code, body)
	}
}

// TestAPIKey: with a key, every path but /health needs it; the scheme's name is case-insensitive (RFC 7235).
func TestAPIKey(t *testing.T) {
	_, ts := newTestServer(t, Config{APIKey: "s3cret"})
	get := func(path, key string) int {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		if key != "" && !strings.Contains(key, " ") {
			key = "Bearer " + key
		}
		if key != "" {
			req.Header.Set("Authorization", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		path, key string
		code      int
	}{{"/v1/models", "", 401}, {"/v1/models", "wrong", 401}, {"/v1/models", "s3cret", 200}, {"/metrics", "", 401}, {"/health", "", 200}, {"/v1/models/stories", "s3cret", 200}, {"/v1/models/other", "s3cret", 404},
		{"/v1/models", "bearer s3cret", 200}, {"/v1/models", "BEARER s3cret", 200}, {"/v1/models", "Basic s3cret", 401}, {"/v1/models", "Bearers3cret", 401}} {
		if got := get(c.path, c.key); got != c.code {
			t.Errorf("%s with key %q: %d, want %d", c.path, c.key, got, c.code)
		}
	}
}

// TestQueueFull: past MaxInFlight requests being answered, one more gets 429 with Retry-After.
func TestQueueFull(t *testing.T) {
	s, ts := newTestServer(t, Config{MaxInFlight: 2})
	hold := make(chan struct{})
	var admitted sync.WaitGroup
	admitted.Add(2)
	s.admitted = func() { admitted.Done(); <-hold }
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, body := post(t, ts.URL+"/v1/completions", `{"prompt": "Once", "max_tokens": 3}`); code != 200 {
				t.Errorf("held request: %d %s", code, body)
			}
		}()
	}
	admitted.Wait()
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "Once", "max_tokens": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !bytes.Contains(body, []byte("queue_full")) {
		t.Errorf("third request: %d %s", resp.StatusCode, body)
	}
	close(hold)
	wg.Wait()
	s.admitted = nil
	if code, _ := post(t, ts.URL+"/v1/completions", `{"prompt": "Once", "max_tokens": 3}`); code != 200 {
		t.Errorf("after the queue emptied: %d", code)
	}
	_, metrics := get(t, ts.URL+"/metrics")
	if !strings.Contains(metrics, `layerstream_requests_total{endpoint="/v1/completions",code="429"} 1`) {
		t.Errorf("metrics do not count the 429:\n%s", metrics)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDisconnectCancels: a client that goes away mid-stream ends its generation at the next step, and its
// request is counted as 499, as one not streamed is (issue #36: it was counted as 200).
func TestDisconnectCancels(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	s.token = func() { time.Sleep(5 * time.Millisecond) } // 400 tokens would take 2 s
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 400, "stream": true}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event: %q, %v", line, err)
	}
	start := time.Now()
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, m := get(t, ts.URL+"/metrics"); strings.Contains(m, `layerstream_generations_total{reason="cancelled"} 1`) {
			if d := time.Since(start); d > time.Second {
				t.Errorf("the generation ended %v after the disconnect", d)
			}
			if strings.Contains(m, "layerstream_generation_tokens_total 400") {
				t.Error("all 400 tokens were generated for a client that left")
			}
			if m := waitMetric(t, ts.URL, `layerstream_requests_total{endpoint="/v1/completions"`); !strings.Contains(m, `layerstream_requests_total{endpoint="/v1/completions",code="499"} 1`) {
				t.Errorf("an abandoned stream is not counted as 499:\n%s", m)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, m := get(t, ts.URL+"/metrics")
	t.Fatalf("no cancelled generation after the client left:\n%s", m)
}

// waitMetric polls /metrics for up to 10 s until it holds want, and returns it.
func waitMetric(t *testing.T, url, want string) string {
	t.Helper()
	var m string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, m = get(t, url+"/metrics"); strings.Contains(m, want) {
			break
		}
	}
	return m
}

// TestDisconnectIsNotAServerError: a non-streaming client that leaves before its answer is counted as 499
// (nginx's "client closed request"), never as a 5xx, and nothing is logged above INFO for it.
func TestDisconnectIsNotAServerError(t *testing.T) {
	var logs testutil.SyncBuffer
	s, ts := newTestServer(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	first := make(chan struct{})
	var once sync.Once
	s.token = func() { once.Do(func() { close(first) }); time.Sleep(5 * time.Millisecond) } // 400 tokens: 2 s
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 400}`))
	req.Header.Set("Content-Type", "application/json")
	answered := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	<-first
	cancel()
	if err := <-answered; err == nil {
		t.Fatal("the request was answered before the client left")
	}
	m := waitMetric(t, ts.URL, `layerstream_requests_total{endpoint="/v1/completions"`)
	if !strings.Contains(m, `layerstream_requests_total{endpoint="/v1/completions",code="499"} 1`) {
		t.Errorf("the disconnect is not counted as 499:\n%s", m)
	}
	if strings.Contains(m, `code="5`) {
		t.Errorf("a client's disconnect counted as a server error:\n%s", m)
	}
	if l := logs.String(); strings.Contains(l, "level=ERROR") || strings.Contains(l, "level=WARN") {
		t.Errorf("a client's disconnect logged as a problem:\n%s", l)
	}
}

// TestConcurrentStreams: many streaming clients at once each get their solo greedy text, sharing the passes;
// the aggregate rate is logged against the same requests one after the other.
func TestConcurrentStreams(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	clients := 64
	if testing.Short() {
		clients = 16
	}
	prompts := []string{"Once upon a time", "The cat", "Lily and Ben", "One day, a little", "The sun was", "Tom had a big", "In the park", "She was very"}
	e := s.cfg.Engine
	want := map[string]string{}
	seqStart := time.Now()
	seqTokens := 0
	for _, p := range prompts {
		r, err := e.GenerateText(context.Background(), engine.TextRequest{Prompt: p, MaxNewTokens: 48}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want[p] = r.Text
		seqTokens += len(r.GeneratedIDs)
	}
	seqRate := float64(seqTokens) / time.Since(seqStart).Seconds()
	stepsBefore := e.Load().Steps
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	results := make([]string, clients)
	tokens := make([]int, clients)
	start := time.Now()
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"prompt": %q, "max_tokens": 48, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}}`, prompts[i%len(prompts)])
			req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/completions", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			events, done := readStream(t, resp.Body)
			text, _, usage := streamText(events)
			if !done || usage == nil {
				t.Errorf("client %d: stream ended early (status %d)", i, resp.StatusCode)
				return
			}
			results[i], tokens[i] = text, usage.CompletionTokens
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	total := 0
	for i := range clients {
		if p := prompts[i%len(prompts)]; results[i] != want[p] {
			t.Errorf("client %d (%q): %q, solo %q", i, p, results[i], want[p])
		}
		total += tokens[i]
	}
	steps := e.Load().Steps - stepsBefore
	t.Logf("%d streaming clients: %d tokens in %.2f s (%.0f tokens/s, %d passes); one at a time: %.0f tokens/s; ratio %.1f",
		clients, total, elapsed.Seconds(), float64(total)/elapsed.Seconds(), steps, seqRate, float64(total)/elapsed.Seconds()/seqRate)
	if steps >= int64(total/4) {
		t.Errorf("%d passes for %d tokens: the clients did not share the passes", steps, total)
	}
}

// FuzzParseRequest: no body makes the parser panic; an accepted request respects the bounds.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5, "stop": ["a"], "stream": true, "stream_options": {"include_usage": true}}`,
		`{"prompt": [1, 2, 3], "logprobs": 2, "temperature": 0.5, "top_p": 0.9, "top_k": 3, "seed": 7}`,
		`{"prompt": "x", "n": null, "logit_bias": {}}`,
		`{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}], "logprobs": true, "top_logprobs": 20}`,
		`{"messages": [{"role": "user", "content": "w"}, {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{"x": 1}"}}]}, {"role": "tool", "tool_call_id": "a", "content": "1"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}}], "tool_choice": "required", "n": 3}`,
		`{"messages": [{"role": "user", "content": "w"}], "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		r, err := parseRequest(body, chat, 100)
		if err != nil {
			if _, ok := err.(*requestError); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		if r.maxTokens < 0 || r.maxTokens > 100 || r.topLogprobs < 0 || r.topLogprobs > engine.MaxTopLogprobs || len(r.stop) > maxStops ||
			(chat && len(r.messages) == 0) || (!chat && r.prompt == "" && len(r.ids) == 0) {
			t.Fatalf("accepted out of bounds: %+v", r)
		}
		if r.n < 0 || r.n > maxChoices || r.toolChoice != "" && r.toolChoice != "none" && len(r.tools) == 0 {
			t.Fatalf("accepted n %d, tool_choice %q with %d tools", r.n, r.toolChoice, len(r.tools))
		}
		if r.temperature != nil && !(*r.temperature >= 0 && *r.temperature <= 2) {
			t.Fatalf("temperature %v accepted", *r.temperature)
		}
	})
}

// TestGracefulShutdown: when the server stops, a stream in flight finishes within the grace period; past it,
// the one left is cancelled and its stream ends with an error event instead of [DONE].
func TestGracefulShutdown(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		done  bool
	}{{"finishes", 30 * time.Second, true}, {"cancelled", 100 * time.Millisecond, false}} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := engine.Open(context.Background(), testutil.ChatModel(t), engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			s, err := New(Config{Engine: e, ModelID: "stories"})
			if err != nil {
				t.Fatal(err)
			}
			s.token = func() { time.Sleep(2 * time.Millisecond) } // 200 tokens: 0.4 s
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- s.Serve(ctx, ln, tc.grace) }()
			url := "http://" + ln.Addr().String()
			resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 200, "stream": true, "stop": ["zzzz"]}`))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			r := bufio.NewReader(resp.Body)
			if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
				t.Fatalf("first event %q %v", line, err)
			}
			stop() // SIGTERM
			time.Sleep(20 * time.Millisecond)
			if _, err := http.Get(url + "/health"); err == nil {
				t.Error("a new connection was accepted after shutdown began")
			}
			events, done := readStream(t, r)
			if done != tc.done {
				t.Errorf("stream ended with [DONE]: %v, want %v (%d events)", done, tc.done, len(events))
			}
			if !tc.done && (len(events) == 0 || events[len(events)-1].Error == nil) {
				t.Errorf("a cancelled stream should end with an error event, got %+v", events[len(events)-1])
			}
			select {
			case err := <-served:
				if err != nil {
					t.Errorf("Serve: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Serve did not return")
			}
		})
	}
}

// TestMetricsFormat: /metrics is Prometheus text: HELP and TYPE before each family, "name{labels} value" lines,
// histogram buckets cumulative up to +Inf = count.
func TestMetricsFormat(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	if code, body := post(t, ts.URL+"/v1/completions", `{"prompt": "Once upon a time", "max_tokens": 4}`); code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	code, m := get(t, ts.URL+"/metrics")
	if code != 200 {
		t.Fatal(code)
	}
	line := regexp.MustCompile(`^[a-z_]+(\{([a-z_]+="[^"]*",?)+\})? -?[0-9.e+-]+$`)
	typed := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(m), "\n") {
		if name, ok := strings.CutPrefix(l, "# TYPE "); ok {
			typed[strings.Fields(name)[0]] = true
			continue
		}
		if strings.HasPrefix(l, "# HELP ") {
			continue
		}
		if !line.MatchString(l) {
			t.Errorf("not a sample line: %q", l)
			continue
		}
		name := strings.FieldsFunc(l, func(r rune) bool { return r == '{' || r == ' ' })[0]
		family := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if !typed[family] && !typed[name] {
			t.Errorf("%s has no # TYPE before it", name)
		}
	}
	for _, want := range []string{
		`layerstream_requests_total{endpoint="/v1/completions",code="200"} 1`,
		"layerstream_generation_tokens_total 4",
		`layerstream_time_to_first_token_seconds_bucket{le="+Inf"} 1`,
		"layerstream_time_to_first_token_seconds_count 1",
		`layerstream_generations_total{reason="max_new_tokens"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q:\n%s", want, m)
		}
	}
}

// TestLogprobsCutWithText (issue #36 case 7): logprobs hold the tokens of the text answered, not those of the
// stop string it leaves out, streamed or not.
func TestLogprobsCutWithText(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "stop": ["girl"], "logprobs": 1, "stream": %v}`, stream)
		resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var events []completion
		if stream {
			events, _ = readStream(t, resp.Body)
		} else {
			var c completion
			json.NewDecoder(resp.Body).Decode(&c)
			events = []completion{c}
		}
		resp.Body.Close()
		text, _, _ := streamText(events)
		var tokens string
		for _, ev := range events {
			for _, ch := range ev.Choices {
				var l completionLogprobs
				json.Unmarshal(ch.Logprobs, &l)
				tokens += strings.Join(l.Tokens, "")
			}
		}
		if text != ", there was a little " || tokens == "" || !strings.HasPrefix(text, tokens) || strings.Contains(tokens, "girl") {
			t.Errorf("stream %v: text %q, logprobs' tokens %q; want the tokens of the text, not of the stop string", stream, text, tokens)
		}
	}
}

// TestSamplingFields: presence_penalty, frequency_penalty, logit_bias and min_p change the answer as OpenAI's
// do: greedy with a bias of 100 on one token answers that token at every step; a penalty moves greedy off its
// repetitions; Ollama's options take presence_penalty, frequency_penalty and min_p.
func TestSamplingFields(t *testing.T) {
	s, ts := newTestServer(t, Config{})
	tok, _ := s.cfg.Engine.Tokenizer()
	ids, _ := tok.Encode(" Lily", false)
	id := ids[len(ids)-1]
	greedy := func(extra string) string {
		t.Helper()
		code, body := post(t, ts.URL+"/v1/completions", `{"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0`+extra+`}`)
		var c completion
		if json.Unmarshal(body, &c); code != 200 || len(c.Choices) != 1 {
			t.Fatalf("%s: %d %s", extra, code, body)
		}
		return c.Choices[0].Text
	}
	plain := greedy("")
	if got := greedy(fmt.Sprintf(`, "logit_bias": {"%d": 100}`, id)); got != strings.Repeat(" Lily", 60) {
		t.Errorf("logit_bias 100 on %d (\" Lily\"): %q, want it at every step", id, got)
	}
	if got := greedy(`, "frequency_penalty": 2, "presence_penalty": 2`); got == plain {
		t.Errorf("penalties change nothing: %q", got)
	}
	if got := greedy(`, "min_p": 0.5, "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {}`); got != plain {
		t.Errorf("min_p changed greedy's answer, or zero penalties did: %q, want %q", got, plain)
	}
	code, body := post(t, ts.URL+"/api/generate", `{"model": "stories", "prompt": "Once upon a time", "raw": true, "stream": false, "options": {"num_predict": 60, "temperature": 0, "presence_penalty": 2, "frequency_penalty": 2, "min_p": 0.1}}`)
	var o struct {
		Response string `json:"response"`
	}
	if json.Unmarshal(body, &o); code != 200 || o.Response == plain {
		t.Errorf("Ollama's options with penalties: %d %s, want an answer other than %q", code, body, plain)
	}
}
