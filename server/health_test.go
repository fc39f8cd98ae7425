package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/brokenmodel"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/internal/testutil"
)

func newHealthServer(t *testing.T, model string, strict bool) (*httptest.Server, *testutil.SyncBuffer) {
	t.Helper()
	e, err := engine.Open(context.Background(), model, engine.Options{MaxBatch: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	logs := &testutil.SyncBuffer{}
	s, err := New(Config{Engine: e, ModelID: "broken", Strict: strict, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts, logs
}

func checkHealthError(t *testing.T, what string, e errorJSON, section string) {
	t.Helper()
	if e.Error.Type != "server_error" || e.Error.Code == nil || *e.Error.Code != "health_check_failed" ||
		!strings.Contains(e.Error.Message, sections.Anchor(section)) {
		t.Errorf("%s: error %+v (code %v), want a server_error health_check_failed naming %s", what, e.Error, e.Error.Code, sections.Anchor(section))
	}
}

// A model whose logits are NaN: every request ends with a 500 naming the problem and its TROUBLESHOOTING
// section (strict or not), streamed or not (nothing was sent before the problem: a plain error response).
func TestHealthNaNIs500(t *testing.T) {
	ts, _ := newHealthServer(t, brokenmodel.NaN(t), false)
	for _, stream := range []bool{false, true} {
		code, b := post(t, ts.URL+"/v1/completions", fmt.Sprintf(`{"prompt": "Once upon a time", "max_tokens": 4, "stream": %v}`, stream))
		var e errorJSON
		if err := json.Unmarshal(b, &e); err != nil || code != http.StatusInternalServerError {
			t.Fatalf("stream %v: status %d, body %s; want 500 with an error body", stream, code, b)
		}
		checkHealthError(t, fmt.Sprintf("stream %v", stream), e, sections.NaN)
		if !strings.Contains(e.Error.Message, "NaN") {
			t.Errorf("stream %v: message %q does not name NaN", stream, e.Error.Message)
		}
	}
}

// Each request has its own monitor: without --strict its warnings are logged once per kind with the request's
// id and the request succeeds; /metrics counts them.
func TestHealthWarningsNameTheRequest(t *testing.T) {
	ts, logs := newHealthServer(t, brokenmodel.Echo(t), false)
	ids := map[string]bool{}
	for range 2 {
		code, b := post(t, ts.URL+"/v1/completions", `{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}`)
		var c struct {
			ID string `json:"id"`
		}
		if code != http.StatusOK || json.Unmarshal(b, &c) != nil || c.ID == "" {
			t.Fatalf("status %d, body %s", code, b)
		}
		ids[c.ID] = true
	}
	out := logs.String()
	for id := range ids {
		for _, kind := range []guard.Kind{guard.KindSaturation, guard.KindRepetition} {
			n := 0
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "level=WARN") && strings.Contains(line, " kind="+string(kind)+" ") && strings.Contains(line, " request_id="+id+" ") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("request %s: %d %s warnings naming it, want 1:\n%s", id, n, kind, out)
			}
		}
	}
	_, metrics := get(t, ts.URL+"/metrics")
	for _, kind := range []guard.Kind{guard.KindSaturation, guard.KindRepetition} {
		if want := fmt.Sprintf("layerstream_health_problems_total{kind=%q} 2\n", kind); !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// With Strict, a problem found after tokens were streamed ends the stream with an error event naming it (no
// [DONE]); a request not streamed gets a 500.
func TestHealthStrict(t *testing.T) {
	ts, logs := newHealthServer(t, brokenmodel.Echo(t), true)
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 24, "temperature": 0, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	events, done := readStream(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || done || len(events) < 3 {
		t.Fatalf("status %d, [DONE] %v, %d events; want 200, the first tokens, an error event and no [DONE]", resp.StatusCode, done, len(events))
	}
	text, _, _ := streamText(events[:len(events)-1])
	last := events[len(events)-1]
	if text == "" || last.Error == nil || !strings.Contains(last.Error.Message, sections.Anchor(sections.Saturation)) {
		t.Errorf("text %q, last event %+v; want text, then an error naming %s", text, last, sections.Saturation)
	}

	code, b := post(t, ts.URL+"/v1/completions", `{"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}`)
	var e errorJSON
	if code != http.StatusInternalServerError || json.Unmarshal(b, &e) != nil {
		t.Fatalf("not streamed: status %d, body %s; want 500", code, b)
	}
	checkHealthError(t, "not streamed", e, sections.Saturation)
	if !strings.Contains(logs.String(), "generation stopped by a health check") {
		t.Errorf("the server's log does not say why the request ended:\n%s", logs.String())
	}
}

// With Strict, a problem found mid-stream ends Ollama's stream with an {"error": ...} line and Anthropic's with
// an error event, each naming it; a request not streamed gets a 500 in each API's error shape.
func TestHealthStrictOtherAPIs(t *testing.T) {
	ts, _ := newHealthServer(t, brokenmodel.Echo(t), true)
	anchor := sections.Anchor(sections.Saturation)
	parts, _ := ollamaStream(t, ts.URL+"/api/chat", `{"model": "broken", "messages": [{"role": "user", "content": "Hi"}], "options": {"num_predict": 24, "temperature": 0}}`)
	if last := parts[len(parts)-1]; len(parts) < 2 || parts[0].text() == "" || !strings.Contains(last.Error, anchor) || last.Done {
		t.Errorf("ollama stream: %d parts, last %+v; want text, then an error naming %s", len(parts), last, anchor)
	}
	evs := anthropicStream(t, ts.URL+"/v1/messages", `{"model": "broken", "max_tokens": 24, "temperature": 0, "stream": true, "messages": [{"role": "user", "content": "Hi"}]}`)
	last := evs[len(evs)-1]
	if last.name != "error" || !strings.Contains(fmt.Sprint(last.data["error"]), anchor) || evs[0].name != "message_start" {
		t.Errorf("anthropic stream: last event %+v; want an error naming %s", last, anchor)
	}
	code, b := post(t, ts.URL+"/api/generate", `{"model": "broken", "prompt": "Hi", "stream": false, "options": {"num_predict": 24, "temperature": 0}}`)
	if code != 500 || !strings.Contains(string(b), `{"error":"generation stopped by a health check`) {
		t.Errorf("ollama, not streamed: %d %s", code, b)
	}
	code, b = post(t, ts.URL+"/v1/messages", `{"model": "broken", "max_tokens": 24, "temperature": 0, "messages": [{"role": "user", "content": "Hi"}]}`)
	if code != 500 || !strings.Contains(string(b), `"type":"api_error"`) || !strings.Contains(string(b), anchor) {
		t.Errorf("anthropic, not streamed: %d %s", code, b)
	}
}
