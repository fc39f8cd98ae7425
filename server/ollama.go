package server

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/grammar"
	"github.com/layerstream/layerstream/tokenizer"
)

// ollama is Ollama's API: /api/chat (chat) and /api/generate, streamed by default as JSON lines, each a
// partial response with "done": false, the last "done": true with done_reason and the timings in nanoseconds.
// template reports whether the model has a chat template: /api/generate renders its prompt (and system) with
// it unless raw is true, as Ollama does, and passes it as it is when there is none.
type ollama struct {
	chat     bool
	template bool
}

// Ollama's request fields (see request.go for the policy). options holds the sampling settings; keep_alive is
// accepted and changes nothing (the model stays loaded); format only as "" (no constrained output), tools only
// as [] and think only as false.
var (
	fieldsOllamaChat     = []string{"model", "messages", "stream", "options", "format", "keep_alive", "tools", "think"}
	fieldsOllamaGenerate = []string{"model", "prompt", "system", "stream", "options", "format", "keep_alive", "raw", "suffix", "think"}
	fieldsOllamaOptions  = []string{"num_predict", "temperature", "top_k", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty", "min_p"}
)

// ollamaMessages: roles system, user and assistant, content a string.
var ollamaMessages = messagePolicy{
	roles: map[string]string{"system": "system", "user": "user", "assistant": "assistant"},
	content: func(raw json.RawMessage) (string, error) {
		var s string
		if err := strictDecode(raw, &s); err != nil {
			return "", errors.New("want a string")
		}
		return s, nil
	},
	other: "layerstream renders only role and content with the model's chat template (no images, tool calls or thinking)",
}

func (o ollama) parse(body []byte, maxTokens int) (*request, error) {
	allowed := fieldsOllamaGenerate
	if o.chat {
		allowed = fieldsOllamaChat
	}
	fields, err := parseFields(body, "", allowed)
	if err != nil {
		return nil, err
	}
	r := &request{stream: true} // Ollama streams unless told not to
	p := parser{fields: fields}
	p.str("model", &r.model)
	if r.model == "" && p.err == nil {
		p.err = badField("model", "model is required (GET /api/tags lists it)")
	}
	if o.chat {
		r.messages = p.messages(ollamaMessages)
		p.only("tools", "[]", is("[]"))
	} else {
		o.prompt(&p, r)
	}
	p.boolean("stream", &r.stream)
	r.schema = p.ollamaFormat("format")
	p.only("think", "false", is("false"))
	var keep any
	p.decode("keep_alive", &keep, "a duration")
	if p.err != nil {
		return nil, p.err
	}
	if raw, ok := fields["options"]; ok {
		if err := ollamaOptions(raw, r, maxTokens); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// ollamaFormat reads Ollama's format: "" (free text), "json" (any JSON value) or a JSON schema.
func (p *parser) ollamaFormat(name string) *grammar.Schema {
	raw, ok := p.fields[name]
	if !ok || p.err != nil {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "":
			return nil
		case "json":
			return grammar.AnyJSON
		}
		p.err = badField(name, "%s: want \"\", \"json\" or a JSON schema, got %q", name, s)
		return nil
	}
	return p.schema(name, raw)
}

// prompt reads /api/generate's prompt, system and raw: rendered as a chat with the model's template unless raw
// is true or the model has none.
func (o ollama) prompt(p *parser, r *request) {
	var prompt, system string
	p.str("prompt", &prompt)
	p.str("system", &system)
	p.boolean("raw", &r.raw)
	p.only("suffix", `""`, is(`""`))
	switch {
	case p.err != nil:
	case prompt == "":
		p.err = badField("prompt", "prompt is required (and not empty)")
	case (r.raw || !o.template) && system != "":
		p.err = badField("system", "system needs the model's chat template: not with raw: true, nor for a model without one")
	case r.raw || !o.template:
		r.prompt = prompt
	default:
		if system != "" {
			r.messages = append(r.messages, tokenizer.Message{Role: "system", Content: system})
		}
		r.messages = append(r.messages, tokenizer.Message{Role: "user", Content: prompt})
	}
}

// ollamaOptions reads Ollama's options: num_predict (-1 and -2: until the context ends, bounded by serve
// --max-tokens), temperature, top_k, top_p, seed, stop, presence_penalty, frequency_penalty and min_p.
func ollamaOptions(raw json.RawMessage, r *request, maxTokens int) error {
	fields, err := parseFields(raw, "options.", fieldsOllamaOptions)
	if err != nil {
		return err
	}
	p := parser{fields: fields, prefix: "options."}
	var n int
	p.intRange("num_predict", &n, -2, maxTokens)
	if n == 0 && p.has("num_predict") && p.err == nil {
		p.err = badField("options.num_predict", "options.num_predict must be at least 1 (or -1: to the context's end), got 0")
	}
	r.maxTokens = max(n, 0)
	r.maxTokensField = "options.num_predict"
	p.sampling(r, 2)
	p.penalties(r)
	r.stop = p.stops("stop")
	return p.err
}

func (ollama) idPrefix() string { return "ollama-" }

// errorBody is Ollama's error: {"error": message}.
func (ollama) errorBody(e *requestError) any { return map[string]string{"error": e.msg} }

// doneReason is Ollama's name for a stop reason.
func doneReason(stop string) string {
	if finishReason(stop) == "length" {
		return "length"
	}
	return "stop"
}

// part is a response line: the model, the time, and the text (a message for chat, "response" for generate).
func (o ollama) part(g *generation, text string) map[string]any {
	name := g.req.model
	m := map[string]any{"model": name, "created_at": time.Now().UTC().Format(time.RFC3339Nano), "done": false}
	if o.chat {
		m["message"] = map[string]any{"role": "assistant", "content": text}
	} else {
		m["response"] = text
	}
	return m
}

// last is the closing line: done, the reason, and the counts and timings (nanoseconds). load_duration is 0:
// the model is open before any request.
func (o ollama) last(g *generation, res *engine.TextResult, text string) map[string]any {
	m := o.part(g, text)
	t := res.Timings
	m["done"] = true
	m["done_reason"] = doneReason(res.StopReason)
	m["total_duration"] = time.Since(g.start).Nanoseconds()
	m["load_duration"] = 0
	m["prompt_eval_count"] = len(res.PromptIDs) - res.CachedPromptTokens
	m["prompt_eval_duration"] = t.Prefill.Nanoseconds()
	m["eval_count"] = len(res.GeneratedIDs)
	m["eval_duration"] = t.Decode.Nanoseconds()
	return m
}

func (o ollama) answer(g *generation, res []*engine.TextResult, _ [][]*engine.TextToken) any {
	return o.last(g, res[0], res[0].Text)
}

func (o ollama) events(g *generation) eventWriter { return ollamaEvents{o: o, g: g} }

// ollamaEvents writes a stream as JSON lines: one per piece of text, then the closing line (empty text), or
// {"error": message}.
type ollamaEvents struct {
	o ollama
	g *generation
}

func (ollamaEvents) ndjson() bool  { return true }
func (ollamaEvents) open() []event { return nil }

func (e ollamaEvents) chunk(_ int, c engine.TextChunk) []event {
	if c.Text == "" {
		return nil
	}
	return []event{{data: e.o.part(e.g, c.Text)}}
}

func (e ollamaEvents) end(res []*engine.TextResult) []event {
	return []event{{data: e.o.last(e.g, res[0], "")}}
}

func (e ollamaEvents) fail(err *requestError) []event { return []event{{data: e.o.errorBody(err)}} }
