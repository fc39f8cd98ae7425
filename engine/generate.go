package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/profiler"
)

// Request is one generation.
type Request struct {
	// PromptIDs are the prompt's token ids (with BOS when the model expects it).
	PromptIDs []int
	// MaxNewTokens bounds the generated tokens; 0 generates until the context is full.
	MaxNewTokens int
	Sampling     Sampling
	// StopIDs end generation when produced; nil uses the model's eos_token_id (generation_config.json, else
	// config.json).
	StopIDs []int
	// PrefillChunk feeds the prompt in chunks of this many tokens, one forward pass each; 0 prefills the whole
	// prompt in one pass per layer load.
	PrefillChunk int
	// Logprobs reports the log-probability of every generated token (Token.Logprob); TopLogprobs (at most
	// MaxTopLogprobs) reports that many most likely tokens of each step too (Token.TopLogprobs).
	Logprobs    bool
	TopLogprobs int
	// Monitor, when set, checks this request's residual stream after every decoder layer and its logits at every
	// step (guard.Monitor.CheckActivations, CheckLogits), instead of Options.Monitor: give each concurrent request
	// its own (a Monitor follows one sequence). In strict mode a problem ends the request with its error. Every
	// health problem that ends a request (NaN logits always, monitor or not) is an error wrapping a
	// *guard.Problem, which names the problem's TROUBLESHOOTING.md section.
	Monitor *guard.Monitor
	// Session, when set, keeps the sequence's keys and values in the engine after it ends, and a later request
	// of the same Session whose prompt starts with the ids already computed (a chat's next turn) computes only
	// the rest. One request at a time per Session.
	Session *Session
	// DraftTokens bounds the draft tokens each pass verifies for this request (speculative decoding, engine
	// opened with Options.Draft): 0 takes Options.DraftTokens, a negative value turns drafting off. At most
	// MaxDraftTokens.
	DraftTokens int
	// Constraint, when set, restricts the tokens the sequence may generate (structured output: the grammar
	// package's JSON schemas): its Allow masks the logits of each step before sampling, and before the
	// verification of a draft token too, so that speculative decoding keeps the constrained distribution; its
	// Accept takes the token chosen. One per request: it follows one sequence.
	Constraint Constraint
}

// Constraint restricts a sequence's tokens. Allow sets to -Inf the logits of the tokens that may not come
// next, given the ids that end the sequence (stop: allowed only where the constrained text may end); Accept
// advances by the token chosen, an error ending the sequence with it.
type Constraint interface {
	Allow(logits []float32, stop []int)
	Accept(id int) error
}

// MaxDraftTokens bounds Request.DraftTokens and Options.DraftTokens.
const MaxDraftTokens = 32

// MaxTopLogprobs bounds Request.TopLogprobs.
const MaxTopLogprobs = 20

// Token is one generated token, passed to the callback as soon as it is chosen.
type Token struct {
	ID   int
	Step int // 1 for the first generated token
	// Logprob is ln p(ID) in the model's distribution at this step: the log-softmax of the logits, before the
	// repetition penalty, temperature, top-k and top-p (Request.Logprobs; else 0).
	Logprob float64
	// TopLogprobs are the Request.TopLogprobs most likely tokens of the step by that distribution, most likely
	// first (ties: the lower id first).
	TopLogprobs []TokenLogprob
}

// TokenLogprob is a token id and its log-probability.
type TokenLogprob struct {
	ID      int
	Logprob float64
}

// Stop reasons.
const (
	StopEOS          = "eos"
	StopMaxNewTokens = "max_new_tokens"
	StopContext      = "context"
	// StopCaller: the onToken callback returned ErrStopped.
	StopCaller = "stopped"
	// StopCancelled: the request's context ended it (the result so far comes back with the context's error).
	StopCancelled = "cancelled"
	// StopError: an error ended it (returned with the result so far).
	StopError = "error"
)

