package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/grammar"
)

const testSchema = `{"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "pet": {"enum": ["cat", "dog", null]}}, "required": ["name", "age"], "additionalProperties": false}`

// TestResponseFormat: with response_format json_schema or json_object (and Ollama's format), every answer that
// ends by itself is a JSON value of the schema, streamed or not.
func TestResponseFormat(t *testing.T) {
	_, ts := newTestServer(t, Config{MaxTokens: 200})
	schema := grammar.MustCompile(testSchema)
	msgs := `"messages": [{"role": "user", "content": "Tell me about Lily."}]`
	ended := 0
	for seed := range 4 {
		for _, stream := range []bool{false, true} {
			for _, format := range []string{`{"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": ` + testSchema + `}}`, `{"type": "json_object"}`} {
				body := fmt.Sprintf(`{%s, "max_tokens": 150, "temperature": 0.9, "seed": %d, "stream": %v, "response_format": %s}`, msgs, seed, stream, format)
				var text, finish string
				if stream {
					resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
					if err != nil {
						t.Fatal(err)
					}
					events, done := readStream(t, resp.Body)
					resp.Body.Close()
					if !done {
						t.Fatalf("%s: no [DONE]", body)
					}
					text, finish, _ = streamText(events)
				} else {
					code, b := post(t, ts.URL+"/v1/chat/completions", body)
					var c completion
					if code != 200 || json.Unmarshal(b, &c) != nil {
						t.Fatalf("%s: %d %s", body, code, b)
					}
					text, finish = c.Choices[0].Message.Content, *c.Choices[0].FinishReason
				}
				if finish != "stop" {
					continue // cut by max_tokens
				}
				ended++
				var v map[string]any
				if err := json.Unmarshal([]byte(text), &v); err != nil {
					t.Errorf("%s: %q is not a JSON object", body, text)
				}
				if strings.Contains(format, "json_schema") && !schema.Match(text) {
					t.Errorf("%s: %q is not a value of the schema", body, text)
				}
			}
		}
	}
	if ended == 0 {
		t.Error("no answer ended by itself")
	}
	// n choices: each its own constrained sequence.
	code, b := post(t, ts.URL+"/v1/chat/completions", `{`+msgs+`, "max_tokens": 150, "temperature": 1, "seed": 1, "n": 4, "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": `+testSchema+`}}}`)
	var c completion
	if code != 200 || json.Unmarshal(b, &c) != nil || len(c.Choices) != 4 {
		t.Fatalf("n 4: %d %s", code, b)
	}
	for i, ch := range c.Choices {
		if text := ch.Message.Content; *ch.FinishReason == "stop" && !schema.Match(text) || !schema.Prefix(text) {
			t.Errorf("n 4, choice %d: %q", i, text)
		}
	}
	code, b = post(t, ts.URL+"/api/chat", `{"model": "stories", `+msgs+`, "stream": false, "format": "json", "options": {"temperature": 0, "num_predict": 100}}`)
	var o struct {
		Message    struct{ Content string } `json:"message"`
		DoneReason string                   `json:"done_reason"`
	}
	if code != 200 || json.Unmarshal(b, &o) != nil || o.DoneReason == "stop" && !json.Valid([]byte(o.Message.Content)) {
		t.Errorf("/api/chat format json: %d %s", code, b)
	}
	code, b = post(t, ts.URL+"/api/generate", `{"model": "stories", "prompt": "Lily", "stream": false, "format": `+testSchema+`, "options": {"temperature": 0, "num_predict": 100}}`)
	var g struct {
		Response   string `json:"response"`
		DoneReason string `json:"done_reason"`
	}
	if code != 200 || json.Unmarshal(b, &g) != nil || g.DoneReason == "stop" && !schema.Match(g.Response) {
		t.Errorf("/api/generate format schema: %d %s", code, b)
	}
}
