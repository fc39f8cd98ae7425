package server

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/sections"
)

// generate serves a generation request of any dialect: the request admitted (429 past MaxInFlight, its body
// unread), its body read and parsed, the model checked, the prompt tokenized, generated in the engine's batch
// loop with its own health checks, and answered in one body or streamed. Admission comes first, so that the
// bodies being read, parsed and tokenized at once are bounded by MaxInFlight too.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, d dialect) {
	if s.draining.Load() {
		writeErrorAs(w, d, &requestError{status: http.StatusServiceUnavailable, msg: "the server is shutting down", code: "shutting_down"})
		return
	}
	if n := s.inFlight.Add(1); n > int64(s.cfg.MaxInFlight) {
		s.inFlight.Add(-1)
		writeErrorAs(w, d, &requestError{status: http.StatusTooManyRequests, code: "queue_full",
			msg: fmt.Sprintf("the server is busy: %d requests are being generated or waiting (serve --max-queue); retry later (see %s)", s.cfg.MaxInFlight, sections.Anchor(sections.Server))})
		return
	}
	defer s.inFlight.Add(-1)
	if s.admitted != nil {
		s.admitted()
	}
	req, tr, err := s.prepare(w, r, d)
	if err != nil {
		writeErrorAs(w, d, err.(*requestError))
		return
	}
	g := &generation{s: s, d: d, req: req, text: tr, id: newID(d.idPrefix()), created: time.Now().Unix(), start: time.Now()}
	// n choices: as many sequences, each with its own seed (the request's plus its index), constraint and
	// health checks (residual stream, logits, output text), warning once per kind with the request's id.
	for i := range max(req.n, 1) {
		t := tr
		t.Sampling.Seed += uint64(i)
		t.Monitor = guard.NewMonitor(guard.MonitorOptions{Strict: s.cfg.Strict, Logger: s.cfg.Logger.With("request_id", g.id)})
		if i > 0 && req.schema != nil {
			c, err := s.cfg.Engine.JSONConstraint(req.schema)
			if err != nil {
				writeErrorAs(w, d, engineError(req, err))
				return
			}
			t.Constraint = c
		}
		g.texts = append(g.texts, t)
	}
	g.text = g.texts[0]
	if req.stream {
		g.stream(w, r)
	} else {
		g.complete(w, r)
	}
}

// prepare reads, parses and checks a request, and makes the engine's request of it.
func (s *Server) prepare(w http.ResponseWriter, r *http.Request, d dialect) (*request, engine.TextRequest, error) {
	if s.reading != nil {
		s.reading()
	}
	body, err := s.readBody(w, r)
	if err != nil {
		return nil, engine.TextRequest{}, err
	}
	req, err := d.parse(body, s.cfg.MaxTokens)
	if err != nil {
		return nil, engine.TextRequest{}, err
	}
	if !s.knownModel(req.model) {
		return nil, engine.TextRequest{}, s.unknownModel(req.model)
	}
	tr, err := s.textRequest(req)
	if err != nil {
		return nil, engine.TextRequest{}, err
	}
	return req, tr, nil
}