// Result is a finished generation.
type Result struct {
	PromptIDs    []int
	GeneratedIDs []int // including the stop token when one ended generation
	StopReason   string
	// CachedPromptTokens is how many prompt tokens were not computed again: their keys and values were still in
	// the Request's Session.
	CachedPromptTokens int
	// Passes is the forward passes of the model that computed the sequence, its prompt's counted as one: with
	// speculative decoding, fewer than the tokens generated.
	Passes int
	// Draft counts the draft tokens proposed to the sequence's passes and those accepted.
	Draft   DraftStats
	Timings Timings
}

// DraftStats are a sequence's speculative decoding counts.
type DraftStats struct {
	Proposed int `json:"proposed"`
	Accepted int `json:"accepted"`
}

// Timings of a generation. TTFT counts from the request's submission, so it includes any wait in the engine's
// queue; Prefill runs from the sequence joining the batch to its first token's logits; decode covers the rest.
type Timings struct {
	TTFT                time.Duration // submission → first token chosen
	Queued              time.Duration // submission → joining the batch
	Prefill             time.Duration
	Decode              time.Duration
	Total               time.Duration
	PrefillTokensPerSec float64 // prompt tokens computed (not CachedPromptTokens) per second of prefill
	DecodeTokensPerSec  float64 // generated tokens after the first, per second of decode
}

// ErrStopped can be returned by an onToken callback to end generation early without an error.
var ErrStopped = errors.New("generation stopped by the caller")

// ErrClosed is returned for requests made to, or still waiting in, a closed Engine.
var ErrClosed = errors.New("engine: closed")

// Generate continues req.PromptIDs, calling onToken (which may be nil) for every generated token.
//
// Concurrent calls share the engine's batch loop (continuous batching, loop.go): a request joins the running
// batch at the next step and leaves when it ends, so N concurrent requests cost about one pass over the layers
// per step, not N. A sequence's greedy result does not depend on the others computed beside it. onToken is
// called from the batch loop's goroutine, one call at a time across all requests: it should return quickly,
// since every sequence of the batch waits for it; returning ErrStopped ends this sequence, another error ends
// it with that error.
//
// When ctx ends the request (waiting or running), Generate returns the result so far (StopReason "cancelled")
// with ctx's error; after another error it returns the result so far too, except for a request refused before
// any work (nil).
func (e *Engine) Generate(ctx context.Context, req Request, onToken func(Token) error) (*Result, error) {
	s, err := e.newSequence(req)
	if err != nil {
		return nil, prefixed("engine: ", err)
	}
	j := newJob(ctx, s, req.Session, onToken)
	if err := e.batch.submit(j); err != nil {
		return nil, err
	}
	<-j.done
	return j.seq.res, j.err
}

