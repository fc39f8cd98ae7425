package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/internal/brokenmodel"
	"github.com/layerstream/layerstream/internal/testutil"
)

// startServe runs serve with o until the test ends, and returns its address and a function that stops it (as
// SIGTERM does) and returns serve's error.
func startServe(t *testing.T, o serveOptions) (url string, stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- runServe(ctx, o, ready) }()
	select {
	case url = <-ready:
	case err := <-done:
		cancel()
		t.Fatal(err)
	}
	stopped := false
	stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			return errors.New("serve did not stop")
		}
	}
	t.Cleanup(func() { stop() })
	return url, stop
}

// TestServe: serve answers on loopback, names the model after its folder, and stops cleanly when its context
// ends (SIGTERM).
func TestServe(t *testing.T) {
	model := testutil.ChatModel(t)
	url, stop := startServe(t, serveOptions{model: model, host: "127.0.0.1", parallel: 4, queue: 4, maxTokens: 64, grace: 5 * time.Second})
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if name := filepath.Base(model); !strings.Contains(string(b), `"id":"`+name+`"`) {
		t.Errorf("/v1/models: %s, want the id %q", b, name)
	}
	resp, err = http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 65}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("max_tokens above --max-tokens: %d", resp.StatusCode)
	}
	if err := stop(); err != nil {
		t.Errorf("serve: %v", err)
	}
}

// TestServeAPIsAndPage: serve answers Ollama's and Anthropic's APIs beside OpenAI's, serves the chat page at /,
// and streams its pipeline (the profiler serve creates) on /api/pipeline.
func TestServeAPIsAndPage(t *testing.T) {
	model := testutil.ChatModel(t)
	name := filepath.Base(model)
	url, _ := startServe(t, serveOptions{model: model, host: "127.0.0.1", parallel: 4, queue: 4, maxTokens: 64, grace: 5 * time.Second})
	for _, c := range []struct{ method, path, body, want string }{
		{"GET", "/", "", "<!doctype html>"},
		{"GET", "/api/tags", "", `:latest"`},
		{"GET", "/api/info", "", `"pipeline":true`},
		{"POST", "/api/chat", `{"model": "` + name + `", "messages": [{"role": "user", "content": "Hi"}], "stream": false, "options": {"num_predict": 3}}`, `"done":true`},
		{"POST", "/v1/messages", `{"model": "` + name + `", "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]}`, `"type":"message"`},
	} {
		req, _ := http.NewRequest(c.method, url+c.path, strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte(c.want)) {
			t.Errorf("%s %s: %d %.300s; want %q", c.method, c.path, resp.StatusCode, b, c.want)
		}
	}
}

// TestServeStrict: --strict reaches the server: a degenerate answer ends with a 500 naming the problem (without
// it, the same request succeeds with warnings).
func TestServeStrict(t *testing.T) {
	model := brokenmodel.Echo(t)
	for _, strict := range []bool{false, true} {
		url, _ := startServe(t, serveOptions{model: model, host: "127.0.0.1", parallel: 4, queue: 4, maxTokens: 64, grace: 5 * time.Second, strict: strict})
		resp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := http.StatusOK
		if strict {
			want = http.StatusInternalServerError
		}
		if resp.StatusCode != want || strict != strings.Contains(string(b), `"code":"health_check_failed"`) {
			t.Errorf("--strict %v: status %d, body %s; want %d", strict, resp.StatusCode, b, want)
		}
	}
}

func TestServeFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve"}, "--model is required"},
		{[]string{"serve", "--model", "m", "--host", "0.0.0.0"}, "give --api-key"},
		{[]string{"serve", "--model", "m", "--parallel", "0"}, "--parallel must be at least 1"},
		{[]string{"serve", "--model", "m", "--max-body", "huge"}, `invalid value "huge" for flag -max-body`},
		{[]string{"serve", "--model", "m", "--prefill-budget", "16"}, "--prefill-budget must be 0 (no bound) or at least 64 tokens, got 16"},
		{[]string{"serve", "--model", "m", "--shutdown-timeout", "-1s"}, "--shutdown-timeout must be at least 0, got -1s"},
		{[]string{"serve", "--model", "m", "--read-timeout", "0s"}, "--read-timeout must be positive, got 0s"},
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}
