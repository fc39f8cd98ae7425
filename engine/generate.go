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

// Generate continues req.PromptIDs, calling onToken (which may be nil) for every generated token.
func (e *Engine) Generate(ctx context.Context, req Request, onToken func(Token) error) (*Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, errors.New("engine: closed")
	}
	start := time.Now()
	n := len(req.PromptIDs)
	if n == 0 {
		return nil, errors.New("engine: empty prompt")
	}
	maxPos := e.cfg.MaxPositionEmbeddings
	maxNew := req.MaxNewTokens
	switch {
	case maxNew < 0:
		return nil, fmt.Errorf("engine: max new tokens must be ≥ 0, got %d", maxNew)
	case n >= maxPos:
		return nil, fmt.Errorf("engine: the prompt's %d tokens leave no room in the model's context of %d positions (max_position_embeddings)", n, maxPos)
	case maxNew == 0:
		maxNew = maxPos - n
	case n+maxNew > maxPos:
		return nil, fmt.Errorf("engine: prompt (%d tokens) + max new tokens (%d) = %d exceeds the model's context of %d positions (max_position_embeddings)", n, maxNew, n+maxNew, maxPos)
	}
	// Qwen2 configs carry a sliding_window that applies only with use_sliding_window, which they leave off.
	if w := e.cfg.SlidingWindow; w != nil && *w > 0 && n+maxNew > *w && e.cfg.ModelType != "qwen2" {
		return nil, fmt.Errorf("engine: prompt + max new tokens = %d positions exceed config.json sliding_window (%d); sliding-window attention is not implemented, so positions past the window would attend too far back", n+maxNew, *w)
	}
	sm, err := newSampler(req.Sampling)
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	stop := req.StopIDs
	if stop == nil {
		stop = checkpoint.EOSTokenIDs(e.cfg, e.gen)
	}
	chunk := req.PrefillChunk
	if chunk <= 0 || chunk > n {
		chunk = n
	}
	prefillPasses := (n + chunk - 1) / chunk

	// The last generated token is never fed back, so the cache needs n+maxNew-1 positions.
	kv, err := e.kvStore(bucket(n + maxNew - 1))
	if err != nil {
		return nil, err
	}
	e.step.Store(0)
	st := e.newStream(ctx, prefillPasses+maxNew-1)
	if st != nil {
		defer st.stop()
	}

	var logits [][]float32
	for i := 0; i < n; i += chunk {
		if logits, err = e.pass(ctx, st, kv, req.PromptIDs[i:min(i+chunk, n)], false); err != nil {
			return nil, err
		}
	}
	res := &Result{PromptIDs: slices.Clone(req.PromptIDs)}
	res.Timings.Prefill = time.Since(start)
	history := slices.Clone(req.PromptIDs)
	decodeStart := time.Now()
	for step := 1; ; step++ {
		if e.opts.Monitor != nil {
			if err := e.opts.Monitor.CheckLogits(step-1, logits[0]); err != nil {
				return nil, fmt.Errorf("engine: step %d: %w", step-1, err)
			}
		}
		span := e.prof.Begin(profiler.Sample, step-1, -1)
		id := sm.next(logits[0], history)
		span.End(0)
		history = append(history, id)
		res.GeneratedIDs = append(res.GeneratedIDs, id)
		if step == 1 {
			res.Timings.TTFT = time.Since(start)
			decodeStart = time.Now()
		}
		if onToken != nil {
			if err := onToken(Token{ID: id, Step: step}); err != nil {
				if errors.Is(err, ErrStopped) {
					res.StopReason = StopCaller
					break
				}
				return nil, err
			}
		}
		if slices.Contains(stop, id) {
			res.StopReason = StopEOS
			break
		}
		if step == maxNew {
			res.StopReason = StopMaxNewTokens
			if req.MaxNewTokens == 0 {
				res.StopReason = StopContext
			}
			break
		}
		e.step.Store(int64(step))
		if logits, err = e.pass(ctx, st, kv, []int{id}, false); err != nil {
			return nil, err
		}
	}
	t := &res.Timings
	t.Decode = time.Since(decodeStart)
	t.Total = time.Since(start)
	t.PrefillTokensPerSec = float64(n) / t.Prefill.Seconds()
	if k := len(res.GeneratedIDs) - 1; k > 0 {
		t.DecodeTokensPerSec = float64(k) / t.Decode.Seconds()
	}
	return res, nil
}
