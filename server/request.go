package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/grammar"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/tokenizer"
)

// request is a parsed generation request of any dialect (OpenAI's /v1/chat/completions and /v1/completions,
// Ollama's /api/chat and /api/generate, Anthropic's /v1/messages): everything the server acts on.
type request struct {
	chat     bool // OpenAI's chat endpoint
	model    string
	messages []tokenizer.Message // chat
	prompt   string              // completions: text...
	ids      []int               // ...or token ids

	maxTokens     int // 0: not given
	defaultTokens int // the dialect's default of maxTokens; 0: to the context's end, bounded by Config.MaxTokens
	temperature   *float64
	topP          *float64
	topK          *int
	repetition    *float64
	presence      *float64
	frequency     *float64
	minP          *float64
	logitBias     map[int]float64
	seed          *uint64
	stop          []string
	logprobs      bool
	topLogprobs   int
	stream        bool
	usage         bool // stream_options.include_usage
	raw           bool // Ollama's generate: the prompt as it is, not rendered with the chat template
	// schema constrains the output to JSON values (response_format, Ollama's format); nil: free text.
	schema *grammar.Schema
	// n is the choices asked for (OpenAI's n; 0: one).
	n int
	// tools offered (OpenAI's chat), toolsVar as the chat template gets them, toolChoice "none", "auto",
	// "required" or "function" (toolName).
	tools      []tool
	toolsVar   []any
	toolChoice string
	toolName   string
	// maxTokensField names the field giving maxTokens in the dialect's request, for errors about it ("":
	// "max_tokens").
	maxTokensField string
}

// param is the request field an engine refusal's Field (engine.RequestError) is about; "" when none.
func (r *request) param(field string) string {
	switch field {
	case engine.FieldPrompt:
		return r.promptField()
	case engine.FieldMaxNewTokens:
		if r.maxTokensField != "" {
			return r.maxTokensField
		}
		return "max_tokens"
	case engine.FieldTopLogprobs, engine.FieldStop, engine.FieldLogitBias:
		return field
	}
	return ""
}

// promptField names the field holding the prompt, for errors about it.
func (r *request) promptField() string {
	if r.messages != nil && !r.raw {
		return "messages"
	}
	return "prompt"
}

// requestError is a refused request: the HTTP status, the message and the field it names (OpenAI's "param").
type requestError struct {
	status int
	param  string
	msg    string
	code   string
}

func (e *requestError) Error() string { return e.msg }

func badField(param, format string, args ...any) *requestError {
	return &requestError{status: 400, param: param, msg: fmt.Sprintf(format, args...)}
}

// Field policy. Every field of the OpenAI request bodies is in one of three groups:
//   - supported: it changes the result and is implemented (fieldsChat, fieldsCompletions below);
//   - harmless: accepted and ignored because it does not change the generated text (user, metadata, store,
//     service_tier, parallel_tool_calls), or accepted only at the value that changes nothing (n 1,
//     response_format {"type": "text"}, tools [], tool_choice "none", echo false, best_of 1, suffix "");
//   - anything else: refused with 400 naming the field.
//
// A field whose value is JSON null counts as absent (several clients send nulls for unset options).
var (
	fieldsCommon = []string{"model", "max_tokens", "temperature", "top_p", "top_k", "repetition_penalty", "seed",
		"stop", "stream", "stream_options", "user", "metadata", "store", "service_tier", "n", "presence_penalty",
		"frequency_penalty", "logit_bias", "min_p"}
	fieldsChat        = append(slices.Clone(fieldsCommon), "messages", "max_completion_tokens", "logprobs", "top_logprobs", "response_format", "tools", "tool_choice", "parallel_tool_calls")
	fieldsCompletions = append(slices.Clone(fieldsCommon), "prompt", "logprobs", "echo", "best_of", "suffix")
)

// Bounds of a request.
const (
	maxStops      = 4   // as OpenAI
	maxStopLen    = 256 // bytes per stop string
	maxMessages   = 4096
	maxLegacyTops = 5 // completions' logprobs, as OpenAI
	maxChoices    = 8 // n
)

