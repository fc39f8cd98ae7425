package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// PassTime measures forward passes over new positions of one sequence, as a draft's verification computes them
// (every position's logits, decode arithmetic): prompt is computed once, then runs rounds each feed, for every
// count k of rows in turn, a pass of k more ids (synthetic: the prompt's, cycled), which the cache forgets again.
// It returns each pass's wall time, times[i][run] for rows[i]: what verifying a draft of k-1 tokens costs against
// a one-token decode step (k 1), the counts interleaved so that a machine's drift affects them alike. It runs
// between the batch loop's steps, as Logits does.
func (e *Engine) PassTime(ctx context.Context, prompt []int, rows []int, runs int) ([][]time.Duration, error) {
	most := 0
	for _, k := range rows {
		if k < 1 || k > MaxDraftTokens+1 {
			return nil, fmt.Errorf("engine: pass time of %d rows: want 1-%d", k, MaxDraftTokens+1)
		}
		if k > 1 && !e.run.onHost(false) {
			return nil, errors.New("engine: timing a pass of several positions needs the host kernels (device cpu without graph decode)")
		}
		most = max(most, k)
	}
	if len(rows) == 0 || runs < 1 {
		return nil, fmt.Errorf("engine: pass time of %d row counts, %d runs: want one of each at least", len(rows), runs)
	}
	if err := e.checkIDs(prompt); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if len(prompt)+most > e.plan.Context {
		return nil, fmt.Errorf("engine: %d prompt tokens and %d rows exceed %s", len(prompt), most, e.contextName())
	}
	if err := e.passes.lockBetweenSteps(); err != nil {
		return nil, err
	}
	defer e.passes.Unlock()
	return e.run.passTimes(ctx, e.store, prompt, rows, runs)
}

// passTimes is PassTime's measurement, under the pass lock.
func (r *runner) passTimes(ctx context.Context, store *weightStore, prompt, rows []int, runs int) ([][]time.Duration, error) {
	most := slices.Max(rows)
	kv, err := r.kvStore(len(prompt)+most, true)
	if err != nil {
		return nil, err
	}
	st := store.newStream(ctx, -1, r.graphDecode)
	if st != nil {
		defer st.stop()
	}
	r.setStep(0)
	if _, err := r.forward(ctx, st, kv, []feed{{row: 0, ids: prompt}}, false); err != nil {
		return nil, err
	}
	held := kv.Len(0)
	times := make([][]time.Duration, len(rows))
	for run := range runs {
		for i, k := range rows {
			ids := make([]int, k)
			for j := range ids {
				ids[j] = prompt[j%len(prompt)]
			}
			r.setStep(1 + run)
			start := time.Now()
			if _, err := r.forward(ctx, st, kv, []feed{{row: 0, ids: ids, every: k > 1}}, false); err != nil {
				return nil, err
			}
			times[i] = append(times[i], time.Since(start))
			if err := kv.Truncate(0, held); err != nil {
				return nil, err
			}
		}
	}
	return times, nil
}
