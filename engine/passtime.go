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
// a one-token decode step (k 1), the counts interleaved so that a machine's drift affects them alike. Where the
// layers stream, each measured pass follows a pass of its own size (an unmeasured one after another size), as a
// generation's passes follow one another: a streamed pass starts on its predecessor's read-ahead. It runs between
// the batch loop's steps, as Logits does.
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
	pass := func(k int) (time.Duration, error) {
		ids := make([]int, k)
		for j := range ids {
			ids[j] = prompt[j%len(prompt)]
		}
		start := time.Now()
		if _, err := r.forward(ctx, st, kv, []feed{{row: 0, ids: ids, every: k > 1}}, false); err != nil {
			return 0, err
		}
		took := time.Since(start)
		r.handBack() // as the batch loop does once the sequences have chosen
		return took, kv.Truncate(0, held)
	}
	last := 0
	for run := range runs {
		for i, k := range rows {
			r.setStep(1 + run)
			// A streamed pass starts on what the one before it read ahead, and ends reading ahead for the next:
			// a generation's passes are of one size, so a pass after one of another size follows an unmeasured
			// one of its own.
			if st != nil && k != last {
				if _, err := pass(k); err != nil {
					return nil, err
				}
			}
			took, err := pass(k)
			if err != nil {
				return nil, err
			}
			times[i], last = append(times[i], took), k
		}
	}
	return times, nil
}
