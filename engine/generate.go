package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
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
}

// Token is one generated token, passed to the callback as soon as it is chosen.
type Token struct {
	ID   int
	Step int // 1 for the first generated token
}

// Stop reasons.
const (
	StopEOS          = "eos"
	StopMaxNewTokens = "max_new_tokens"
	StopContext      = "context"
	// StopCaller: the onToken callback returned ErrStopped.
	StopCaller = "stopped"
)

// Result is a finished generation.
type Result struct {
	PromptIDs    []int
	GeneratedIDs []int // including the stop token when one ended generation
	StopReason   string
	Timings      Timings
}

// Timings of a generation. Prefill is the time to the first token's logits; decode covers the rest.
type Timings struct {
	TTFT                time.Duration // start → first token chosen
	Prefill             time.Duration
	Decode              time.Duration
	Total               time.Duration
	PrefillTokensPerSec float64
	DecodeTokensPerSec  float64 // generated tokens after the first, per second of decode
}

// ErrStopped can be returned by an onToken callback to end generation early without an error.
var ErrStopped = errors.New("generation stopped by the caller")

// Generate continues req.PromptIDs, calling onToken (which may be nil) for every generated token. It is
// GenerateBatch with a single request.
func (e *Engine) Generate(ctx context.Context, req Request, onToken func(Token) error) (*Result, error) {
	var cb func(int, Token) error
	if onToken != nil {
		cb = func(_ int, t Token) error { return onToken(t) }
	}
	res, err := e.GenerateBatch(ctx, []Request{req}, cb)
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// GenerateBatch generates every request together (throughput mode): each load of a unit's weights serves all
// the sequences, each with its own cache row, positions, sampler and stop conditions. The prompts are
// prefilled together (padded to the longest), then every decode step feeds the sequences still running; a
// sequence that stops drops out of the following steps. onToken (which may be nil) receives each generated
// token with its request's index; returning ErrStopped ends that sequence only. Results are in request order.
//
// Greedy results are the same as generating each request alone: decode steps compute every sequence's row
// exactly as a batch of one would.
func (e *Engine) GenerateBatch(ctx context.Context, reqs []Request, onToken func(seq int, t Token) error) ([]*Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("engine: closed")
	}
	if len(reqs) == 0 {
		return nil, errors.New("engine: empty batch")
	}
	start := time.Now()
	seqs := make([]*sequence, len(reqs))
	capacity, prefillPasses, decodePasses := 0, 0, 0
	for i, req := range reqs {
		s, err := e.newSequence(req)
		if err != nil {
			if len(reqs) > 1 {
				return nil, fmt.Errorf("engine: request %d: %w", i, err)
			}
			return nil, fmt.Errorf("engine: %w", err)
		}
		seqs[i] = s
		n := len(req.PromptIDs)
		// The last generated token is never fed back, so the cache needs n+maxNew-1 positions.
		capacity = max(capacity, n+s.maxNew-1)
		prefillPasses = max(prefillPasses, (n+s.chunk-1)/s.chunk)
		decodePasses = max(decodePasses, s.maxNew-1)
	}
	kv, err := e.kvStoreBatch(len(seqs), bucket(capacity))
	if err != nil {
		return nil, err
	}
	e.step.Store(0)
	st := e.newStream(ctx, prefillPasses+decodePasses, e.opts.GraphDecode)
	if st != nil {
		defer st.stop()
	}

	// Prefill: each pass feeds the next chunk of every prompt not yet fed; the sequences' rows are their indices.
	var rows []int
	var ids [][]int
	for range prefillPasses {
		rows, ids = rows[:0], ids[:0]
		for i, s := range seqs {
			if n := len(s.res.PromptIDs); s.fed < n {
				rows = append(rows, i)
				ids = append(ids, s.res.PromptIDs[s.fed:min(s.fed+s.chunk, n)])
			}
		}
		logits, err := e.forward(ctx, st, kv, rows, ids, false)
		if err != nil {
			return nil, err
		}
		for j, i := range rows {
			seqs[i].logits = logits[j]
			seqs[i].fed += len(ids[j])
		}
	}
	prefill := time.Since(start)

	// Decode: choose every running sequence's next token, then feed the ones still running in one step.
	for step := 1; ; step++ {
		rows, ids = rows[:0], ids[:0]
		for i, s := range seqs {
			if s.res.StopReason != "" {
				continue
			}
			id, err := e.choose(s, step, i, onToken)
			if err != nil {
				return nil, err
			}
			if step == 1 {
				s.res.Timings.TTFT = time.Since(start)
				s.decodeStart = time.Now()
			}
			if s.res.StopReason != "" {
				s.finish(prefill)
				continue
			}
			rows = append(rows, i)
			ids = append(ids, []int{id})
		}
		if len(rows) == 0 {
			break
		}
		e.step.Store(int64(step))
		logits, err := e.forward(ctx, st, kv, rows, ids, false)
		if err != nil {
			return nil, err
		}
		for j, i := range rows {
			seqs[i].logits = logits[j]
		}
	}
	results := make([]*Result, len(seqs))
	for i, s := range seqs {
		results[i] = s.res
	}
	return results, nil
}