// parseRequest reads a request body for the chat (chat true) or completions endpoint. maxTokens bounds
// max_tokens; defaults are not filled here.
func parseRequest(body []byte, chat bool, maxTokens int) (*request, error) {
	allowed := fieldsCompletions
	if chat {
		allowed = fieldsChat
	}
	fields, err := parseFields(body, "", allowed)
	if err != nil {
		return nil, err
	}
	r := &request{chat: chat}
	p := parser{fields: fields}
	p.str("model", &r.model)
	if chat {
		p.openAIChat(r, maxTokens)
	} else {
		p.openAICompletion(r, maxTokens)
	}
	p.sampling(r, 2)
	r.repetition = p.float("repetition_penalty", math.Inf(-1), math.Inf(1))
	if r.repetition != nil && !(*r.repetition > 0 && *r.repetition <= 100) && p.err == nil {
		p.err = badField("repetition_penalty", "repetition_penalty must be in (0, 100] (1 is off), got %g", *r.repetition)
	}
	r.stop = p.stops("stop")
	p.boolean("stream", &r.stream)
	if p.has("stream_options") && p.err == nil {
		var o struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		if err := strictDecode(fields["stream_options"], &o); err != nil {
			p.err = badField("stream_options", "stream_options: want {\"include_usage\": true|false}: %s", jsonError(err))
		} else if !r.stream {
			p.err = badField("stream_options", "stream_options is only allowed with stream: true")
		} else if o.IncludeUsage != nil {
			r.usage = *o.IncludeUsage
		}
	}
	var s string
	p.str("user", &s)
	p.str("service_tier", &s)
	var b bool
	p.boolean("store", &b)
	p.only("metadata", "an object", func(raw json.RawMessage) bool {
		var m map[string]any
		return json.Unmarshal(raw, &m) == nil
	})
	p.intRange("n", &r.n, 1, maxChoices)
	p.penalties(r)
	r.logitBias = p.logitBias("logit_bias")
	if p.err != nil {
		return nil, p.err
	}
	return r, nil
}

// parseFields reads a JSON object's fields, dropping those set to null, and refuses any not in allowed by
// name (prefix names the object: "options." for Ollama's options).
func parseFields(body []byte, prefix string, allowed []string) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		if prefix != "" {
			return nil, badField(strings.TrimSuffix(prefix, "."), "%s: want an object: %s", strings.TrimSuffix(prefix, "."), jsonError(err))
		}
		return nil, &requestError{status: 400, msg: "the body is not a JSON object: " + jsonError(err)}
	}
	if fields == nil {
		return nil, &requestError{status: 400, msg: "the body is not a JSON object (null)"}
	}
	names := make([]string, 0, len(fields))
	for name, raw := range fields {
		if isNull(raw) {
			delete(fields, name)
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names) // errors name the same field whatever the map order
	for _, name := range names {
		if !slices.Contains(allowed, name) {
			return nil, badField(prefix+name, "unsupported field %q: layerstream does not implement it, and it would change the result (supported: %s; see %s)", prefix+name, strings.Join(allowed, ", "), sections.Anchor(sections.Server))
		}
	}
	return fields, nil
}

// openAIChat reads the chat endpoint's own fields.
func (p *parser) openAIChat(r *request, maxTokens int) {
	r.messages = p.messages(openAIMessages)
	p.intRange("max_completion_tokens", &r.maxTokens, 1, maxTokens)
	if p.has("max_completion_tokens") {
		r.maxTokensField = "max_completion_tokens"
	} else {
		p.intRange("max_tokens", &r.maxTokens, 1, maxTokens)
	}
	p.boolean("logprobs", &r.logprobs)
	p.intRange("top_logprobs", &r.topLogprobs, 0, engine.MaxTopLogprobs)
	if r.topLogprobs > 0 && !r.logprobs && p.err == nil {
		p.err = badField("top_logprobs", "top_logprobs needs logprobs: true")
	}
	r.schema = p.responseFormat("response_format")
	p.tools(r)
	p.toolChoice(r)
	var parallel bool
	p.boolean("parallel_tool_calls", &parallel)
}