// textRequest turns a parsed request into the engine's: the prompt tokenized, sampling defaults from the
// model's generation_config.json, a random seed unless one is given, max_tokens bounded by the context.
func (s *Server) textRequest(req *request) (engine.TextRequest, error) {
	e := s.cfg.Engine
	ids := req.ids
	if ids == nil {
		var err error
		if req.toolChoice != "" && req.toolChoice != "none" {
			ids, err = e.EncodeChat(req.messages, map[string]any{"tools": req.toolsVar})
		} else {
			ids, err = e.EncodePrompt(req.prompt, req.messages)
		}
		if err != nil {
			return engine.TextRequest{}, engineError(req, err)
		}
	}
	sm := e.DefaultSampling()
	setIf(&sm.Temperature, req.temperature)
	if req.topP != nil {
		sm.TopP = engine.ExplicitTopP(*req.topP)
	}
	setIf(&sm.TopK, req.topK)
	setIf(&sm.RepetitionPenalty, req.repetition)
	setIf(&sm.PresencePenalty, req.presence)
	setIf(&sm.FrequencyPenalty, req.frequency)
	setIf(&sm.MinP, req.minP)
	if req.logitBias != nil {
		sm.LogitBias = req.logitBias
	}
	if req.seed != nil {
		sm.Seed = *req.seed
	} else {
		var b [8]byte
		rand.Read(b[:])
		sm.Seed = binary.LittleEndian.Uint64(b[:])
	}
	maxNew := req.maxTokens
	if maxNew == 0 {
		maxNew = req.defaultTokens
	}
	if maxNew == 0 {
		maxNew = min(s.cfg.MaxTokens, e.ContextLength()-len(ids))
	}
	tr := engine.TextRequest{PromptIDs: ids, MaxNewTokens: maxNew, Sampling: sm, Stop: req.stop,
		Logprobs: req.logprobs, TopLogprobs: req.topLogprobs}
	if req.schema != nil {
		c, err := e.JSONConstraint(req.schema)
		if err != nil {
			return tr, engineError(req, err)
		}
		tr.Constraint = c
	}
	if maxNew < 1 {
		return tr, badField(req.promptField(), "the prompt's %d tokens fill the model's context of %d positions", len(ids), e.ContextLength())
	}
	return tr, nil
}

func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// engineError maps an engine error about req: a refused request is 400 naming req's field at fault, anything
// else 500.
func engineError(req *request, err error) *requestError {
	var re *engine.RequestError
	if errors.As(err, &re) {
		return &requestError{status: http.StatusBadRequest, param: req.param(re.Field), msg: err.Error()}
	}
	return &requestError{status: http.StatusInternalServerError, msg: err.Error()}
}

// generation is one request being answered.
type generation struct {
	s       *Server
	d       dialect
	req     *request
	text    engine.TextRequest   // the first choice's
	texts   []engine.TextRequest // every choice's
	id      string
	created int64
	start   time.Time
	first   time.Time // first token
}

// run generates every choice, their sequences together in the batch loop, passing every chunk to onChunk with
// its choice's index (on the engine's goroutine: it must not block). It returns the results, or the first
// error to answer with (which ends the other choices).
func (g *generation) run(parent context.Context, onChunk func(int, engine.TextChunk)) ([]*engine.TextResult, *requestError) {
	results := make([]*engine.TextResult, len(g.texts))
	errs := make([]error, len(g.texts))
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	var wg sync.WaitGroup
	var mu sync.Mutex // the choices' callbacks come from one goroutine, but results and first are shared
	for i, t := range g.texts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := g.s.cfg.Engine.GenerateText(ctx, t, func(c engine.TextChunk) error {
				mu.Lock()
				if c.Token != nil && g.first.IsZero() {
					g.first = time.Now()
				}
				mu.Unlock()
				if g.s.token != nil {
					g.s.token()
				}
				onChunk(i, c)
				return nil
			})
			mu.Lock()
			g.s.metrics.generation(res, g.start, g.first, t.Monitor.Problems())
			mu.Unlock()
			results[i], errs[i] = res, err
			if err != nil {
				cancel(err) // ends the other choices
			}
		}()
	}
	wg.Wait()
	// The error to answer with: a choice's own, rather than the cancellation it caused in the others.
	var first error
	for _, err := range errs {
		caused := errors.Is(err, context.Canceled) && parent.Err() == nil
		if err != nil && (first == nil || errors.Is(first, context.Canceled) && parent.Err() == nil && !caused) {
			first = err
		}
	}
	if first == nil {
		return results, nil
	}
	return results, g.failure(parent, first)
}

