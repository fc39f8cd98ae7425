package server

import (
	"encoding/json"
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
// and tool_choice go the OpenAI chat's way (tools.go), tool_use and tool_result blocks becoming its calls and
// tool messages.
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
	r := &request{}
	p := parser{fields: fields}
	for _, name := range []string{"model", "max_tokens"} {
		if !p.has(name) {
			return nil, badField(name, "%s is required", name)
		}
	}
	p.str("model", &r.model)
	msgs := p.anthropicMessages()
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
	p.anthropicTools(r)
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
	refuse := func(j int, typ string) error {
		switch typ {
		case "text":
			return nil
		case "image", "document", "search_result":
			return fmt.Errorf("block %d has type %q: images and documents are not supported (text in, text out)", j, typ)
		case "tool_use", "tool_result":
			return fmt.Errorf("block %d has type %q: tool_use blocks belong in an assistant's message, tool_result blocks in a user's", j, typ)
		case "server_tool_use":
			return fmt.Errorf("block %d has type %q: server tools are not supported", j, typ)
		}
		return fmt.Errorf("block %d has type %q: only text blocks are supported", j, typ)
	}
	return textContent(raw, "block", refuse, func(raw json.RawMessage) (string, bool) {
		var block struct {
			Type         string          `json:"type"`
			Text         string          `json:"text"`
			CacheControl json.RawMessage `json:"cache_control"`
			Citations    json.RawMessage `json:"citations"`
		}
		ok := strictDecode(raw, &block) == nil && (block.Citations == nil || isNull(block.Citations))
		return block.Text, ok
	})
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
		if g.req.toolChoice != "none" && g.req.toolChoice != "" {
			if content, calls := parseCalls(text, g.req.toolNames()); len(calls) > 0 {
				blocks := []any{}
				if content != "" {
					blocks = append(blocks, map[string]string{"type": "text", "text": content})
				}
				m["content"] = append(blocks, toolUseBlocks(calls)...)
				reason = "tool_use"
			}
		}
		m["stop_reason"], m["stop_sequence"] = reason, seq
		m["usage"] = map[string]int{"input_tokens": len(res.PromptIDs), "output_tokens": len(res.GeneratedIDs)}
	}
	return m
}

func (a anthropic) answer(g *generation, res []*engine.TextResult, _ [][]*engine.TextToken) any {
	return a.message(g, res[0].Text, res[0])
}

func (anthropic) events(g *generation) eventWriter {
	e := &anthropicEvents{g: g}
	e.tools = g.req.toolChoice != "none" && g.req.toolChoice != ""
	return e
}

// anthropicEvents writes a stream: message_start (the message without content), content_block_start of the
// one text block, a ping, a content_block_delta (text_delta) per piece of text, content_block_stop,
// message_delta (stop reason and output tokens) and message_stop; or an error event.
// With tools, the text is held back from where a call may begin (as OpenAI's stream holds it): at the end, the
// calls follow the text block as tool_use blocks (their input as one input_json_delta), stop reason tool_use.
type anthropicEvents struct {
	g     *generation
	tools bool
	calls callStream
}

func named(data map[string]any) event { return event{name: data["type"].(string), data: data} }

func (*anthropicEvents) ndjson() bool { return false }

func (e *anthropicEvents) open() []event {
	return []event{
		named(map[string]any{"type": "message_start", "message": anthropic{}.message(e.g, "", nil)}),
		named(map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]string{"type": "text", "text": ""}}),
		named(map[string]any{"type": "ping"}),
	}
}

func (e *anthropicEvents) chunk(_ int, c engine.TextChunk) []event {
	text := c.Text
	if e.tools {
		cs := &e.calls
		cs.text += c.Text
		safe := max(contentSafe(cs.text), cs.sent)
		text, cs.sent = cs.text[cs.sent:safe], safe
	}
	if text == "" {
		return nil
	}
	return []event{textDelta(text)}
}

func textDelta(text string) event {
	return named(map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]string{"type": "text_delta", "text": text}})
}

