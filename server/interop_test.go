package server

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/tokenizer"
)

// TestOpenAIPythonClient drives the server with the official openai Python package (server/testdata/
// openai_client.py): listing models, chat and completions, streamed and not, logprobs, a refused field and a
// wrong API key. It skips, saying why, without Python or the package; $LAYERSTREAM_OPENAI_PYTHON names the
// interpreter to use (e.g. a virtual environment's: python3 -m venv DIR && DIR/bin/pip install openai; scripts/test.sh
// makes one, scripts/test-deps.sh).
func TestOpenAIPythonClient(t *testing.T) {
	python := os.Getenv("LAYERSTREAM_OPENAI_PYTHON")
	if python == "" {
		python = "python3"
	}
	if _, err := exec.LookPath(python); err != nil {
		t.Skipf("skipping: no Python interpreter %q (set LAYERSTREAM_OPENAI_PYTHON)", python)
	}
	if out, err := exec.Command(python, "-c", "import openai").CombinedOutput(); err != nil {
		t.Skipf("skipping: %s cannot import the openai package (pip install openai, or set LAYERSTREAM_OPENAI_PYTHON to a venv's python; scripts/test.sh installs it from PyPI into .cache/test-python, so PyPI was unreachable): %s", python, bytes.TrimSpace(out))
	}
	s, ts := newTestServer(t, Config{APIKey: "k3y"})
	cmd := exec.Command(python, filepath.Join("testdata", "openai_client.py"), ts.URL+"/v1", "k3y", "stories")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("openai client: %v\n%s", err, stderr.String())
	}
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
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
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
	if got.Refused == nil || got.Refused.Status != 400 || got.Refused.Param != "min_p" {
		t.Errorf("min_p: %+v, want a 400 naming it", got.Refused)
	}
	if got.WrongKey != 401 {
		t.Errorf("wrong key: %d", got.WrongKey)
	}
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
