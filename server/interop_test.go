package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/tokenizer"
)

// pythonWith returns a Python interpreter that imports module, or skips the test saying why. $LAYERSTREAM_PYTHON
// (or, as before, $LAYERSTREAM_OPENAI_PYTHON) names it, e.g. a virtual environment's with the three clients:
// python3 -m venv DIR && DIR/bin/pip install openai 'ollama>=0.6' 'anthropic>=2'; by default python3.
func pythonWith(t *testing.T, module string) string {
	t.Helper()
	python := cmp.Or(os.Getenv("LAYERSTREAM_PYTHON"), os.Getenv("LAYERSTREAM_OPENAI_PYTHON"), "python3")
	if _, err := exec.LookPath(python); err != nil {
		t.Skipf("skipping: no Python interpreter %q (set LAYERSTREAM_PYTHON)", python)
	}
	if out, err := exec.Command(python, "-c", "import "+module).CombinedOutput(); err != nil {
		t.Skipf("skipping: %s cannot import the %s package (pip install %s, or set LAYERSTREAM_PYTHON to a venv's python): %s", python, module, module, bytes.TrimSpace(out))
	}
	return python
}

// runClient runs a client script of testdata with its arguments and decodes the JSON it prints into v.
func runClient(t *testing.T, python, script string, v any, args ...string) {
	t.Helper()
	cmd := exec.Command(python, append([]string{filepath.Join("testdata", script)}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, stderr.String())
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %s: %v", script, raw, err)
	}
}

