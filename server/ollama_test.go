package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// ollamaPart is the part of an Ollama response line the tests read.
type ollamaPart struct {
	Model     string `json:"model"`
	CreatedAt string `json:"created_at"`
	Message   *struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"message"`
	Response           *string `json:"response"`
	Done               bool    `json:"done"`
	DoneReason         string  `json:"done_reason"`
	TotalDuration      int64   `json:"total_duration"`
	LoadDuration       *int64  `json:"load_duration"`
	PromptEvalCount    int     `json:"prompt_eval_count"`
	PromptEvalDuration int64   `json:"prompt_eval_duration"`
	EvalCount          int     `json:"eval_count"`
	EvalDuration       int64   `json:"eval_duration"`
	Error              string  `json:"error"`
}

func (p ollamaPart) text() string {
	if p.Message != nil {
		return p.Message.Content
	}
	if p.Response != nil {
		return *p.Response
	}
	return ""
}

// ollamaStream posts a request and reads its JSON lines.
func ollamaStream(t *testing.T, url, body string) (parts []ollamaPart, contentType string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d", body, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var p ollamaPart
		if err := json.Unmarshal(sc.Bytes(), &p); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		parts = append(parts, p)
	}
	return parts, resp.Header.Get("Content-Type")
}

// TestOllamaChat: /api/chat answers greedy requests with the OpenAI endpoint's text and token count, in one
// body (stream false) and streamed as JSON lines (Ollama's default), with Ollama's fields.
func TestOllamaChat(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	msgs := `"messages": [{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "Once upon a time"}]`
	want := openAIChat(t, ts.URL, `{`+msgs+`, "max_tokens": 20, "temperature": 0}`)
	code, body := post(t, ts.URL+"/api/chat", `{"model": "stories", `+msgs+`, "stream": false, "options": {"num_predict": 20, "temperature": 0, "seed": 3, "top_k": 40, "top_p": 0.9}, "keep_alive": "5m", "format": ""}`)
	var p ollamaPart
	if err := json.Unmarshal(body, &p); code != 200 || err != nil {
		t.Fatalf("%d %s", code, body)
	}
	if _, err := time.Parse(time.RFC3339Nano, p.CreatedAt); err != nil {
		t.Errorf("created_at %q: %v", p.CreatedAt, err)
	}
	if p.Model != "stories" || p.Message == nil || p.Message.Role != "assistant" || p.text() != want.text || !p.Done || p.DoneReason != "length" ||
		p.EvalCount != want.tokens || p.PromptEvalCount != want.prompt || p.TotalDuration <= 0 || p.EvalDuration <= 0 || p.PromptEvalDuration <= 0 || p.LoadDuration == nil {
		t.Errorf("chat %s; want %q, %d tokens", body, want.text, want.tokens)
	}
	parts, ct := ollamaStream(t, ts.URL+"/api/chat", `{"model": "stories:latest", `+msgs+`, "options": {"num_predict": 20, "temperature": 0}}`)
	text, last := "", parts[len(parts)-1]
	for _, p := range parts[:len(parts)-1] {
		if p.Done || p.Message == nil {
			t.Errorf("a part before the last: %+v", p)
		}
		text += p.text()
	}
	if ct != "application/x-ndjson" || len(parts) < 5 || text != want.text || !last.Done || last.text() != "" || last.DoneReason != "length" ||
		last.EvalCount != want.tokens || last.Model != "stories:latest" {
		t.Errorf("stream: %s, %d parts, %q, last %+v; want %q", ct, len(parts), text, last, want.text)
	}
	// A stop string ends the text before it, done_reason "stop".
	code, body = post(t, ts.URL+"/api/chat", `{"model": "stories", `+msgs+`, "stream": false, "options": {"num_predict": 20, "temperature": 0, "stop": ["storm"]}}`)
	json.Unmarshal(body, &p)
	if before, _, found := strings.Cut(want.text, "storm"); code != 200 || !found || p.text() != before || p.DoneReason != "stop" {
		t.Errorf("stop: %d %s", code, body)
	}
}

// TestOllamaGenerate: /api/generate renders prompt and system with the chat template (the OpenAI chat
// endpoint's answer), or, with raw, continues the prompt as it is (the completions endpoint's answer).
func TestOllamaGenerate(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	want := openAIChat(t, ts.URL, `{"messages": [{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "Once upon a time"}], "max_tokens": 20, "temperature": 0}`)
	code, body := post(t, ts.URL+"/api/generate", `{"model": "stories", "prompt": "Once upon a time", "system": "Tell a story.", "stream": false, "options": {"num_predict": 20, "temperature": 0}}`)
	var p ollamaPart
	if err := json.Unmarshal(body, &p); code != 200 || err != nil || p.Response == nil || p.text() != want.text || p.EvalCount != want.tokens || !p.Done || p.Message != nil {
		t.Errorf("generate: %d %s; want %q", code, body, want.text)
	}
	parts, _ := ollamaStream(t, ts.URL+"/api/generate", `{"model": "stories", "prompt": "Once upon a time", "system": "Tell a story.", "options": {"num_predict": 20, "temperature": 0}}`)
	text := ""
	for _, p := range parts {
		text += p.text()
	}
	if last := parts[len(parts)-1]; text != want.text || !last.Done || last.EvalCount != want.tokens {
		t.Errorf("generate stream: %q, last %+v; want %q", text, last, want.text)
	}
	code, body = post(t, ts.URL+"/v1/completions", `{"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}`)
	var c completion
	json.Unmarshal(body, &c)
	code, body = post(t, ts.URL+"/api/generate", `{"model": "stories", "prompt": "Once upon a time", "raw": true, "stream": false, "options": {"num_predict": 12, "temperature": 0}}`)
	if err := json.Unmarshal(body, &p); code != 200 || err != nil || p.text() != c.Choices[0].Text || p.EvalCount != c.Usage.CompletionTokens {
		t.Errorf("raw: %d %s; want %q", code, body, c.Choices[0].Text)
	}
}

// TestOllamaModels: /api/tags lists the model as NAME:latest, /api/show describes it, /api/version answers.
func TestOllamaModels(t *testing.T) {
	_, ts := newTestServer(t, Config{})
	code, body := get(t, ts.URL+"/api/tags")
	var tags struct {
		Models []struct {
			Name, Model, Digest string
			ModifiedAt          time.Time `json:"modified_at"`
			Size                int64
			Details             struct{ Family string }
		}
	}
	if err := json.Unmarshal([]byte(body), &tags); code != 200 || err != nil || len(tags.Models) != 1 {
		t.Fatalf("tags: %d %s", code, body)
	}
	if m := tags.Models[0]; m.Name != "stories:latest" || m.Model != m.Name || m.Size <= 0 || len(m.Digest) != 64 || m.ModifiedAt.IsZero() || m.Details.Family != "llama" {
		t.Errorf("tags: %s", body)
	}
	code, b := post(t, ts.URL+"/api/show", `{"model": "stories"}`)
	var show struct {
		ModelInfo    map[string]any `json:"model_info"`
		Capabilities []string
	}
	if err := json.Unmarshal(b, &show); code != 200 || err != nil || show.ModelInfo["general.architecture"] != "llama" || show.ModelInfo["llama.context_length"] == nil {
		t.Errorf("show: %d %s", code, b)
	}
	if code, b := post(t, ts.URL+"/api/show", `{"model": "llama3"}`); code != 404 || !strings.Contains(string(b), `"error":"the model \"llama3\" does not exist`) {
		t.Errorf("show llama3: %d %s", code, b)
	}
	if code, body := get(t, ts.URL+"/api/version"); code != 200 || !strings.Contains(body, `"version":"`+ollamaVersion+`"`) {
		t.Errorf("version: %d %s", code, body)
	}
}

// TestOllamaErrors: fields Ollama has and layerstream does not implement are refused by name, in Ollama's
// error shape {"error": ...}.
func TestOllamaErrors(t *testing.T) {
	_, ts := newTestServer(t, Config{MaxTokens: 100})
	msgs := `"model": "stories", "messages": [{"role": "user", "content": "hi"}]`
	for _, c := range []struct {
		path, body string
		code       int
		want       string
	}{
		{"/api/chat", `{` + msgs + `, "format": "yaml"}`, 400, `format: want "", "json" or a JSON schema`},
		{"/api/chat", `{` + msgs + `, "format": {"type": "object", "minProperties": 1}}`, 400, `the keyword "minProperties" is not supported`},
		{"/api/chat", `{` + msgs + `, "options": {"num_ctx": 4096}}`, 400, `unsupported field "options.num_ctx"`},
		{"/api/chat", `{` + msgs + `, "options": {"num_predict": 101}}`, 400, "options.num_predict must be in [-2, 100]"},
		{"/api/chat", `{` + msgs + `, "options": {"temperature": "hot"}}`, 400, "options.temperature: want a number"},
		{"/api/chat", `{` + msgs + `, "options": 5}`, 400, "options: want an object"},
		{"/api/chat", `{` + msgs + `, "tools": [{"type": "function"}]}`, 400, "tools is accepted only as []"},
		{"/api/chat", `{` + msgs + `, "think": true}`, 400, "think is accepted only as false"},
		{"/api/chat", `{"model": "stories", "messages": [{"role": "user", "content": "hi", "images": ["x"]}]}`, 400, "messages[0].images is not supported"},
		{"/api/chat", `{"model": "stories", "messages": [{"role": "tool", "content": "hi"}]}`, 400, `messages[0].role "tool" is not supported`},
		{"/api/chat", `{"messages": [{"role": "user", "content": "hi"}]}`, 400, "model is required"},
		{"/api/chat", `{"model": "llama3", "messages": [{"role": "user", "content": "hi"}]}`, 404, `the model "llama3" does not exist`},
		{"/api/generate", `{"model": "stories", "prompt": "hi", "images": ["x"]}`, 400, `unsupported field "images"`},
		{"/api/generate", `{"model": "stories", "prompt": "hi", "context": [1, 2]}`, 400, `unsupported field "context"`},
		{"/api/generate", `{"model": "stories", "prompt": "hi", "template": "{{ .Prompt }}"}`, 400, `unsupported field "template"`},
		{"/api/generate", `{"model": "stories", "prompt": "hi", "suffix": "end"}`, 400, `suffix is accepted only as ""`},
		{"/api/generate", `{"model": "stories", "prompt": "hi", "raw": true, "system": "x"}`, 400, "system needs the model's chat template"},
		{"/api/generate", `{"model": "stories"}`, 400, "prompt is required"},
		{"/api/embed", `{}`, 404, "no route POST /api/embed"},
	} {
		code, body := post(t, ts.URL+c.path, c.body)
		var e struct{ Error string }
		if err := json.Unmarshal(body, &e); err != nil || code != c.code || !strings.Contains(e.Error, c.want) {
			t.Errorf("%s %s: %d %s; want %d with %q", c.path, c.body, code, body, c.code, c.want)
		}
	}
}

// greedy is an OpenAI endpoint's answer the other APIs' are compared with.
type greedy struct {
	text           string
	tokens, prompt int
}

// openAIChat posts a chat completion (not streamed) and returns its text and token counts.
func openAIChat(t *testing.T, url, body string) greedy {
	t.Helper()
	code, b := post(t, url+"/v1/chat/completions", body)
	var c completion
	if err := json.Unmarshal(b, &c); code != 200 || err != nil {
		t.Fatalf("%d %s", code, b)
	}
	return greedy{text: c.Choices[0].Message.Content, tokens: c.Usage.CompletionTokens, prompt: c.Usage.PromptTokens}
}