// failure is the error to answer with for a generation error err (ctx: the request's).
func (g *generation) failure(ctx context.Context, err error) *requestError {
	var problem *guard.Problem
	switch {
	case cancelled(ctx, err) && errors.Is(context.Cause(ctx), errShuttingDown):
		return &requestError{status: http.StatusServiceUnavailable, msg: "the request was cancelled: the server is shutting down", code: "shutting_down"}
	case cancelled(ctx, err):
		// The client left: no one reads this answer, and it is no failure of the server's (counted as 499).
		return &requestError{status: StatusClientClosedRequest, msg: "the request was cancelled: the client closed the connection", code: "client_closed_request"}
	case errors.Is(err, engine.ErrClosed):
		return &requestError{status: http.StatusServiceUnavailable, msg: "the server is shutting down", code: "shutting_down"}
	case errors.As(err, &problem):
		g.s.cfg.Logger.Error("generation stopped by a health check", "request_id", g.id, "kind", string(problem.Kind), "err", err)
		return &requestError{status: http.StatusInternalServerError, code: "health_check_failed",
			msg: "generation stopped by a health check: " + err.Error()}
	}
	return engineError(g.req, err)
}

// complete answers a request in one JSON body.
func (g *generation) complete(w http.ResponseWriter, r *http.Request) {
	tokens := make([][]*engine.TextToken, len(g.texts))
	res, rerr := g.run(r.Context(), func(i int, c engine.TextChunk) {
		if g.text.Logprobs {
			tokens[i] = append(tokens[i], c.Tokens...)
		}
	})
	if rerr != nil {
		writeErrorAs(w, g.d, rerr)
		return
	}
	writeJSON(w, http.StatusOK, g.d.answer(g, res, tokens))
}

// stream answers a request with a stream of events (server-sent events, or JSON lines): the dialect's events
// for every piece of text as it is generated, then its closing events, or its error event when the generation
// fails once the stream has begun. Nothing is sent before the first text, so a request failing before it gets a
// plain error response.
func (g *generation) stream(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	// The engine calls back on its own goroutine, which must not wait for this client: chunks go through a
	// channel with room for all of them (one per token, and the last).
	type indexed struct {
		i int
		c engine.TextChunk
	}
	chunks := make(chan indexed, len(g.texts)*(g.text.MaxNewTokens+2))
	type outcome struct {
		res  []*engine.TextResult
		rerr *requestError
	}
	done := make(chan outcome, 1)
	go func() {
		res, rerr := g.run(ctx, func(i int, c engine.TextChunk) { chunks <- indexed{i, c} })
		close(chunks)
		done <- outcome{res, rerr}
	}()
	ew := g.d.events(g)
	sw := &streamWriter{w: w, rc: http.NewResponseController(w), ndjson: ew.ndjson()}
	for c := range chunks {
		if evs := ew.chunk(c.i, c.c); len(evs) > 0 && !sw.failed {
			sw.send(ew.open, evs)
		}
	}
	out := <-done
	if sw.failed || out.rerr != nil && out.rerr.status == StatusClientClosedRequest {
		// The client left mid-stream: counted as 499, as an answer not streamed is, though 200 was sent.
		countAs(w, StatusClientClosedRequest)
	}
	switch {
	case sw.failed:
	case out.rerr != nil && !sw.started:
		writeErrorAs(w, g.d, out.rerr) // nothing sent yet: a plain error response
	case out.rerr != nil:
		sw.send(ew.open, ew.fail(out.rerr))
	default:
		sw.send(ew.open, ew.end(out.res))
	}
}

// streamWriter writes a stream's events, starting the response (headers, the dialect's opening events) with
// the first, and remembering a client gone.
type streamWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	ndjson  bool
	started bool
	failed  bool // the client is gone: write nothing more
}

func (sw *streamWriter) send(open func() []event, evs []event) {
	if !sw.started {
		sw.started = true
		h := sw.w.Header()
		if sw.ndjson {
			h.Set("Content-Type", "application/x-ndjson")
		} else {
			h.Set("Content-Type", "text/event-stream")
			h.Set("Cache-Control", "no-cache")
		}
		h.Set("X-Accel-Buffering", "no")
		sw.w.WriteHeader(http.StatusOK)
		evs = append(open(), evs...)
	}
	for _, ev := range evs {
		if writeEvent(sw.w, sw.ndjson, ev) != nil {
			sw.failed = true
			return
		}
	}
	if sw.rc.Flush() != nil {
		sw.failed = true
	}
}
