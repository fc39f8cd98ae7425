package server

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/layerstream/layerstream/grammar"
	"github.com/layerstream/layerstream/tokenizer"
)

// Tool calls (OpenAI's chat API): the tools are rendered into the prompt by the model's chat template (its
// "tools" variable, as transformers passes them), and the model's answer is read back for calls in the formats
// of the families served: Hermes/Qwen's <tool_call>{json}</tool_call>, Mistral's [TOOL_CALLS][{...}] (its
// marker a special token, left out of the text), Llama 3.x's bare {"name": ..., "parameters": ...}, and a
// fenced ```json block holding the call (what Qwen2.5-Coder writes). tool_choice "required", or a named
// function, constrains the answer to a call object ({"name", "arguments"}) with the grammar package.

// maxTools bounds a request's tools.
const maxTools = 128

// tool is a function offered to the model.
type tool struct {
	name       string
	parameters json.RawMessage // a JSON schema; nil when not given
}

// toolCall is a call read from the model's answer.
type toolCall struct {
	id        string
	name      string
	arguments string // JSON text
}

// tools reads OpenAI's tools: [{"type": "function", "function": {"name", "description", "parameters",
// "strict"}}]; the template variable is the array as given.
func (p *parser) tools(r *request) {
	raw, ok := p.fields["tools"]
	if !ok || p.err != nil {
		return
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		p.err = badField("tools", "tools: want an array of {\"type\": \"function\", \"function\": {...}}: %s", jsonError(err))
		return
	}
	if len(items) > maxTools {
		p.err = badField("tools", "tools: at most %d tools, got %d", maxTools, len(items))
		return
	}
	for i, item := range items {
		at := fmt.Sprintf("tools[%d]", i)
		var t struct {
			Type     string `json:"type"`
			Function *struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				Parameters  json.RawMessage `json:"parameters"`
				Strict      *bool           `json:"strict"`
			} `json:"function"`
		}
		if err := strictDecode(item, &t); err != nil {
			p.err = badField(at, "%s: want {\"type\": \"function\", \"function\": {\"name\", \"description\", \"parameters\"}}: %s", at, jsonError(err))
			return
		}
		if t.Type != "function" || t.Function == nil {
			p.err = badField(at+".type", "%s: only tools of type \"function\", with a function, are supported", at)
			return
		}
		name := t.Function.Name
		if name == "" || len(name) > 64 || strings.ContainsAny(name, " \"\\<>") {
			p.err = badField(at+".function.name", "%s.function.name: want a name of 1 to 64 characters (no spaces, quotes or angle brackets), got %q", at, name)
			return
		}
		if slices.ContainsFunc(r.tools, func(x tool) bool { return x.name == name }) {
			p.err = badField(at+".function.name", "%s.function.name: %q is offered twice", at, name)
			return
		}
		params := t.Function.Parameters
		if isNull(params) {
			params = nil
		}
		r.tools = append(r.tools, tool{name: name, parameters: params})
	}
	var v []any
	json.Unmarshal(raw, &v)
	r.toolsVar = v
}

// toolChoice reads tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name"}}; it
// comes after tools, which it needs (but "none").
func (p *parser) toolChoice(r *request) {
	r.toolChoice = "auto"
	raw, ok := p.fields["tool_choice"]
	if p.err != nil {
		return
	}
	if !ok {
		if len(r.tools) == 0 {
			r.toolChoice = "none"
		}
		return
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "none", "auto", "required":
			r.toolChoice = s
		default:
			p.err = badField("tool_choice", "tool_choice: want \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, got %q", s)
			return
		}
	} else {
		var c struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		if err := strictDecode(raw, &c); err != nil || c.Type != "function" {
			p.err = badField("tool_choice", "tool_choice: want \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, got %s", excerpt(raw))
			return
		}
		if !slices.ContainsFunc(r.tools, func(t tool) bool { return t.name == c.Function.Name }) {
			p.err = badField("tool_choice.function.name", "tool_choice.function.name %q is none of the tools", c.Function.Name)
			return
		}
		r.toolChoice, r.toolName = "function", c.Function.Name
	}
	switch {
	case r.toolChoice == "none":
	case len(r.tools) == 0:
		p.err = badField("tool_choice", "tool_choice %s needs tools", excerpt(raw))
	case r.toolChoice == "required" || r.toolChoice == "function":
		if r.schema != nil {
			p.err = badField("tool_choice", "tool_choice %s constrains the answer to a tool call: not with response_format %s", excerpt(raw), excerpt(p.fields["response_format"]))
			return
		}
		r.schema = p.callSchema(r)
	}
}