// responseFormat reads OpenAI's response_format: {"type": "text"} (free text), {"type": "json_object"} (a JSON
// object) or {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}} (a value of
// the schema, whose keywords outside the subset the grammar package implements are refused by name).
func (p *parser) responseFormat(name string) *grammar.Schema {
	raw, ok := p.fields[name]
	if !ok || p.err != nil {
		return nil
	}
	at := p.prefix + name
	var f struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict"`
		} `json:"json_schema"`
	}
	if err := strictDecode(raw, &f); err != nil {
		p.err = badField(at, "%s: want {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}}: %s", at, jsonError(err))
		return nil
	}
	switch f.Type {
	case "text":
		return nil
	case "json_object":
		return grammar.AnyObject
	case "json_schema":
		if f.JSONSchema == nil || f.JSONSchema.Schema == nil || isNull(f.JSONSchema.Schema) {
			p.err = badField(at+".json_schema.schema", "%s.json_schema.schema is required with type json_schema", at)
			return nil
		}
		return p.schema(at+".json_schema.schema", f.JSONSchema.Schema)
	}
	p.err = badField(at+".type", "%s.type %q is not supported (text, json_object, json_schema)", at, f.Type)
	return nil
}

// schema compiles a JSON schema given in the field at.
func (p *parser) schema(at string, raw json.RawMessage) *grammar.Schema {
	s, err := grammar.Compile(raw)
	if err != nil {
		var ge *grammar.Error
		param := at
		if errors.As(err, &ge) && ge.Path != "" {
			param = at + "." + ge.Path
		}
		p.err = badField(param, "%s: %v (see %s)", at, err, sections.Anchor(sections.Server))
		return nil
	}
	return s
}

// openAICompletion reads the completions endpoint's own fields.
func (p *parser) openAICompletion(r *request, maxTokens int) {
	r.defaultTokens = 16 // as OpenAI's
	p.prompt(r)
	p.intRange("max_tokens", &r.maxTokens, 1, maxTokens)
	if p.has("logprobs") {
		p.intRange("logprobs", &r.topLogprobs, 0, maxLegacyTops)
		r.logprobs = true
	}
	p.only("echo", "false", is("false"))
	p.only("best_of", "1", isOne)
	p.only("suffix", `""`, is(`""`))
}

// sampling reads the sampling fields the APIs share: temperature (0 to maxTemperature), top_p, top_k and seed.
func (p *parser) sampling(r *request, maxTemperature float64) {
	r.temperature = p.float("temperature", 0, maxTemperature)
	r.topP = p.float("top_p", 0, 1)
	if p.has("top_k") {
		r.topK = new(int)
		p.intRange("top_k", r.topK, 0, math.MaxInt32)
	}
	if p.has("seed") {
		var seed int64
		p.decode("seed", &seed, "an integer")
		u := uint64(seed)
		r.seed = &u
	}
}

// penalties reads presence_penalty and frequency_penalty (-2 to 2, as OpenAI's) and min_p (0 to 1).
func (p *parser) penalties(r *request) {
	r.presence = p.float("presence_penalty", -2, 2)
	r.frequency = p.float("frequency_penalty", -2, 2)
	r.minP = p.float("min_p", 0, 1)
}

// maxLogitBiases bounds the token ids of a logit_bias.
const maxLogitBiases = 1024

