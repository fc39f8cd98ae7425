package server

import (
	"strings"

	"github.com/layerstream/layerstream/engine"
)

// openAI is OpenAI's API: /v1/chat/completions (chat) and /v1/completions, streamed with server-sent events
// ending with "data: [DONE]".
type openAI struct{ chat bool }

func (o openAI) parse(body []byte, maxTokens int) (*request, error) {
	return parseRequest(body, o.chat, maxTokens)
}

func (o openAI) idPrefix() string {
	if o.chat {
		return "chatcmpl-"
	}
	return "cmpl-"
}

func (openAI) errorBody(e *requestError) any { return newErrorJSON(e) }

func (o openAI) answer(g *generation, results []*engine.TextResult, tokens [][]*engine.TextToken) any {
	choices := make([]any, len(results))
	for i, res := range results {
		choice := map[string]any{"index": i, "finish_reason": finishReason(res.StopReason), "logprobs": nil}
		if o.chat {
			msg := map[string]any{"role": "assistant", "content": res.Text}
			if g.req.toolChoice != "none" && g.req.toolChoice != "" {
				if content, calls := parseCalls(res.Text, g.req.toolNames()); len(calls) > 0 {
					msg["content"] = nil
					if content != "" {
						msg["content"] = content
					}
					msg["tool_calls"] = callsJSON(calls, false)
					choice["finish_reason"] = "tool_calls"
				}
			}
			choice["message"] = msg
			if g.text.Logprobs {
				content := []chatLogprob{}
				for _, t := range tokens[i] {
					content = append(content, chatLogprobOf(t))
				}
				choice["logprobs"] = map[string]any{"content": content}
			}
		} else {
			choice["text"] = res.Text
			if g.text.Logprobs {
				var l completionLogprobs
				offset := 0
				for _, t := range tokens[i] {
					l.add(t, offset)
					offset += len(t.Text)
				}
				choice["logprobs"] = l
			}
		}
		choices[i] = choice
	}
	object := "text_completion"
	if o.chat {
		object = "chat.completion"
	}
	return map[string]any{"id": g.id, "object": object, "created": g.created, "model": g.s.cfg.ModelID,
		"system_fingerprint": systemFingerprint, "choices": choices, "usage": usageOf(results)}
}

// systemFingerprint names the backend in responses.
const systemFingerprint = "layerstream"

func (o openAI) events(g *generation) eventWriter {
	e := &openAIEvents{g: g, chat: o.chat, offset: make([]int, len(g.texts))}
	if o.chat && g.req.toolChoice != "none" && g.req.toolChoice != "" {
		e.calls = make([]callStream, len(g.texts))
	}
	return e
}

// openAIEvents writes a stream: for chat, a first chunk with the assistant's role per choice; one chunk per
// piece of text of a choice, with its index (and its token's logprobs when asked for); each choice's finish
// reason, the usage (stream_options.include_usage) and "data: [DONE]". With tools, a choice's text is held back
// from where a tool call may begin: at the end, the calls are sent as delta.tool_calls (finish reason
// "tool_calls"), or the text held as content when it holds none.
type openAIEvents struct {
	g      *generation
	chat   bool
	offset []int        // completions' text_offset, per choice
	calls  []callStream // per choice, when tools may be called
}

// callStream is a choice's text while tools may be called: all of it, and the bytes sent as content.
type callStream struct {
	text string
	sent int
}

func (*openAIEvents) ndjson() bool { return false }

func (o *openAIEvents) open() []event {
	if !o.chat {
		return nil
	}
	var evs []event
	for i := range o.g.texts {
		evs = append(evs, event{data: o.chatChunk(i, map[string]any{"role": "assistant", "content": ""}, nil, nil)})
	}
	return evs
}

func (o *openAIEvents) chunk(i int, c engine.TextChunk) []event {
	text := c.Text
	if o.calls != nil {
		cs := &o.calls[i]
		cs.text += c.Text
		safe := max(contentSafe(cs.text), cs.sent)
		text, cs.sent = cs.text[cs.sent:safe], safe
	}
	logprobs := o.g.text.Logprobs && len(c.Tokens) > 0
	if text == "" && !logprobs {
		return nil
	}
	var lp any
	if o.chat {
		if logprobs {
			content := make([]chatLogprob, len(c.Tokens))
			for k, t := range c.Tokens {
				content[k] = chatLogprobOf(t)
			}
			lp = map[string]any{"content": content}
		}
		return []event{{data: o.chatChunk(i, map[string]any{"content": text}, lp, nil)}}
	}
	if logprobs {
		var l completionLogprobs
		for _, t := range c.Tokens {
			l.add(t, o.offset[i])
			o.offset[i] += len(t.Text)
		}
		lp = l
	}
	return []event{{data: o.completionChunk(i, text, lp, nil)}}
}