// callSchema is the grammar of a call when the answer must be one: {"name": NAME, "arguments": ARGS}, NAME
// one of the tools (the one named), ARGS a value of that tool's parameters (any object when it has none).
func (p *parser) callSchema(r *request) *grammar.Schema {
	var names []string
	var args []*grammar.Schema
	for i, t := range r.tools {
		if r.toolChoice == "function" && t.name != r.toolName {
			continue
		}
		var a *grammar.Schema
		if t.parameters != nil {
			if a = p.schema(fmt.Sprintf("tools[%d].function.parameters", i), t.parameters); p.err != nil {
				return nil
			}
		}
		names, args = append(names, t.name), append(args, a)
	}
	s, err := grammar.Call(names, args)
	if err != nil {
		p.err = badField("tools", "tools: %v", err)
	}
	return s
}

// toolNames are the names of the tools a call may name.
func (r *request) toolNames() []string {
	var names []string
	for _, t := range r.tools {
		names = append(names, t.name)
	}
	return names
}

// parseCalls reads the tool calls of an answer: the content before them and the calls, or the whole text and
// no call when it holds none naming an offered tool.
func parseCalls(text string, names []string) (content string, calls []toolCall) {
	if i := strings.Index(text, "<tool_call>"); i >= 0 {
		rest := text[i:]
		for {
			body, ok := strings.CutPrefix(strings.TrimLeft(rest, " \n\r\t"), "<tool_call>")
			if !ok {
				break
			}
			end := strings.Index(body, "</tool_call>")
			if end < 0 {
				end = len(body)
			}
			cs, ok := callsIn(body[:end], names)
			if !ok {
				return text, nil
			}
			calls = append(calls, cs...)
			rest = body[min(end+len("</tool_call>"), len(body)):]
		}
		if len(calls) == 0 || strings.TrimSpace(rest) != "" {
			return text, nil
		}
		return strings.TrimSpace(text[:i]), calls
	}
	trimmed := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), "[TOOL_CALLS]"))
	if strings.HasPrefix(trimmed, "{") || strings.HasPrefix(trimmed, "[") {
		if cs, ok := callsIn(trimmed, names); ok {
			return "", cs
		}
		return text, nil
	}
	if i := strings.Index(text, "```"); i >= 0 {
		body := text[i+3:]
		body = strings.TrimPrefix(body, "json")
		end := strings.Index(body, "```")
		if end < 0 {
			end = len(body)
		}
		if cs, ok := callsIn(body[:end], names); ok {
			return strings.TrimSpace(text[:i]), cs
		}
	}
	return text, nil
}

// callsIn reads one call object, or an array of them, each naming an offered tool: {"name", "arguments"} or
// {"name", "parameters"} (Llama 3.x), the arguments an object or a JSON text.
func callsIn(s string, names []string) ([]toolCall, bool) {
	s = strings.TrimSpace(s)
	var objs []json.RawMessage
	if strings.HasPrefix(s, "[") {
		if json.Unmarshal([]byte(s), &objs) != nil || len(objs) == 0 {
			return nil, false
		}
	} else {
		objs = []json.RawMessage{json.RawMessage(s)}
	}
	var calls []toolCall
	for _, o := range objs {
		var c struct {
			Name       string          `json:"name"`
			Arguments  json.RawMessage `json:"arguments"`
			Parameters json.RawMessage `json:"parameters"`
		}
		if json.Unmarshal(o, &c) != nil || !slices.Contains(names, c.Name) {
			return nil, false
		}
		args := c.Arguments
		if args == nil {
			args = c.Parameters
		}
		var text string
		switch {
		case args == nil || isNull(args):
			text = "{}"
		case json.Unmarshal(args, &text) == nil: // a JSON text in a string, as OpenAI's API writes it
		default:
			text = string(compact(args))
		}
		calls = append(calls, toolCall{id: newCallID(), name: c.Name, arguments: text})
	}
	return calls, true
}

