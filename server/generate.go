package server

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/sections"
)

// generate serves /v1/chat/completions (chat) and /v1/completions.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	if s.draining.Load() {
		writeError(w, &requestError{status: http.StatusServiceUnavailable, msg: "the server is shutting down", code: "shutting_down"})
		return
	}
	body, err := s.readBody(w, r)
	if err != nil {
		writeError(w, err.(*requestError))
		return
	}
	req, err := parseRequest(body, chat, s.cfg.MaxTokens)
	if err != nil {
		writeError(w, err.(*requestError))
		return
	}
	if req.model != "" && req.model != s.cfg.ModelID {
		writeError(w, s.unknownModel(req.model))
		return
	}
	tr, err := s.textRequest(req)
	if err != nil {
		writeError(w, err.(*requestError))
		return
	}
	if n := s.inFlight.Add(1); n > int64(s.cfg.MaxInFlight) {
		s.inFlight.Add(-1)
		writeError(w, &requestError{status: http.StatusTooManyRequests, code: "queue_full",
			msg: fmt.Sprintf("the server is busy: %d requests are being generated or waiting (serve --max-queue); retry later (see %s)", s.cfg.MaxInFlight, sections.Anchor(sections.Server))})
		return
	}
	defer s.inFlight.Add(-1)
	if s.admitted != nil {
		s.admitted()
	}
	g := &generation{s: s, req: req, text: tr, id: newID("chatcmpl-"), created: time.Now().Unix(), start: time.Now()}
	if !chat {
		g.id = newID("cmpl-")
	}
	// The request's own health checks (residual stream, logits, output text), warning once per kind with its id.
	g.text.Monitor = guard.NewMonitor(guard.MonitorOptions{Strict: s.cfg.Strict, Logger: s.cfg.Logger.With("request_id", g.id)})
	if req.stream {
		g.stream(w, r)
	} else {
		g.complete(w, r)
	}
}

// textRequest turns a parsed request into the engine's: the prompt tokenized, sampling defaults from the
// model's generation_config.json, a random seed unless one is given, max_tokens bounded by the context.
func (s *Server) textRequest(req *request) (engine.TextRequest, error) {
	e := s.cfg.Engine
	ids := req.ids
	if ids == nil {
		var err error
		if ids, err = e.EncodePrompt(req.prompt, req.messages); err != nil {
			return engine.TextRequest{}, engineError(err)
		}
	}
	sm := e.DefaultSampling()
	setIf(&sm.Temperature, req.temperature)
	if req.topP != nil {
		sm.TopP = engine.ExplicitTopP(*req.topP)
	}
	setIf(&sm.TopK, req.topK)
	setIf(&sm.RepetitionPenalty, req.repetition)
	if req.seed != nil {
		sm.Seed = *req.seed
	} else {
		var b [8]byte
		rand.Read(b[:])
		sm.Seed = binary.LittleEndian.Uint64(b[:])
	}
	maxNew := req.maxTokens
	if maxNew == 0 {
		maxNew = 16 // completions, as OpenAI's
		if req.chat {
			maxNew = min(s.cfg.MaxTokens, e.ContextLength()-len(ids))
		}
	}
	tr := engine.TextRequest{PromptIDs: ids, MaxNewTokens: maxNew, Sampling: sm, Stop: req.stop,
		Logprobs: req.logprobs, TopLogprobs: req.topLogprobs}
	if maxNew < 1 {
		return tr, badField("messages", "the prompt's %d tokens fill the model's context of %d positions", len(ids), e.ContextLength())
	}
	return tr, nil
}

func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// engineError maps an engine error: a refused request is 400, anything else 500.
func engineError(err error) *requestError {
	var re *engine.RequestError
	if errors.As(err, &re) {
		return &requestError{status: http.StatusBadRequest, msg: err.Error()}
	}
	return &requestError{status: http.StatusInternalServerError, msg: err.Error()}
}

