package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/tokenizer"
)

// anthropic is Anthropic's Messages API: /v1/messages, answered in one Message or streamed as server-sent
// events named by type (message_start, content_block_start, ping, content_block_delta, content_block_stop,
// message_delta, message_stop; error).
type anthropic struct{}

// Anthropic's request fields (see request.go for the policy): metadata and service_tier change nothing; tools
// and tool_choice are refused as not supported yet, like every field not listed.
var fieldsAnthropic = []string{"model", "messages", "max_tokens", "system", "stop_sequences", "stream", "temperature",
	"top_k", "top_p", "metadata", "service_tier", "tools", "tool_choice"}

// anthropicMessages: roles user and assistant (the system prompt is a field of its own), content a string or
// text blocks.
var anthropicMessages = messagePolicy{
	roles:   map[string]string{"user": "user", "assistant": "assistant"},
	content: anthropicContent,
	other:   "a message holds only role and content",
}

func (anthropic) parse(body []byte, maxTokens int) (*request, error) {
	fields, err := parseFields(body, "", fieldsAnthropic)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"tools", "tool_choice"} {
		if _, ok := fields[name]; ok {
			return nil, badField(name, "%s: tool use is not supported yet", name)
		}
	}
	r := &request{}
	p := parser{fields: fields}
	for _, name := range []string{"model", "max_tokens"} {
		if !p.has(name) {
			return nil, badField(name, "%s is required", name)
		}
	}
	p.str("model", &r.model)
	msgs := p.messages(anthropicMessages)
	if n := len(msgs); p.err == nil && msgs[n-1].Role == "assistant" {
		p.err = badField(fmt.Sprintf("messages[%d].role", n-1), "a final assistant message (continuing the model's answer) is not supported yet: end with a user message")
	}
	if p.has("system") && p.err == nil {
		system, err := anthropicContent(fields["system"])
		if err != nil {
			return nil, badField("system", "system: %v", err)
		}
		msgs = append([]tokenizer.Message{{Role: "system", Content: system}}, msgs...)
	}
	r.messages = msgs
	p.intRange("max_tokens", &r.maxTokens, 1, maxTokens)
	r.stop = p.stops("stop_sequences")
	p.boolean("stream", &r.stream)
	p.sampling(r, 1) // Anthropic's temperature goes to 1
	var tier string
	p.str("service_tier", &tier)
	p.only("metadata", "an object", func(raw json.RawMessage) bool {
		var m map[string]any
		return json.Unmarshal(raw, &m) == nil
	})
	if p.err != nil {
		return nil, p.err
	}
	return r, nil
}

