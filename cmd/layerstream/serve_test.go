package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/internal/testutil"
)

// TestServe: serve answers on loopback, names the model after its folder, and stops cleanly when its context
// ends (SIGTERM).
func TestServe(t *testing.T) {
	model := testutil.ChatModel(t)
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	o := serveOptions{model: model, host: "127.0.0.1", parallel: 4, queue: 4, maxTokens: 64, grace: 5 * time.Second}
	go func() { done <- runServe(ctx, o, ready) }()
	var url string
	select {
	case url = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
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
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop")
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
	} {
		var out, errb bytes.Buffer
		if code := run(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
}