// generation is one request being answered.
type generation struct {
	s       *Server
	req     *request
	text    engine.TextRequest
	id      string
	created int64
	start   time.Time
	first   time.Time // first token
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

// run generates, passing every chunk to onChunk (on the engine's goroutine: it must not block). It returns the
// result, or the error to answer with.
func (g *generation) run(ctx context.Context, onChunk func(engine.TextChunk)) (*engine.TextResult, *requestError) {
	res, err := g.s.cfg.Engine.GenerateText(ctx, g.text, func(c engine.TextChunk) error {
		if c.Token != nil && g.first.IsZero() {
			g.first = time.Now()
		}
		if g.s.token != nil {
			g.s.token()
		}
		onChunk(c)
		return nil
	})
	g.s.metrics.generation(res, g.start, g.first, g.text.Monitor.Problems())
	var problem *guard.Problem
	switch {
	case err == nil:
		return res, nil
	case cancelled(ctx, err) && errors.Is(context.Cause(ctx), errShuttingDown):
		return res, &requestError{status: http.StatusServiceUnavailable, msg: "the request was cancelled: the server is shutting down", code: "shutting_down"}
	case cancelled(ctx, err):
		// The client left: no one reads this answer, and it is no failure of the server's (counted as 499).
		return res, &requestError{status: StatusClientClosedRequest, msg: "the request was cancelled: the client closed the connection", code: "client_closed_request"}
	case errors.Is(err, engine.ErrClosed):
		return res, &requestError{status: http.StatusServiceUnavailable, msg: "the server is shutting down", code: "shutting_down"}
	case errors.As(err, &problem):
		g.s.cfg.Logger.Error("generation stopped by a health check", "request_id", g.id, "kind", string(problem.Kind), "err", err)
		return res, &requestError{status: http.StatusInternalServerError, code: "health_check_failed",
			msg: "generation stopped by a health check: " + err.Error()}
	}
	return res, engineError(err)
}

// complete answers a request in one JSON body.
func (g *generation) complete(w http.ResponseWriter, r *http.Request) {
	var tokens []*engine.TextToken
	res, rerr := g.run(r.Context(), func(c engine.TextChunk) {
		if c.Token != nil && g.text.Logprobs {
			tokens = append(tokens, c.Token)
		}
	})
	if rerr != nil {
		writeError(w, rerr)
		return
	}
	choice := map[string]any{"index": 0, "finish_reason": finishReason(res.StopReason), "logprobs": nil}
	object := "text_completion"
	if g.req.chat {
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
	writeJSON(w, http.StatusOK, map[string]any{"id": g.id, "object": object, "created": g.created, "model": g.s.cfg.ModelID,
		"system_fingerprint": systemFingerprint, "choices": []any{choice}, "usage": usageOf(res)})
}

// systemFingerprint names the backend in responses.
const systemFingerprint = "layerstream"

// stream answers a request with server-sent events: one chunk per piece of text as it is generated, then the
// finish reason, the usage (stream_options.include_usage) and "data: [DONE]".
func (g *generation) stream(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// The engine calls back on its own goroutine, which must not wait for this client: chunks go through a
	// channel with room for all of them (one per token, and the last).
	chunks := make(chan engine.TextChunk, g.text.MaxNewTokens+2)
	type outcome struct {
		res  *engine.TextResult
		rerr *requestError
	}
	done := make(chan outcome, 1)
	go func() {
		res, rerr := g.run(ctx, func(c engine.TextChunk) { chunks <- c })
		close(chunks)
		done <- outcome{res, rerr}
	}()
	rc := http.NewResponseController(w)
	started := false
	start := func() {
		if !started {
			started = true
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.Header().Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
			if g.req.chat {
				g.event(w, g.chatChunk(map[string]any{"role": "assistant", "content": ""}, nil, nil))
			}
		}
	}
	offset := 0
	failed := false // the client is gone: keep draining, write nothing
	for c := range chunks {
		if failed || (c.Text == "" && (c.Token == nil || !g.text.Logprobs)) {
			continue
		}
		start()
		var ev any
		if g.req.chat {
			var lp any
			if g.text.Logprobs && c.Token != nil {
				lp = map[string]any{"content": []chatLogprob{chatLogprobOf(c.Token)}}
			}
			ev = g.chatChunk(map[string]any{"content": c.Text}, lp, nil)
		} else {
			var lp any
			if g.text.Logprobs && c.Token != nil {
				var l completionLogprobs
				l.add(c.Token, offset)
				lp = l
			}
			offset += len(c.Text)
			ev = g.completionChunk(c.Text, lp, nil)
		}
		if g.event(w, ev) != nil || rc.Flush() != nil {
			failed = true
		}
	}
	out := <-done
	if failed {
		return
	}
	if out.rerr != nil {
		if !started {
			writeError(w, out.rerr) // nothing sent yet: a plain error response
			return
		}
		g.event(w, newErrorJSON(out.rerr)) // the stream ends without [DONE]
		rc.Flush()
		return
	}
	start()
	reason := finishReason(out.res.StopReason)
	if g.req.chat {
		g.event(w, g.chatChunk(map[string]any{}, nil, &reason))
	} else {
		g.event(w, g.completionChunk("", nil, &reason))
	}
	if g.req.usage {
		object := "text_completion"
		if g.req.chat {
			object = "chat.completion.chunk"
		}
		g.event(w, map[string]any{"id": g.id, "object": object, "created": g.created, "model": g.s.cfg.ModelID,
			"system_fingerprint": systemFingerprint, "choices": []any{}, "usage": usageOf(out.res)})
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(eventTimeout))
	fmt.Fprint(w, "data: [DONE]\n\n")
	rc.Flush()
}

func (g *generation) chatChunk(delta map[string]any, logprobs any, finish *string) map[string]any {
	return map[string]any{"id": g.id, "object": "chat.completion.chunk", "created": g.created, "model": g.s.cfg.ModelID,
		"system_fingerprint": systemFingerprint,
		"choices":            []any{map[string]any{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}}}
}

func (g *generation) completionChunk(text string, logprobs any, finish *string) map[string]any {
	return map[string]any{"id": g.id, "object": "text_completion", "created": g.created, "model": g.s.cfg.ModelID,
		"system_fingerprint": systemFingerprint,
		"choices":            []any{map[string]any{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}}}
}

// eventTimeout bounds the writing of one event: a client that stops reading (without closing the connection)
// does not hold its handler for ever.
const eventTimeout = time.Minute

// event writes one server-sent event holding v as JSON.
func (g *generation) event(w http.ResponseWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(eventTimeout)) // not every writer has deadlines
	_, err = fmt.Fprintf(w, "data: %s\n\n", b)
	return err
}