// logitBias reads OpenAI's logit_bias: an object from token ids (as strings) to biases in [-100, 100].
func (p *parser) logitBias(name string) map[int]float64 {
	var m map[string]float64
	if !p.decode(name, &m, "an object from token ids to numbers") {
		return nil
	}
	at := p.prefix + name
	if len(m) > maxLogitBiases {
		p.err = badField(at, "%s: at most %d token ids, got %d", at, maxLogitBiases, len(m))
		return nil
	}
	bias := make(map[int]float64, len(m))
	for _, key := range slices.Sorted(maps.Keys(m)) {
		id, err := strconv.Atoi(key)
		if err != nil || id < 0 {
			p.err = badField(at, "%s: key %q is not a token id (an integer ≥ 0)", at, key)
			return nil
		}
		if v := m[key]; !(v >= -engine.MaxLogitBias && v <= engine.MaxLogitBias) {
			p.err = badField(at, "%s[%q] must be in [-%d, %d], got %g", at, key, engine.MaxLogitBias, engine.MaxLogitBias, v)
			return nil
		}
		bias[id] = m[key]
	}
	return bias
}

// parser decodes fields one after the other, keeping the first error. Errors name a field as prefix+name.
type parser struct {
	fields map[string]json.RawMessage
	prefix string
	err    error
}

func (p *parser) has(name string) bool {
	_, ok := p.fields[name]
	return ok
}

func (p *parser) decode(name string, dst any, want string) bool {
	raw, ok := p.fields[name]
	if !ok || p.err != nil {
		return false
	}
	if err := strictDecode(raw, dst); err != nil {
		p.err = badField(p.prefix+name, "%s: want %s, got %s", p.prefix+name, want, excerpt(raw))
		return false
	}
	return true
}

func (p *parser) str(name string, dst *string) { p.decode(name, dst, "a string") }

func (p *parser) boolean(name string, dst *bool) { p.decode(name, dst, "true or false") }

func (p *parser) intRange(name string, dst *int, lo, hi int) {
	var v int64
	if !p.decode(name, &v, "an integer") {
		return
	}
	if v < int64(lo) || v > int64(hi) {
		p.err = badField(p.prefix+name, "%s must be in [%d, %d], got %d", p.prefix+name, lo, hi, v)
		return
	}
	*dst = int(v)
}

func (p *parser) float(name string, lo, hi float64) *float64 {
	var v float64
	if !p.decode(name, &v, "a number") {
		return nil
	}
	if !(v >= lo && v <= hi) {
		p.err = badField(p.prefix+name, "%s must be in [%g, %g], got %g", p.prefix+name, lo, hi, v)
		return nil
	}
	return &v
}

// only accepts a field only at a value that changes nothing (ok), naming that value when refusing.
func (p *parser) only(name, value string, ok func(json.RawMessage) bool) {
	raw, present := p.fields[name]
	if !present || p.err != nil {
		return
	}
	if !ok(raw) {
		p.err = badField(p.prefix+name, "%s is accepted only as %s: layerstream does not implement other values (got %s)", p.prefix+name, value, excerpt(raw))
	}
}

// stops reads stop strings: one string or an array of them (name: "stop", Anthropic's "stop_sequences").
func (p *parser) stops(name string) []string {
	raw, ok := p.fields[name]
	if !ok || p.err != nil {
		return nil
	}
	at := p.prefix + name
	var one string
	var many []string
	if json.Unmarshal(raw, &one) == nil {
		many = []string{one}
	} else if err := json.Unmarshal(raw, &many); err != nil {
		p.err = badField(at, "%s: want a string or an array of strings, got %s", at, excerpt(raw))
		return nil
	}
	if len(many) > maxStops {
		p.err = badField(at, "%s: at most %d strings, got %d", at, maxStops, len(many))
		return nil
	}
	for _, s := range many {
		if s == "" || len(s) > maxStopLen {
			p.err = badField(at, "%s: stop strings must be 1 to %d bytes, got %q", at, maxStopLen, excerpt([]byte(s)))
			return nil
		}
	}
	return many
}

// messagePolicy is what a dialect accepts in a chat's messages.
type messagePolicy struct {
	roles   map[string]string                     // accepted role → the role the chat template gets
	content func(json.RawMessage) (string, error) // reads a message's content
	other   string                                // why a key other than role and content is refused
	tools   bool                                  // tool_calls, tool_call_id and a tool's name are read too
}