// anthropicContent reads a message's content or the system prompt: a string, or text blocks (joined; a
// block's cache_control changes nothing). Other blocks are refused by type.
func anthropicContent(raw json.RawMessage) (string, error) {
	if raw == nil || isNull(raw) {
		return "", errors.New("required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []json.RawMessage
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", fmt.Errorf("want a string or an array of {\"type\": \"text\", \"text\": ...} blocks, got %s", excerpt(raw))
	}
	var b strings.Builder
	for j, raw := range blocks {
		var block struct {
			Type         string          `json:"type"`
			Text         string          `json:"text"`
			CacheControl json.RawMessage `json:"cache_control"`
			Citations    json.RawMessage `json:"citations"`
		}
		json.Unmarshal(raw, &block)
		switch block.Type {
		case "text":
		case "image", "document", "search_result":
			return "", fmt.Errorf("block %d has type %q: images and documents are not supported (text in, text out)", j, block.Type)
		case "tool_use", "tool_result", "server_tool_use":
			return "", fmt.Errorf("block %d has type %q: tool use is not supported yet", j, block.Type)
		default:
			return "", fmt.Errorf("block %d has type %q: only text blocks are supported", j, block.Type)
		}
		if err := strictDecode(raw, &block); err != nil || (block.Citations != nil && !isNull(block.Citations)) {
			return "", fmt.Errorf("block %d: want {\"type\": \"text\", \"text\": ...}, got %s", j, excerpt(raw))
		}
		b.WriteString(block.Text)
	}
	return b.String(), nil
}

func (anthropic) idPrefix() string { return "msg_" }

// errorBody is Anthropic's error: {"type": "error", "error": {"type": ..., "message": ...}}.
func (anthropic) errorBody(e *requestError) any {
	kind := "api_error"
	switch e.status {
	case http.StatusBadRequest:
		kind = "invalid_request_error"
	case http.StatusUnauthorized:
		kind = "authentication_error"
	case http.StatusNotFound:
		kind = "not_found_error"
	case http.StatusMethodNotAllowed, http.StatusRequestTimeout, http.StatusUnsupportedMediaType, http.StatusMisdirectedRequest:
		kind = "invalid_request_error"
	case http.StatusForbidden:
		kind = "permission_error"
	case http.StatusRequestEntityTooLarge:
		kind = "request_too_large"
	case http.StatusTooManyRequests:
		kind = "rate_limit_error"
	case http.StatusServiceUnavailable:
		kind = "overloaded_error"
	}
	return map[string]any{"type": "error", "error": map[string]string{"type": kind, "message": e.msg}}
}

// stopReason is Anthropic's name for a stop reason, and the stop sequence met, if one was.
func stopReason(res *engine.TextResult) (reason string, sequence *string) {
	switch {
	case res.StopReason == engine.StopString:
		return "stop_sequence", &res.Stop
	case finishReason(res.StopReason) == "length":
		return "max_tokens", nil
	}
	return "end_turn", nil
}

// message is a Message: content the text block so far (complete when res is not nil).
func (anthropic) message(g *generation, text string, res *engine.TextResult) map[string]any {
	m := map[string]any{"id": g.id, "type": "message", "role": "assistant", "model": g.req.model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
		"usage": map[string]int{"input_tokens": len(g.text.PromptIDs), "output_tokens": 0}}
	if res != nil {
		reason, seq := stopReason(res)
		m["content"] = []any{map[string]string{"type": "text", "text": text}}
		m["stop_reason"], m["stop_sequence"] = reason, seq
		m["usage"] = map[string]int{"input_tokens": len(res.PromptIDs), "output_tokens": len(res.GeneratedIDs)}
	}
	return m
}

func (a anthropic) answer(g *generation, res []*engine.TextResult, _ [][]*engine.TextToken) any {
	return a.message(g, res[0].Text, res[0])
}

func (anthropic) events(g *generation) eventWriter { return anthropicEvents{g: g} }

// anthropicEvents writes a stream: message_start (the message without content), content_block_start of the
// one text block, a ping, a content_block_delta (text_delta) per piece of text, content_block_stop,
// message_delta (stop reason and output tokens) and message_stop; or an error event.
type anthropicEvents struct{ g *generation }

func named(data map[string]any) event { return event{name: data["type"].(string), data: data} }

func (anthropicEvents) ndjson() bool { return false }

func (e anthropicEvents) open() []event {
	return []event{
		named(map[string]any{"type": "message_start", "message": anthropic{}.message(e.g, "", nil)}),
		named(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]string{"type": "text", "text": ""}}),
		named(map[string]any{"type": "ping"}),
	}
}

func (e anthropicEvents) chunk(_ int, c engine.TextChunk) []event {
	if c.Text == "" {
		return nil
	}
	return []event{named(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]string{"type": "text_delta", "text": c.Text}})}
}

func (e anthropicEvents) end(results []*engine.TextResult) []event {
	res := results[0]
	reason, seq := stopReason(res)
	return []event{
		named(map[string]any{"type": "content_block_stop", "index": 0}),
		named(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
			"usage": map[string]int{"output_tokens": len(res.GeneratedIDs)}}),
		named(map[string]any{"type": "message_stop"}),
	}
}

func (e anthropicEvents) fail(err *requestError) []event {
	return []event{{name: "error", data: anthropic{}.errorBody(err)}}
}