func (e *anthropicEvents) end(results []*engine.TextResult) []event {
	res := results[0]
	reason, seq := stopReason(res)
	var evs []event
	var calls []toolCall
	if e.tools {
		cs := &e.calls
		content := cs.text
		if c, cl := parseCalls(cs.text, e.g.req.toolNames()); len(cl) > 0 {
			content, calls = c, cl
		}
		if rest, ok := strings.CutPrefix(content, cs.text[:cs.sent]); ok && rest != "" {
			evs = append(evs, textDelta(rest))
		}
	}
	evs = append(evs, named(map[string]any{"type": "content_block_stop", "index": 0}))
	for i, b := range toolUseBlocks(calls) {
		input := b.(map[string]any)["input"]
		start := map[string]any{"type": "tool_use", "id": b.(map[string]any)["id"], "name": b.(map[string]any)["name"], "input": map[string]any{}}
		partial, _ := json.Marshal(input)
		evs = append(evs,
			named(map[string]any{"type": "content_block_start", "index": i + 1, "content_block": start}),
			named(map[string]any{"type": "content_block_delta", "index": i + 1, "delta": map[string]string{"type": "input_json_delta", "partial_json": string(partial)}}),
			named(map[string]any{"type": "content_block_stop", "index": i + 1}))
		reason, seq = "tool_use", nil
	}
	return append(evs,
		named(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
			"usage": map[string]int{"output_tokens": len(res.GeneratedIDs)}}),
		named(map[string]any{"type": "message_stop"}),
	)
}

func (e *anthropicEvents) fail(err *requestError) []event {
	return []event{{name: "error", data: anthropic{}.errorBody(err)}}
}

// toolUseBlocks are calls as Anthropic's tool_use blocks: {"type": "tool_use", "id", "name", "input"}, the
// input an object.
func toolUseBlocks(calls []toolCall) []any {
	out := make([]any, len(calls))
	for i, c := range calls {
		var input any = map[string]any{}
		if json.Unmarshal([]byte(c.arguments), &input) != nil {
			input = map[string]any{}
		}
		if _, ok := input.(map[string]any); !ok {
			input = map[string]any{"value": input}
		}
		out[i] = map[string]any{"type": "tool_use", "id": "toolu_" + c.id, "name": c.name, "input": input}
	}
	return out
}

// anthropicTools reads tools ([{"name", "description", "input_schema"}], a block's cache_control changing
// nothing) and tool_choice ({"type": "auto" | "any" | "tool" (with "name") | "none"}, and
// disable_parallel_tool_use) into the OpenAI chat's tools and tool choice.
func (p *parser) anthropicTools(r *request) {
	raw, ok := p.fields["tools"]
	if ok && p.err == nil {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			p.err = badField("tools", "tools: want an array of {\"name\", \"description\", \"input_schema\"}: %s", jsonError(err))
			return
		}
		var openAI []any
		for i, item := range items {
			var t struct {
				Type         string          `json:"type"`
				Name         string          `json:"name"`
				Description  string          `json:"description"`
				InputSchema  json.RawMessage `json:"input_schema"`
				CacheControl json.RawMessage `json:"cache_control"`
			}
			if err := strictDecode(item, &t); err != nil || t.Type != "" && t.Type != "custom" {
				p.err = badField(fmt.Sprintf("tools[%d]", i), "tools[%d]: want {\"name\", \"description\", \"input_schema\"} (server tools are not supported), got %s", i, excerpt(item))
				return
			}
			fn := map[string]any{"name": t.Name, "description": t.Description}
			if t.InputSchema != nil {
				fn["parameters"] = t.InputSchema
			}
			openAI = append(openAI, map[string]any{"type": "function", "function": fn})
		}
		b, _ := json.Marshal(openAI)
		p.fields["tools"] = b
	}
	if raw, ok := p.fields["tool_choice"]; ok && p.err == nil {
		var c struct {
			Type                   string `json:"type"`
			Name                   string `json:"name"`
			DisableParallelToolUse *bool  `json:"disable_parallel_tool_use"`
		}
		if err := strictDecode(raw, &c); err != nil {
			p.err = badField("tool_choice", "tool_choice: want {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}, got %s", excerpt(raw))
			return
		}
		var choice any
		switch c.Type {
		case "auto", "none":
			choice = c.Type
		case "any":
			choice = "required"
		case "tool":
			choice = map[string]any{"type": "function", "function": map[string]any{"name": c.Name}}
		default:
			p.err = badField("tool_choice", "tool_choice: type %q is not one of auto, any, tool, none", c.Type)
			return
		}
		b, _ := json.Marshal(choice)
		p.fields["tool_choice"] = b
	}
	p.tools(r)
	p.toolChoice(r)
}

