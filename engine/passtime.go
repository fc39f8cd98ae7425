package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// PassTime measures forward passes over rows new positions of one sequence, as a draft's verification computes
// them (every position's logits, decode arithmetic): prompt is computed first, then each of runs passes feeds
// rows more ids (synthetic: the prompt's, cycled) and the cache forgets them again. It returns each pass's wall
// time: the figure that says what verifying a draft of rows-1 tokens costs against a one-token decode step
// (rows 1). It runs between the batch loop's steps, as Logits does.
func (e *Engine) PassTime(ctx context.Context, prompt []int, rows, runs int) ([]time.Duration, error) {
	if rows < 1 || rows > MaxDraftTokens+1 || runs < 1 {
		return nil, fmt.Errorf("engine: pass time of %d rows, %d runs: want 1-%d rows and a run at least", rows, runs, MaxDraftTokens+1)
	}
	if rows > 1 && !e.run.onHost(false) {
		return nil, errors.New("engine: timing a pass of several positions needs the host kernels (device cpu without graph decode)")
	}
	if err := e.checkIDs(prompt); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if len(prompt)+rows > e.plan.Context {
		return nil, fmt.Errorf("engine: %d prompt tokens and %d rows exceed %s", len(prompt), rows, e.contextName())
	}
	e.passes.waiting.Add(1)
	e.passes.Lock()
	e.passes.waiting.Add(-1)
	defer e.passes.Unlock()
	if e.passes.closed {
		return nil, ErrClosed
	}
	r := e.run
	kv, err := r.kvStore(len(prompt)+rows, true)
	if err != nil {
		return nil, err
	}
	st := e.store.newStream(ctx, -1, r.graphDecode)
	if st != nil {
		defer st.stop()
	}
	r.setStep(0)
	if _, err := r.forward(ctx, st, kv, []feed{{row: 0, ids: prompt}}, false); err != nil {
		return nil, err
	}
	ids := make([]int, rows)
	for i := range ids {
		ids[i] = prompt[i%len(prompt)]
	}
	held := kv.Len(0)
	times := make([]time.Duration, runs)
	for i := range times {
		r.setStep(1 + i)
		start := time.Now()
		if _, err := r.forward(ctx, st, kv, []feed{{row: 0, ids: ids, every: rows > 1}}, false); err != nil {
			return nil, err
		}
		times[i] = time.Since(start)
		if err := kv.Truncate(0, held); err != nil {
			return nil, err
		}
	}
	return times, nil
}