// GenerateBatch generates every request together (throughput mode): each load of a unit's weights serves all
// the sequences, each with its own cache row, positions, sampler and stop conditions. The requests join the
// batch loop together (Generate; beyond Options.MaxBatch they wait and join as others end); a sequence that stops
// drops out of the following steps. onToken (which may be nil) receives each generated token with its request's
// index, from one goroutine; returning ErrStopped ends that sequence only, another error ends the whole batch
// with it. Results are in request order, with the first error of any request.
//
// Greedy results are the same as generating each request alone: every step computes each sequence's rows
// exactly as a batch of one would.
func (e *Engine) GenerateBatch(ctx context.Context, reqs []Request, onToken func(seq int, t Token) error) ([]*Result, error) {
	results := make([]*Result, len(reqs))
	var first error
	if err := e.GenerateEach(ctx, reqs, onToken, func(i int, res *Result, err error) error {
		results[i] = res
		if err != nil && first == nil {
			first = err
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return results, first
}

// GenerateEach is GenerateBatch for any number of requests, each result handed over as soon as it is known: the
// requests are submitted together, in order, and join the batch loop as room allows (Options.MaxBatch: a request
// joins as soon as another ends), and onResult receives each request's result and error in request order, as
// soon as that request and every one before it have ended (on the calling goroutine; a request that ended early
// waits for those before it). onToken is as in GenerateBatch.
//
// It returns nil once every request went to onResult (whatever their errors); else the error that refused a
// request before any work (a *RequestError naming its index), or the first error onResult returned, which ends
// the requests still running and stops the delivery.
func (e *Engine) GenerateEach(ctx context.Context, reqs []Request, onToken func(seq int, t Token) error, onResult func(seq int, res *Result, err error) error) error {
	if len(reqs) == 0 {
		return errors.New("engine: empty batch")
	}
	seqs := make([]*sequence, len(reqs))
	for i, req := range reqs {
		s, err := e.newSequence(req)
		if err != nil {
			if len(reqs) > 1 {
				return prefixed(fmt.Sprintf("engine: request %d: ", i), err)
			}
			return prefixed("engine: ", err)
		}
		seqs[i] = s
	}
	gctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make([]*job, len(reqs))
	for i, s := range seqs {
		var cb func(Token) error
		if onToken != nil {
			cb = func(t Token) error {
				err := onToken(i, t)
				if err != nil && !errors.Is(err, ErrStopped) {
					cancel(err) // ends the other sequences of the batch
				}
				return err
			}
		}
		jobs[i] = newJob(gctx, s, reqs[i].Session, cb)
	}
	if err := e.batch.submit(jobs...); err != nil {
		return err
	}
	var stop error
	for i, j := range jobs {
		<-j.done
		if stop != nil || onResult == nil {
			continue
		}
		err := j.err
		if cause := context.Cause(gctx); err != nil && cause != nil && ctx.Err() == nil && !errors.Is(cause, context.Canceled) {
			err = cause // a callback's error, not the cancellation it caused
		}
		if stop = onResult(i, j.seq.res, err); stop != nil {
			cancel(stop)
		}
	}
	return stop
}

// CheckRequest returns the error Generate would refuse req with before any work (empty prompt, token ids
// outside the vocabulary, context overflow, bad sampling parameters), or nil.
func (e *Engine) CheckRequest(req Request) error {
	_, err := e.newSequence(req)
	return err
}

// sequence is one request's state in the batch loop.
type sequence struct {
	maxNew    int // resolved: 0 became the room left in the context
	untilFull bool
	stop      []int
	chunk     int // prompt tokens per prefill pass
	fed       int // prompt tokens in the cache so far
	// tiledPrompt: the prompt brings kernels.PromptTileRows new tokens or more, so every pass of it (each
	// chunk, however short) takes the tiled quantized products, as one pass over it would (hostGroups).
	tiledPrompt bool
	sm          *sampler
	draftTokens int            // the most draft tokens a pass verifies (0: no drafting)
	draftLeaves int            // the most leaves (second choices) a draft tree adds (Options.DraftLeaves)
	draft       draftTree      // the draft the next pass verifies, after the last generated token
	monitor     *guard.Monitor // Request.Monitor, else Options.Monitor; may be nil
	logprobs    bool
	topLogprobs int
	constraint  Constraint
	masked      []float32 // the logits the constraint masked
	history     []int     // prompt and generated ids, for the repetition penalty
	logits      []float32
	joined      time.Time // into the batch
	prefilled   time.Time // the prompt's last pass ended
	decodeStart time.Time // the first token was chosen
	res         *Result
}

// prefixed is the *RequestError of a refusal err (a *RequestError keeps its Field), its message prefixed.
func prefixed(prefix string, err error) *RequestError {
	field := ""
	var re *RequestError
	if errors.As(err, &re) {
		field = re.Field
	}
	return &RequestError{Err: fmt.Errorf("%s%w", prefix, err), Field: field}
}

// newSequence validates req against the model's context and prepares its state. Its refusals are
// *RequestError naming the field at fault.
func (e *Engine) newSequence(req Request) (*sequence, error) {
	if err := e.checkIDs(req.PromptIDs); err != nil {
		return nil, refuse(FieldPrompt, err)
	}
	n := len(req.PromptIDs)
	maxPos := e.plan.Context
	maxNew := req.MaxNewTokens
	switch {
	case maxNew < 0:
		return nil, refuse(FieldMaxNewTokens, fmt.Errorf("max new tokens must be ≥ 0, got %d", maxNew))
	case n >= maxPos:
		return nil, refuse(FieldPrompt, fmt.Errorf("the prompt's %d tokens leave no room in %s", n, e.contextName()))
	case maxNew == 0:
		maxNew = maxPos - n
	case n+maxNew > maxPos:
		return nil, refuse(FieldMaxNewTokens, fmt.Errorf("prompt (%d tokens) + max new tokens (%d) = %d exceeds %s", n, maxNew, n+maxNew, e.contextName()))
	}
	if req.TopLogprobs < 0 || req.TopLogprobs > MaxTopLogprobs {
		return nil, refuse(FieldTopLogprobs, fmt.Errorf("top logprobs must be in [0, %d], got %d", MaxTopLogprobs, req.TopLogprobs))
	}
	sm, err := newSampler(req.Sampling)
	if err != nil {
		return nil, refuse(FieldSampling, err)
	}
	if err := req.Sampling.checkVocab(e.cfg.VocabSize); err != nil {
		return nil, refuse(FieldLogitBias, err)
	}
	sm.prompt = len(req.PromptIDs)
	s := &sequence{maxNew: maxNew, untilFull: req.MaxNewTokens == 0, stop: req.StopIDs, chunk: req.PrefillChunk, sm: sm, monitor: req.Monitor,
		logprobs: req.Logprobs || req.TopLogprobs > 0, topLogprobs: req.TopLogprobs, constraint: req.Constraint,
		history: slices.Clone(req.PromptIDs), res: &Result{PromptIDs: slices.Clone(req.PromptIDs)}}
	if s.stop == nil {
		s.stop = checkpoint.EOSTokenIDs(e.cfg, e.gen)
	}
	if s.monitor == nil {
		s.monitor = e.opts.Monitor
	}
	if s.chunk <= 0 || s.chunk > n {
		s.chunk = n
	}
	if s.draftTokens, err = e.draftTokens(req.DraftTokens); err != nil {
		return nil, refuse(FieldDraftTokens, err)
	}
	return s, nil
}

// draftTokens resolves Request.DraftTokens.
func (e *Engine) draftTokens(n int) (int, error) {
	switch {
	case n < 0:
		return 0, nil
	case n > MaxDraftTokens:
		return 0, fmt.Errorf("draft tokens must be at most %d, got %d", MaxDraftTokens, n)
	case n > 0 && e.batch.draft == nil:
		return 0, fmt.Errorf("draft tokens (%d) asked for, but the engine drafts nothing (open it with a draft: --draft MODEL or ngram)", n)
	case n == 0 && e.batch.draft != nil:
		return e.opts.DraftTokens, nil
	}
	return n, nil
}

// checkIDs refuses an empty prompt and token ids outside the vocabulary: the checks Generate and Logits share.
func (e *Engine) checkIDs(ids []int) error {
	if len(ids) == 0 {
		return errors.New("empty prompt")
	}
	for i, id := range ids {
		if id < 0 || id >= e.cfg.VocabSize {
			return fmt.Errorf("prompt token id %d at position %d is outside the vocabulary (vocab_size %d)", id, i, e.cfg.VocabSize)
		}
	}
	return nil
}

// contextName describes the model's context for errors: the positions it serves and where that comes from.
func (e *Engine) contextName() string {
	if e.plan.Context != e.cfg.MaxPositionEmbeddings {
		return fmt.Sprintf("the model's context of %d positions (max_position_embeddings %d extended by rope scaling)", e.plan.Context, e.cfg.MaxPositionEmbeddings)
	}
	return fmt.Sprintf("the model's context of %d positions (max_position_embeddings)", e.plan.Context)
}

// checkActivations hands the residual stream's magnitudes after each layer of the sequence's last pass
// (health, from forward) to its monitor, which checks them against the range of the compute dtype.
func (s *sequence) checkActivations(health []float32, compute checkpoint.DType) error {
	if s.monitor == nil {
		return nil
	}
	step := len(s.res.GeneratedIDs)
	if err := s.monitor.CheckActivations(step, health, compute); err != nil {
		return fmt.Errorf("engine: step %d: %w", step, err)
	}
	return nil
}

// choose samples the sequence's token of this step from its last logits, reports it to onToken and sets the
// stop reason when the sequence ends with it. With draft candidates xs it verifies them instead (sampler.verify)
// and reports which the token chosen is (-1: none). Logits holding NaN or ±Inf end the sequence with an error (a
// *guard.Problem) instead: whatever a sampler made of them would be garbage. The sampling is profiled in prof.
func (s *sequence) choose(onToken func(Token) error, prof *profiler.Profiler, xs []int) (which int, err error) {
	which = -1
	step := len(s.res.GeneratedIDs) + 1
	if s.monitor != nil {
		if err := s.monitor.CheckLogits(step-1, s.logits); err != nil {
			return which, fmt.Errorf("engine: step %d: %w", step-1, err)
		}
	}
	if guard.NonFinite(s.logits) {
		return which, fmt.Errorf("engine: step %d: %w", step-1, &guard.Problem{Kind: guard.KindNaN, Step: step - 1, Section: sections.NaN,
			Message: "the logits hold NaN or ±Inf, so no token can be chosen"})
	}
	span := prof.Begin(profiler.Sample, step-1, -1)
	tok := Token{Step: step}
	logits := s.logits
	if s.constraint != nil {
		s.masked = append(s.masked[:0], s.logits...)
		logits = s.masked
		s.constraint.Allow(logits, s.stop)
	}
	if xs != nil {
		tok.ID, which = s.sm.verify(logits, s.history, xs)
	} else {
		tok.ID = s.sm.next(logits, s.history)
	}
	if s.constraint != nil {
		if err := s.constraint.Accept(tok.ID); err != nil {
			span.End(0)
			return which, fmt.Errorf("engine: step %d: %w", step-1, err)
		}
	}
	if s.logprobs {
		tok.Logprob, tok.TopLogprobs = logprobs(s.logits, tok.ID, s.topLogprobs)
	}
	span.End(0)
	s.history = append(s.history, tok.ID)
	s.res.GeneratedIDs = append(s.res.GeneratedIDs, tok.ID)
	if onToken != nil {
		if err := onToken(tok); err != nil {
			if !errors.Is(err, ErrStopped) {
				return which, err
			}
			s.res.StopReason = StopCaller
			return which, nil
		}
	}
	switch {
	case slices.Contains(s.stop, tok.ID):
		s.res.StopReason = StopEOS
	case step == s.maxNew && s.untilFull:
		s.res.StopReason = StopContext
	case step == s.maxNew:
		s.res.StopReason = StopMaxNewTokens
	}
	return which, nil
}

// logprobs returns ln p(id) under softmax(logits) and the top most likely tokens (most likely first, ties by
// lower id), computed in float64.
func logprobs(logits []float32, id, top int) (float64, []TokenLogprob) {
	lse := kernels.LogSumExp(logits)
	var best []TokenLogprob
	for i, l := range logits {
		if top == 0 {
			break
		}
		lp := float64(l) - lse
		if len(best) == top && lp <= best[top-1].Logprob {
			continue
		}
		at := len(best)
		for at > 0 && best[at-1].Logprob < lp {
			at--
		}
		best = slices.Insert(best, at, TokenLogprob{ID: i, Logprob: lp})
		if len(best) > top {
			best = best[:top]
		}
	}
	return float64(logits[id]) - lse, best
}

// finish fills the timings of a sequence that just stopped, submitted at submitted.
func (s *sequence) finish(submitted time.Time) {
	t := &s.res.Timings
	now := time.Now()
	t.Queued = s.joined.Sub(submitted)
	t.Total = now.Sub(submitted)
	if s.decodeStart.IsZero() { // no token was chosen
		return
	}
	t.Prefill = s.prefilled.Sub(s.joined)
	t.Decode = now.Sub(s.decodeStart)
	if computed := len(s.res.PromptIDs) - s.res.CachedPromptTokens; computed > 0 && t.Prefill > 0 {
		t.PrefillTokensPerSec = float64(computed) / t.Prefill.Seconds()
	}
	if k := len(s.res.GeneratedIDs) - 1; k > 0 && t.Decode > 0 {
		t.DecodeTokensPerSec = float64(k) / t.Decode.Seconds()
	}
}