func (o *openAIEvents) end(results []*engine.TextResult) []event {
	var evs []event
	for i, res := range results {
		reason := finishReason(res.StopReason)
		switch {
		case o.calls != nil:
			cs := &o.calls[i]
			content, calls := parseCalls(cs.text, o.g.req.toolNames())
			if len(calls) == 0 {
				content = cs.text
			}
			if rest, ok := strings.CutPrefix(content, cs.text[:cs.sent]); ok && rest != "" {
				evs = append(evs, event{data: o.chatChunk(i, map[string]any{"content": rest}, nil, nil)})
			}
			if len(calls) > 0 {
				evs = append(evs, event{data: o.chatChunk(i, map[string]any{"tool_calls": callsJSON(calls, true)}, nil, nil)})
				reason = "tool_calls"
			}
			evs = append(evs, event{data: o.chatChunk(i, map[string]any{}, nil, &reason)})
		case o.chat:
			evs = append(evs, event{data: o.chatChunk(i, map[string]any{}, nil, &reason)})
		default:
			evs = append(evs, event{data: o.completionChunk(i, "", nil, &reason)})
		}
	}
	if o.g.req.usage {
		object := "text_completion"
		if o.chat {
			object = "chat.completion.chunk"
		}
		evs = append(evs, event{data: map[string]any{"id": o.g.id, "object": object, "created": o.g.created, "model": o.g.s.cfg.ModelID,
			"system_fingerprint": systemFingerprint, "choices": []any{}, "usage": usageOf(results)}})
	}
	return append(evs, event{raw: "[DONE]"})
}

// fail ends the stream with the error, without [DONE].
func (o *openAIEvents) fail(e *requestError) []event { return []event{{data: newErrorJSON(e)}} }

func (o *openAIEvents) chatChunk(i int, delta map[string]any, logprobs any, finish *string) map[string]any {
	g := o.g
	return map[string]any{"id": g.id, "object": "chat.completion.chunk", "created": g.created, "model": g.s.cfg.ModelID,
		"system_fingerprint": systemFingerprint,
		"choices":            []any{map[string]any{"index": i, "delta": delta, "logprobs": logprobs, "finish_reason": finish}}}
}

func (o *openAIEvents) completionChunk(i int, text string, logprobs any, finish *string) map[string]any {
	g := o.g
	return map[string]any{"id": g.id, "object": "text_completion", "created": g.created, "model": g.s.cfg.ModelID,
		"system_fingerprint": systemFingerprint,
		"choices":            []any{map[string]any{"index": i, "text": text, "logprobs": logprobs, "finish_reason": finish}}}
}

// finishReason is OpenAI's name for a stop reason.
func finishReason(stop string) string {
	switch stop {
	case engine.StopMaxNewTokens, engine.StopContext:
		return "length"
	default:
		return "stop"
	}
}

type usageJSON struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// usageOf counts the prompt once and the tokens generated for every choice.
func usageOf(results []*engine.TextResult) *usageJSON {
	p, c := len(results[0].PromptIDs), 0
	for _, res := range results {
		c += len(res.GeneratedIDs)
	}
	return &usageJSON{PromptTokens: p, CompletionTokens: c, TotalTokens: p + c}
}

// chatLogprob is an entry of a chat choice's logprobs.content.
type chatLogprob struct {
	Token       string           `json:"token"`
	Logprob     float64          `json:"logprob"`
	Bytes       []int            `json:"bytes"`
	TopLogprobs []chatTopLogprob `json:"top_logprobs"`
}

// chatTopLogprob is one of a chatLogprob's most likely tokens (OpenAI's layout: no top_logprobs of its own).
type chatTopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

func tokenBytes(s string) []int {
	b := make([]int, len(s))
	for i := range len(s) {
		b[i] = int(s[i])
	}
	return b
}

func chatLogprobOf(t *engine.TextToken) chatLogprob {
	lp := chatLogprob{Token: t.Text, Logprob: t.Logprob, Bytes: tokenBytes(t.Text), TopLogprobs: []chatTopLogprob{}}
	for _, c := range t.TopLogprobs {
		lp.TopLogprobs = append(lp.TopLogprobs, chatTopLogprob{Token: c.Text, Logprob: c.Logprob, Bytes: tokenBytes(c.Text)})
	}
	return lp
}

// completionLogprobs is a completions choice's logprobs (the legacy layout).
type completionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
}

func (l *completionLogprobs) add(t *engine.TextToken, offset int) {
	l.Tokens = append(l.Tokens, t.Text)
	l.TokenLogprobs = append(l.TokenLogprobs, t.Logprob)
	top := map[string]float64{}
	for _, c := range t.TopLogprobs {
		if _, dup := top[c.Text]; !dup { // two tokens of the same text: the likelier one
			top[c.Text] = c.Logprob
		}
	}
	l.TopLogprobs = append(l.TopLogprobs, top)
	l.TextOffset = append(l.TextOffset, offset)
}