// CheckRequest returns the error Generate would refuse req with before any work (empty prompt, token ids
// outside the vocabulary, context overflow, bad sampling parameters), or nil.
func (e *Engine) CheckRequest(req Request) error {
	_, err := e.newSequence(req)
	return err
}

// sequence is one request's state in GenerateBatch.
type sequence struct {
	maxNew      int // resolved: 0 became the room left in the context
	untilFull   bool
	stop        []int
	chunk       int // prompt tokens per prefill pass
	fed         int // prompt tokens prefilled so far
	sm          *sampler
	history     []int // prompt and generated ids, for the repetition penalty
	logits      []float32
	decodeStart time.Time
	res         *Result
}

// newSequence validates req against the model's context and prepares its state.
func (e *Engine) newSequence(req Request) (*sequence, error) {
	n := len(req.PromptIDs)
	if n == 0 {
		return nil, errors.New("empty prompt")
	}
	for i, id := range req.PromptIDs {
		if id < 0 || id >= e.cfg.VocabSize {
			return nil, fmt.Errorf("prompt token id %d at position %d is outside the vocabulary (vocab_size %d)", id, i, e.cfg.VocabSize)
		}
	}
	maxPos := e.cfg.MaxPositionEmbeddings
	maxNew := req.MaxNewTokens
	switch {
	case maxNew < 0:
		return nil, fmt.Errorf("max new tokens must be ≥ 0, got %d", maxNew)
	case n >= maxPos:
		return nil, fmt.Errorf("the prompt's %d tokens leave no room in the model's context of %d positions (max_position_embeddings)", n, maxPos)
	case maxNew == 0:
		maxNew = maxPos - n
	case n+maxNew > maxPos:
		return nil, fmt.Errorf("prompt (%d tokens) + max new tokens (%d) = %d exceeds the model's context of %d positions (max_position_embeddings)", n, maxNew, n+maxNew, maxPos)
	}
	// Qwen2 configs carry a sliding_window that applies only with use_sliding_window, which they leave off.
	if w := e.cfg.SlidingWindow; w != nil && *w > 0 && n+maxNew > *w && e.cfg.ModelType != "qwen2" {
		return nil, fmt.Errorf("prompt + max new tokens = %d positions exceed config.json sliding_window (%d); sliding-window attention is not implemented, so positions past the window would attend too far back", n+maxNew, *w)
	}
	sm, err := newSampler(req.Sampling)
	if err != nil {
		return nil, err
	}
	s := &sequence{maxNew: maxNew, untilFull: req.MaxNewTokens == 0, stop: req.StopIDs, chunk: req.PrefillChunk, sm: sm,
		history: slices.Clone(req.PromptIDs), res: &Result{PromptIDs: slices.Clone(req.PromptIDs)}}
	if s.stop == nil {
		s.stop = checkpoint.EOSTokenIDs(e.cfg, e.gen)
	}
	if s.chunk <= 0 || s.chunk > n {
		s.chunk = n
	}
	return s, nil
}

// choose samples sequence seq's token of this step from its last logits, reports it to onToken and sets the
// stop reason when the sequence ends with it.
func (e *Engine) choose(s *sequence, step, seq int, onToken func(int, Token) error) (int, error) {
	if e.opts.Monitor != nil {
		if err := e.opts.Monitor.CheckLogits(step-1, s.logits); err != nil {
			return 0, fmt.Errorf("engine: step %d: %w", step-1, err)
		}
	}
	span := e.prof.Begin(profiler.Sample, step-1, -1)
	id := s.sm.next(s.logits, s.history)
	span.End(0)
	s.history = append(s.history, id)
	s.res.GeneratedIDs = append(s.res.GeneratedIDs, id)
	if onToken != nil {
		if err := onToken(seq, Token{ID: id, Step: step}); err != nil {
			if !errors.Is(err, ErrStopped) {
				return 0, err
			}
			s.res.StopReason = StopCaller
			return id, nil
		}
	}
	switch {
	case slices.Contains(s.stop, id):
		s.res.StopReason = StopEOS
	case step == s.maxNew && s.untilFull:
		s.res.StopReason = StopContext
	case step == s.maxNew:
		s.res.StopReason = StopMaxNewTokens
	}
	return id, nil
}

// finish fills the timings of a sequence that just stopped; prefill is the batch's prefill time.
func (s *sequence) finish(prefill time.Duration) {
	t := &s.res.Timings
	t.Prefill = prefill
	t.Decode = time.Since(s.decodeStart)
	t.Total = t.TTFT + t.Decode
	t.PrefillTokensPerSec = float64(len(s.res.PromptIDs)) / prefill.Seconds()
	if k := len(s.res.GeneratedIDs) - 1; k > 0 {
		t.DecodeTokensPerSec = float64(k) / t.Decode.Seconds()
	}
}