// TestOpenAIPythonClient drives the server with the official openai Python package (server/testdata/
// openai_client.py): listing models, chat and completions, streamed and not, logprobs, a refused field and a
// wrong API key. It skips, saying why, without Python or the package (see pythonWith).
func TestOpenAIPythonClient(t *testing.T) {
	python := pythonWith(t, "openai")
	s, ts := newTestServer(t, Config{APIKey: "k3y"})
	var got struct {
		Version string   `json:"openai_version"`
		Models  []string `json:"models"`
		Chat    struct {
			Content          string `json:"content"`
			Role             string `json:"role"`
			FinishReason     string `json:"finish_reason"`
			CompletionTokens int    `json:"completion_tokens"`
			Logprobs         int    `json:"logprobs"`
			TopLogprobs      int    `json:"top_logprobs"`
		}
		ChatStream struct {
			Content          string `json:"content"`
			FinishReason     string `json:"finish_reason"`
			CompletionTokens int    `json:"completion_tokens"`
		} `json:"chat_stream"`
		Completion struct {
			Text         string `json:"text"`
			FinishReason string `json:"finish_reason"`
		}
		CompletionStream struct {
			Text string `json:"text"`
		} `json:"completion_stream"`
		Refused *struct {
			Status int    `json:"status"`
			Param  string `json:"param"`
		}
		WrongKey int `json:"wrong_key"`
	}
	runClient(t, python, "openai_client.py", &got, ts.URL+"/v1", "k3y", "stories")
	t.Logf("openai %s", got.Version)
	e := s.cfg.Engine
	msgs := []tokenizer.Message{{Role: "system", Content: "Tell a story."}, {Role: "user", Content: "Once upon a time"}}
	chat, err := e.GenerateText(context.Background(), engine.TextRequest{Messages: msgs, MaxNewTokens: 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	comp, err := e.GenerateText(context.Background(), engine.TextRequest{Prompt: "Once upon a time", MaxNewTokens: 30}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Models) != 1 || got.Models[0] != "stories" {
		t.Errorf("models %v", got.Models)
	}
	if got.Chat.Content != chat.Text || got.Chat.Role != "assistant" || got.Chat.FinishReason != "length" || got.Chat.CompletionTokens != 20 ||
		got.Chat.Logprobs != 20 || got.Chat.TopLogprobs != 2 || got.ChatStream.Content != chat.Text || got.ChatStream.CompletionTokens != 20 {
		t.Errorf("chat %+v / stream %+v, want %q", got.Chat, got.ChatStream, chat.Text)
	}
	if got.CompletionStream.Text != comp.Text {
		t.Errorf("completion stream %q, want %q", got.CompletionStream.Text, comp.Text)
	}
	if want, _, _ := strings.Cut(comp.Text, "Lily"); got.Completion.Text != want || got.Completion.FinishReason != "stop" {
		t.Errorf("completion with stop: %+v, want %q", got.Completion, want)
	}
	if got.Refused == nil || got.Refused.Status != 400 || got.Refused.Param != "typical_p" {
		t.Errorf("typical_p: %+v, want a 400 naming it", got.Refused)
	}
	if got.WrongKey != 401 {
		t.Errorf("wrong key: %d", got.WrongKey)
	}
}

// TestOllamaPythonClient drives the server's Ollama API with the official ollama Python package
// (server/testdata/ollama_client.py): listing and showing the model, chat streamed and not, generate streamed
// and not, and a refused option; every greedy answer is the OpenAI endpoint's.
func TestOllamaPythonClient(t *testing.T) {
	python := pythonWith(t, "ollama")
	_, ts := newTestServer(t, Config{APIKey: "k3y"})
	var got struct {
		Version string   `json:"ollama_version"`
		Models  []string `json:"models"`
		Show    struct {
			Architecture string   `json:"architecture"`
			Capabilities []string `json:"capabilities"`
		}
		Chat struct {
			Content, Role, DoneReason string
			Done                      bool
			EvalCount                 int   `json:"eval_count"`
			PromptEvalCount           int   `json:"prompt_eval_count"`
			TotalDuration             int64 `json:"total_duration"`
		}
		ChatStream struct {
			Content    string
			Done       bool
			DoneReason string `json:"done_reason"`
			EvalCount  int    `json:"eval_count"`
		} `json:"chat_stream"`
		Generate struct {
			Response  string
			EvalCount int `json:"eval_count"`
		}
		GenerateStream struct{ Response string } `json:"generate_stream"`
		Refused        *struct {
			Status int
			Error  string
		}
	}
	runClient(t, python, "ollama_client.py", &got, ts.URL, "k3y", "stories")
	t.Logf("ollama %s", got.Version)
	want := openAIChatAuth(t, ts.URL, "k3y", `{"messages": [{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "Once upon a time"}], "max_tokens": 20, "temperature": 0}`)
	if len(got.Models) != 1 || got.Models[0] != "stories:latest" || got.Show.Architecture != "llama" {
		t.Errorf("models %v, show %+v", got.Models, got.Show)
	}
	if got.Chat.Content != want.text || got.Chat.Role != "assistant" || !got.Chat.Done || got.Chat.EvalCount != want.tokens ||
		got.Chat.PromptEvalCount != want.prompt || got.Chat.TotalDuration <= 0 {
		t.Errorf("chat %+v, want %q (%d tokens)", got.Chat, want.text, want.tokens)
	}
	if got.ChatStream.Content != want.text || !got.ChatStream.Done || got.ChatStream.DoneReason != "length" || got.ChatStream.EvalCount != want.tokens {
		t.Errorf("chat stream %+v, want %q", got.ChatStream, want.text)
	}
	if got.Generate.Response != want.text || got.Generate.EvalCount != want.tokens || got.GenerateStream.Response != want.text {
		t.Errorf("generate %+v / %+v, want %q", got.Generate, got.GenerateStream, want.text)
	}
	if got.Refused == nil || got.Refused.Status != 400 || !strings.Contains(got.Refused.Error, "options.num_ctx") {
		t.Errorf("num_ctx: %+v, want a 400 naming it", got.Refused)
	}
}

// TestAnthropicPythonClient drives /v1/messages with the official anthropic Python package
// (server/testdata/anthropic_client.py): a message, its stream through the package's stream helper and as raw
// events, a stop sequence, a tool call forced by tool_choice any and its tool_result, a tool's schema refused, a wrong key, and the models listed and retrieved; every greedy answer is the OpenAI endpoint's.
func TestAnthropicPythonClient(t *testing.T) {
	python := pythonWith(t, "anthropic")
	_, ts := newTestServer(t, Config{APIKey: "k3y"})
	type message struct {
		Text         string
		Role         string
		StopReason   string `json:"stop_reason"`
		StopSequence string `json:"stop_sequence"`
		OutputTokens int    `json:"output_tokens"`
		InputTokens  int    `json:"input_tokens"`
		Events       []string
	}
	var got struct {
		Version string `json:"anthropic_version"`
		Models  []struct {
			ID, Type    string
			DisplayName string `json:"display_name"`
		}
		Model     string
		Message   message
		Stream    message
		RawStream message `json:"raw_stream"`
		Stop      message
		Refused   *struct {
			Status  int
			Message string
		}
		WrongKey int `json:"wrong_key"`
		ToolUse  struct {
			StopReason string         `json:"stop_reason"`
			Name       string         `json:"name"`
			Input      map[string]any `json:"input"`
		} `json:"tool_use"`
		ToolAnswer struct {
			StopReason string `json:"stop_reason"`
			Text       string `json:"text"`
		} `json:"tool_answer"`
	}
	runClient(t, python, "anthropic_client.py", &got, ts.URL, "k3y", "stories")
	t.Logf("anthropic %s", got.Version)
	if len(got.Models) != 1 || got.Models[0].ID != "stories" || got.Models[0].Type != "model" || got.Model != "stories" {
		t.Errorf("models %+v, model %q", got.Models, got.Model)
	}
	want := openAIChatAuth(t, ts.URL, "k3y", `{"messages": [{"role": "system", "content": "Tell a story."}, {"role": "user", "content": "Once upon a time"}], "max_tokens": 20, "temperature": 0}`)
	if m := got.Message; m.Text != want.text || m.Role != "assistant" || m.StopReason != "max_tokens" || m.OutputTokens != want.tokens || m.InputTokens != want.prompt {
		t.Errorf("message %+v, want %q (%d tokens)", m, want.text, want.tokens)
	}
	events := "message_start content_block_start ping content_block_delta content_block_stop message_delta message_stop"
	if m := got.Stream; m.Text != want.text || m.StopReason != "max_tokens" || m.OutputTokens != want.tokens || !strings.Contains(strings.Join(m.Events, " "), "message_start") {
		t.Errorf("stream %+v, want %q", m, want.text)
	}
	if got.RawStream.Text != want.text {
		t.Errorf("raw stream %q, want %q (events %s)", got.RawStream.Text, want.text, events)
	}
	if before, _, _ := strings.Cut(want.text, "storm"); got.Stop.Text != before || got.Stop.StopReason != "stop_sequence" || got.Stop.StopSequence != "storm" {
		t.Errorf("stop sequence %+v, want %q", got.Stop, before)
	}
	if got.Refused == nil || got.Refused.Status != 400 || !strings.Contains(got.Refused.Message, `the keyword "pattern" is not supported`) {
		t.Errorf("a tool's schema with pattern: %+v", got.Refused)
	}
	if u := got.ToolUse; u.StopReason != "tool_use" || u.Name != "get_weather" || u.Input["city"] == nil {
		t.Errorf("tool_use: %+v", u)
	}
	if a := got.ToolAnswer; a.Text == "" || a.StopReason == "tool_use" {
		t.Errorf("the answer after the tool_result: %+v", a)
	}
	if got.WrongKey != 401 {
		t.Errorf("wrong key: %d", got.WrongKey)
	}
}

// openAIChatAuth is openAIChat with an API key.
func openAIChatAuth(t *testing.T, url, key, body string) greedy {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c completion
	if err := json.NewDecoder(resp.Body).Decode(&c); resp.StatusCode != 200 || err != nil {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	return greedy{text: c.Choices[0].Message.Content, tokens: c.Usage.CompletionTokens, prompt: c.Usage.PromptTokens}
}

// TestCurl drives the server with curl: a streamed chat (-N) and a plain completion.
func TestCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("skipping: curl is not installed")
	}
	s, ts := newTestServer(t, Config{APIKey: "k3y"})
	comp, err := s.cfg.Engine.GenerateText(context.Background(), engine.TextRequest{Prompt: "Once upon a time", MaxNewTokens: 12}, nil)
	if err != nil {
		t.Fatal(err)
	}
	curl := func(args ...string) []byte {
		t.Helper()
		out, err := exec.Command("curl", append([]string{"-sS", "--fail-with-body", "-H", "Authorization: Bearer k3y", "-H", "Content-Type: application/json"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %v: %v\n%s", args, err, out)
		}
		return out
	}
	out := curl(ts.URL+"/v1/completions", "-d", `{"model": "stories", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0}`)
	var c completion
	if err := json.Unmarshal(out, &c); err != nil || c.Choices[0].Text != comp.Text {
		t.Errorf("curl completion: %s (%v), want %q", out, err, comp.Text)
	}
	out = curl("-N", ts.URL+"/v1/chat/completions", "-d", `{"model": "stories", "messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 12, "temperature": 0, "stream": true}`)
	events, done := readStream(t, bytes.NewReader(out))
	text, finish, _ := streamText(events)
	chat, err := s.cfg.Engine.GenerateText(context.Background(), engine.TextRequest{Messages: []tokenizer.Message{{Role: "user", Content: "Once upon a time"}}, MaxNewTokens: 12}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !done || text != chat.Text || finish != "length" {
		t.Errorf("curl stream: done %v, %q (%s), want %q", done, text, finish, chat.Text)
	}
}

// TestOpenAIPythonTools drives tool calls and structured output with the openai Python package
// (testdata/openai_tools_client.py): a call that tool_choice "required" constrains, its result sent back for the
// answer, the call streamed, n choices, and a json_schema response_format parsed by the client.
func TestOpenAIPythonTools(t *testing.T) {
	python := pythonWith(t, "openai")
	_, ts := newTestServer(t, Config{APIKey: "k3y"})
	var got struct {
		Call struct {
			FinishReason string         `json:"finish_reason"`
			Name         string         `json:"name"`
			Arguments    map[string]any `json:"arguments"`
			ID           string         `json:"id"`
			Content      *string        `json:"content"`
		}
		Answer struct {
			Content      string `json:"content"`
			FinishReason string `json:"finish_reason"`
		}
		Stream struct {
			Calls []struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"calls"`
			FinishReason string `json:"finish_reason"`
		}
		N          []int `json:"n"`
		Structured struct {
			Content      string `json:"content"`
			FinishReason string `json:"finish_reason"`
		}
	}
	runClient(t, python, "openai_tools_client.py", &got, ts.URL+"/v1", "k3y", "stories")
	if c := got.Call; c.FinishReason != "tool_calls" || c.Name != "get_weather" || c.Content != nil || c.ID == "" {
		t.Errorf("call: %+v", c)
	}
	if _, ok := got.Call.Arguments["city"].(string); !ok || (got.Call.Arguments["unit"] != "c" && got.Call.Arguments["unit"] != "f") {
		t.Errorf("arguments: %v", got.Call.Arguments)
	}
	if got.Answer.Content == "" || got.Answer.FinishReason == "tool_calls" {
		t.Errorf("answer after the tool's result: %+v", got.Answer)
	}
	var args map[string]any
	if s := got.Stream; s.FinishReason != "tool_calls" || len(s.Calls) != 1 || s.Calls[0].Name != "get_weather" || json.Unmarshal([]byte(s.Calls[0].Arguments), &args) != nil || args["city"] != got.Call.Arguments["city"] {
		t.Errorf("streamed call: %+v, want %+v", got.Stream, got.Call)
	}
	if len(got.N) != 3 || got.N[0] != 0 || got.N[2] != 2 {
		t.Errorf("n 3: indexes %v", got.N)
	}
	var person struct {
		Name *string `json:"name"`
		Age  *int    `json:"age"`
	}
	if got.Structured.FinishReason == "stop" && (json.Unmarshal([]byte(got.Structured.Content), &person) != nil || person.Name == nil || person.Age == nil) {
		t.Errorf("structured: %+v", got.Structured)
	}
}