// openAIMessages: roles system (or developer, OpenAI's newer name for it), user, assistant (with tool_calls)
// and tool (with tool_call_id), content a string or text parts.
var openAIMessages = messagePolicy{
	roles:   map[string]string{"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"},
	content: messageContent,
	other:   "layerstream renders only role, content, tool_calls and tool_call_id with the model's chat template",
	tools:   true,
}

// messages reads a chat from the field "messages".
func (p *parser) messages(pol messagePolicy) []tokenizer.Message {
	items := p.messageItems()
	if items == nil {
		return nil
	}
	msgs := make([]tokenizer.Message, len(items))
	for i, m := range items {
		if msgs[i], p.err = pol.message(fmt.Sprintf("messages[%d]", i), m); p.err != nil {
			return nil
		}
	}
	return msgs
}

// messageItems reads the field "messages" as 1 to maxMessages JSON objects, left to the API's reader; nil (with
// p.err set) when it is missing or is not that.
func (p *parser) messageItems() []map[string]json.RawMessage {
	raw, ok := p.fields["messages"]
	if p.err != nil {
		return nil
	}
	if !ok {
		p.err = badField("messages", "messages is required")
		return nil
	}
	var items []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		p.err = badField("messages", "messages: want an array of {\"role\": ..., \"content\": ...} objects: %s", jsonError(err))
		return nil
	}
	if len(items) == 0 || len(items) > maxMessages {
		p.err = badField("messages", "messages: want 1 to %d messages, got %d", maxMessages, len(items))
		return nil
	}
	return items
}

// message reads one message (at names it in errors).
func (pol messagePolicy) message(at string, m map[string]json.RawMessage) (tokenizer.Message, error) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if pol.tools && (k == "tool_calls" || k == "tool_call_id" || k == "name") {
			continue
		}
		if k != "role" && k != "content" && !isNull(m[k]) {
			return tokenizer.Message{}, badField(at+"."+k, "%s.%s is not supported: %s", at, k, pol.other)
		}
	}
	roles := slices.Sorted(maps.Keys(pol.roles))
	var role string
	if err := strictDecode(m["role"], &role); err != nil {
		return tokenizer.Message{}, badField(at+".role", "%s.role: want one of %s, got %s", at, strings.Join(roles, ", "), excerpt(m["role"]))
	}
	as, ok := pol.roles[role]
	if !ok {
		return tokenizer.Message{}, badField(at+".role", "%s.role %q is not supported (%s)", at, role, strings.Join(roles, ", "))
	}
	msg := tokenizer.Message{Role: as}
	if pol.tools {
		if err := toolMessage(at, &msg, m); err != nil {
			return tokenizer.Message{}, err
		}
		if len(msg.ToolCalls) > 0 && (m["content"] == nil || isNull(m["content"])) {
			return msg, nil // an assistant's calls without text
		}
	}
	content, err := pol.content(m["content"])
	if err != nil {
		return tokenizer.Message{}, badField(at+".content", "%s.content: %v", at, err)
	}
	msg.Content = content
	return msg, nil
}

// messageContent reads a message's content: a string, or an array of {"type": "text", "text": ...} parts
// (joined). Image, audio and file parts are refused by type: layerstream generates text from text, and runs
// vision-language checkpoints (Gemma 3 4B and up, Mistral Small 3.1/3.2) as text models.
func messageContent(raw json.RawMessage) (string, error) {
	refuse := func(j int, typ string) error {
		switch typ {
		case "text":
			return nil
		case "image_url", "image", "input_image", "input_audio", "audio", "file", "input_file", "video_url":
			return fmt.Errorf("part %d has type %q: images, audio and files are not supported (text in, text out; a vision-language model's vision tower is not loaded)", j, typ)
		}
		return fmt.Errorf("part %d has type %q: only text parts are supported", j, typ)
	}
	return textContent(raw, "part", refuse, func(raw json.RawMessage) (string, bool) {
		var part struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		return part.Text, strictDecode(raw, &part) == nil
	})
}