// newCallID is a call's id: nine letters and digits (Mistral's templates require that shape).
func newCallID() string {
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	var b [9]byte
	rand.Read(b[:])
	for i := range b {
		b[i] = chars[int(b[i])%len(chars)]
	}
	return string(b[:])
}

// callsJSON are calls as OpenAI's message.tool_calls (index: as a streamed delta's).
func callsJSON(calls []toolCall, index bool) []any {
	out := make([]any, len(calls))
	for i, c := range calls {
		m := map[string]any{"id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": c.arguments}}
		if index {
			m["index"] = i
		}
		out[i] = m
	}
	return out
}

// callMarkers begin a tool call in an answer; a stream holds the text back from the first one.
var callMarkers = []string{"<tool_call>", "[TOOL_CALLS]", "```"}

// contentSafe is how much of a streamed answer can go out as content while tools may be called: the text
// before anything that may begin a call (a marker, or a JSON object or array opening the answer), and not
// the start of a marker at its end.
func contentSafe(text string) int {
	trimmed := strings.TrimLeft(text, " \t\r\n")
	if trimmed == "" || trimmed[0] == '{' || trimmed[0] == '[' {
		return 0
	}
	cut := len(text)
	for _, m := range callMarkers {
		if i := strings.Index(text, m); i >= 0 && i < cut {
			cut = i
		}
		for k := min(len(m)-1, len(text)); k > 0; k-- {
			if strings.HasSuffix(text, m[:k]) {
				cut = min(cut, len(text)-k)
				break
			}
		}
	}
	return cut
}

// toolMessage reads the tool parts of a chat message: an assistant's tool_calls, a tool message's
// tool_call_id (and name).
func toolMessage(at string, msg *tokenizer.Message, m map[string]json.RawMessage) error {
	if raw, ok := m["tool_calls"]; ok && !isNull(raw) {
		if msg.Role != "assistant" {
			return badField(at+".tool_calls", "%s.tool_calls: only an assistant's message holds tool calls", at)
		}
		var calls []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		}
		if err := strictDecode(raw, &calls); err != nil {
			return badField(at+".tool_calls", "%s.tool_calls: want [{\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}]: %s", at, jsonError(err))
		}
		for _, c := range calls {
			var args any = c.Function.Arguments
			d := json.NewDecoder(bytes.NewReader([]byte(c.Function.Arguments)))
			var v any
			if d.Decode(&v) == nil && !d.More() {
				args = v // templates write the arguments with tojson: an object, as transformers passes them
			}
			msg.ToolCalls = append(msg.ToolCalls, tokenizer.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args})
		}
	}
	for _, k := range []string{"tool_call_id", "name"} {
		raw, ok := m[k]
		if !ok || isNull(raw) {
			continue
		}
		if msg.Role != "tool" {
			return badField(at+"."+k, "%s.%s is only supported in a tool's message", at, k)
		}
		var s string
		if err := strictDecode(raw, &s); err != nil {
			return badField(at+"."+k, "%s.%s: want a string", at, k)
		}
		if k == "name" {
			msg.Name = s
		} else {
			msg.ToolCallID = s
		}
	}
	if msg.Role == "tool" && msg.ToolCallID == "" {
		return badField(at+".tool_call_id", "%s.tool_call_id is required in a tool's message", at)
	}
	return nil
}
