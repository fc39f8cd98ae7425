package server

import (
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

func (o openAI) answer(g *generation, res *engine.TextResult, tokens []*engine.TextToken) any {
	choice := map[string]any{"index": 0, "finish_reason": finishReason(res.StopReason), "logprobs": nil}
	object := "text_completion"
	if o.chat {
		object = "chat.completion"
		choice["message"] = map[string]any{"role": "assistant", "content": res.Text}
		if g.text.Logprobs {
			content := []chatLogprob{}
			for _, t := range tokens {
				content = append(content, chatLogprobOf(t))
			}
			choice["logprobs"] = map[string]any{"content": content}
		}
	} else {
		choice["text"] = res.Text
		if g.text.Logprobs {
			var l completionLogprobs
			offset := 0
			for _, t := range tokens {
				l.add(t, offset)
				offset += len(t.Text)
			}
			choice["logprobs"] = l
		}
	}
	return map[string]any{"id": g.id, "object": object, "created": g.created, "model": g.s.cfg.ModelID,
		"system_fingerprint": systemFingerprint, "choices": []any{choice}, "usage": usageOf(res)}
}

// systemFingerprint names the backend in responses.
const systemFingerprint = "layerstream"

func (o openAI) events(g *generation) eventWriter { return &openAIEvents{g: g, chat: o.chat} }

// openAIEvents writes a stream: for chat, a first chunk with the assistant's role; one chunk per piece of text
// (with its token's logprobs when asked for); the finish reason, the usage (stream_options.include_usage) and
// "data: [DONE]".
type openAIEvents struct {
	g      *generation
	chat   bool
	offset int // completions' text_offset
}

func (*openAIEvents) ndjson() bool { return false }

func (o *openAIEvents) open() []event {
	if !o.chat {
		return nil
	}
	return []event{{data: o.chatChunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)}}
}

func (o *openAIEvents) chunk(c engine.TextChunk) []event {
	logprobs := o.g.text.Logprobs && len(c.Tokens) > 0
	if c.Text == "" && !logprobs {
		return nil
	}
	var lp any
	if o.chat {
		if logprobs {
			content := make([]chatLogprob, len(c.Tokens))
			for i, t := range c.Tokens {
				content[i] = chatLogprobOf(t)
			}
			lp = map[string]any{"content": content}
		}
		return []event{{data: o.chatChunk(map[string]any{"content": c.Text}, lp, nil)}}
	}
	if logprobs {
		var l completionLogprobs
		for _, t := range c.Tokens {
			l.add(t, o.offset)
			o.offset += len(t.Text)
		}
		lp = l
	}
	return []event{{data: o.completionChunk(c.Text, lp, nil)}}
}

func (o *openAIEvents) end(res *engine.TextResult) []event {
	reason := finishReason(res.StopReason)
	var evs []event
	if o.chat {
		evs = append(evs, event{data: o.chatChunk(map[string]any{}, nil, &reason)})
	} else {
		evs = append(evs, event{data: o.completionChunk("", nil, &reason)})
	}
	if o.g.req.usage {
		object := "text_completion"
		if o.chat {
			object = "chat.completion.chunk"
		}
		evs = append(evs, event{data: map[string]any{"id": o.g.id, "object": object, "created": o.g.created, "model": o.g.s.cfg.ModelID,
			"system_fingerprint": systemFingerprint, "choices": []any{}, "usage": usageOf(res)}})
	}
	return append(evs, event{raw: "[DONE]"})
}

// fail ends the stream with the error, without [DONE].
func (o *openAIEvents) fail(e *requestError) []event { return []event{{data: newErrorJSON(e)}} }

func (o *openAIEvents) chatChunk(delta map[string]any, logprobs any, finish *string) map[string]any {
	g := o.g
	return map[string]any{"id": g.id, "object": "chat.completion.chunk", "created": g.created, "model": g.s.cfg.ModelID,
		"system_fingerprint": systemFingerprint,
		"choices":            []any{map[string]any{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}}}
}

func (o *openAIEvents) completionChunk(text string, logprobs any, finish *string) map[string]any {
	g := o.g
	return map[string]any{"id": g.id, "object": "text_completion", "created": g.created, "model": g.s.cfg.ModelID,
		"system_fingerprint": systemFingerprint,
		"choices":            []any{map[string]any{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}}}
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

func usageOf(res *engine.TextResult) *usageJSON {
	p, c := len(res.PromptIDs), len(res.GeneratedIDs)
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