// textContent reads content that is a string or an array of typed items (noun: "part" or "block", as the API
// names them), joining the texts of the text items. refuse says why item j of another type than "text" is refused
// (nil: it is text); text decodes a text item strictly, reporting whether it has only the fields allowed.
func textContent(raw json.RawMessage, noun string, refuse func(j int, typ string) error, text func(json.RawMessage) (string, bool)) (string, error) {
	if raw == nil || isNull(raw) {
		return "", errors.New("required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return "", fmt.Errorf("want a string or an array of {\"type\": \"text\", \"text\": ...} %ss, got %s", noun, excerpt(raw))
	}
	var b strings.Builder
	for j, raw := range items {
		var typed struct {
			Type string `json:"type"`
		}
		json.Unmarshal(raw, &typed)
		if err := refuse(j, typed.Type); err != nil {
			return "", err
		}
		t, ok := text(raw)
		if !ok {
			return "", fmt.Errorf("%s %d: want {\"type\": \"text\", \"text\": ...}, got %s", noun, j, excerpt(raw))
		}
		b.WriteString(t)
	}
	return b.String(), nil
}

// prompt reads completions' prompt: a string, an array of one string, token ids, or an array of one array of
// token ids. Errors say which of these shapes is wrong, and where.
func (p *parser) prompt(r *request) {
	raw, ok := p.fields["prompt"]
	if p.err != nil {
		return
	}
	if !ok {
		p.err = badField("prompt", "prompt is required")
		return
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		p.promptText(r, s)
		return
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		p.err = badField("prompt", "prompt: want a string, or an array of token ids, got %s", excerpt(raw))
		return
	}
	switch first := bytes.TrimSpace(firstOf(items)); {
	case len(items) == 0:
		p.err = badField("prompt", "prompt is empty: want a string, or an array of token ids")
	case first[0] == '"' && len(items) == 1:
		json.Unmarshal(items[0], &s)
		p.promptText(r, s)
	case first[0] == '"' || first[0] == '[' && len(items) > 1:
		p.err = badField("prompt", "prompt: one prompt per request (got %d); send several requests, they share the batch", len(items))
	case first[0] == '[':
		r.ids, p.err = tokenIDs("prompt[0]", items[0])
	default:
		r.ids, p.err = tokenIDs("prompt", raw)
	}
}

// promptText sets a text prompt, refusing an empty one.
func (p *parser) promptText(r *request, s string) {
	if s == "" {
		p.err = badField("prompt", "prompt is empty")
		return
	}
	r.prompt = s
}

func firstOf(items []json.RawMessage) json.RawMessage {
	if len(items) == 0 {
		return nil
	}
	return items[0]
}

// tokenIDs reads a non-empty array of token ids (at names it in errors; the error names the field "prompt").
func tokenIDs(at string, raw json.RawMessage) ([]int, error) {
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badField("prompt", "%s: want an array of token ids, got %s", at, excerpt(raw))
	}
	if len(items) == 0 {
		return nil, badField("prompt", "%s is empty: want at least one token id", at)
	}
	ids := make([]int, len(items))
	for i, item := range items {
		var id int64
		if err := json.Unmarshal(item, &id); err != nil || id < 0 || id > math.MaxInt32 {
			return nil, badField("prompt", "%s[%d]: a token id is an integer ≥ 0, got %s", at, i, excerpt(item))
		}
		ids[i] = int(id)
	}
	return ids, nil
}

func strictDecode(raw json.RawMessage, dst any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(dst); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data")
	}
	return nil
}

// is accepts a value whose compact JSON is value.
func is(value string) func(json.RawMessage) bool {
	return func(raw json.RawMessage) bool { return bytes.Equal(compact(raw), []byte(value)) }
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

func isOne(raw json.RawMessage) bool {
	var v float64
	return json.Unmarshal(raw, &v) == nil && v == 1
}

func compact(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return nil
	}
	return b.Bytes()
}

// excerpt quotes at most 60 bytes of a value for an error message.
func excerpt(b []byte) string {
	s := string(bytes.TrimSpace(b))
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}

// jsonError describes a JSON syntax or type error briefly.
func jsonError(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	return err.Error()
}