// anthropicMessages reads the messages: roles user and assistant, content a string or blocks: text, an
// assistant's tool_use blocks (its calls) and a user's tool_result blocks (each a tool message, before the
// user's text).
func (p *parser) anthropicMessages() []tokenizer.Message {
	items := p.messageItems()
	if items == nil {
		return nil
	}
	var msgs []tokenizer.Message
	for i, m := range items {
		at := fmt.Sprintf("messages[%d]", i)
		var blocks []map[string]json.RawMessage
		if json.Unmarshal(m["content"], &blocks) == nil && slicesContainsToolBlock(blocks) {
			var role string
			json.Unmarshal(m["role"], &role)
			ms, err := toolBlocks(at, role, blocks)
			if err != nil {
				p.err = err
				return nil
			}
			msgs = append(msgs, ms...)
			continue
		}
		msg, err := anthropicMessages.message(at, m)
		if err != nil {
			p.err = err
			return nil
		}
		msgs = append(msgs, msg)
	}
	return msgs
}

func slicesContainsToolBlock(blocks []map[string]json.RawMessage) bool {
	for _, b := range blocks {
		var t string
		json.Unmarshal(b["type"], &t)
		if t == "tool_use" || t == "tool_result" {
			return true
		}
	}
	return false
}

// toolBlocks reads a message holding tool blocks: an assistant's text and tool_use blocks, or a user's
// tool_result blocks (and text).
func toolBlocks(at, role string, blocks []map[string]json.RawMessage) ([]tokenizer.Message, error) {
	var text strings.Builder
	var calls []tokenizer.ToolCall
	var results []tokenizer.Message
	for j, b := range blocks {
		bat := fmt.Sprintf("%s.content[%d]", at, j)
		raw, _ := json.Marshal(b)
		var t string
		json.Unmarshal(b["type"], &t)
		switch {
		case t == "text":
			s, err := anthropicContent(json.RawMessage("[" + string(raw) + "]"))
			if err != nil {
				return nil, badField(bat, "%s: %v", bat, err)
			}
			text.WriteString(s)
		case t == "tool_use" && role == "assistant":
			var u struct {
				Type         string          `json:"type"`
				ID           string          `json:"id"`
				Name         string          `json:"name"`
				Input        any             `json:"input"`
				CacheControl json.RawMessage `json:"cache_control"`
			}
			if err := strictDecode(raw, &u); err != nil {
				return nil, badField(bat, "%s: want {\"type\": \"tool_use\", \"id\", \"name\", \"input\"}: %s", bat, jsonError(err))
			}
			calls = append(calls, tokenizer.ToolCall{ID: u.ID, Name: u.Name, Arguments: u.Input})
		case t == "tool_result" && role == "user":
			var r struct {
				Type         string          `json:"type"`
				ToolUseID    string          `json:"tool_use_id"`
				Content      json.RawMessage `json:"content"`
				IsError      bool            `json:"is_error"`
				CacheControl json.RawMessage `json:"cache_control"`
			}
			if err := strictDecode(raw, &r); err != nil || r.ToolUseID == "" {
				return nil, badField(bat, "%s: want {\"type\": \"tool_result\", \"tool_use_id\", \"content\"}, got %s", bat, excerpt(raw))
			}
			content := ""
			if r.Content != nil && !isNull(r.Content) {
				s, err := anthropicContent(r.Content)
				if err != nil {
					return nil, badField(bat+".content", "%s.content: %v", bat, err)
				}
				content = s
			}
			if r.IsError {
				content = "Error: " + content
			}
			results = append(results, tokenizer.Message{Role: "tool", ToolCallID: r.ToolUseID, Content: content})
		default:
			return nil, badField(bat, "%s: a %s block in a message of role %q: tool_use blocks belong in an assistant's message, tool_result blocks in a user's, besides text", bat, t, role)
		}
	}
	if role == "assistant" {
		return []tokenizer.Message{{Role: "assistant", Content: text.String(), ToolCalls: calls}}, nil
	}
	if text.Len() > 0 {
		results = append(results, tokenizer.Message{Role: "user", Content: text.String()})
	}
	return results, nil
}
