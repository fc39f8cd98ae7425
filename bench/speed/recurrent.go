package main

import (
	"context"
	"fmt"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/bytesize"
)

// Issue 35's memory target: a Gated DeltaNet layer's cache is a state of fixed size, so a hybrid model's
// recurrent layers take the same memory at every context length, where its attention layers' keys and values
// grow with it.

// stateContexts are the context lengths target 20 compares.
var stateContexts = [2]int{1024, 16384}

func recurrentTargets() []*target {
	return []*target{
		{ID: 20, Name: "recurrent state constant in the context", Ratio: fmt.Sprintf("one sequence's recurrent-layer cache bytes at %d positions ÷ at %d (allocated and written as generation makes them)", stateContexts[1], stateContexts[0]), AtMost: true, Threshold: 1},
	}
}

// measureRecurrentState measures target 20 on the model: Engine.CacheFootprint at each context length, with the
// process's peak resident memory around it (VmHWM).
func measureRecurrentState(ctx context.Context, o options, r *report) error {
	t := r.target(20)
	e, err := engine.Open(ctx, o.shards, engine.Options{DType: o.dtype})
	if err != nil {
		return err
	}
	defer e.Close()
	var fs [2]engine.CacheFootprint
	for i, n := range stateContexts {
		if n > e.ContextLength() {
			t.setNotMeasurable(fmt.Sprintf("the model's context is %d positions, less than %d", e.ContextLength(), n))
			return nil
		}
		phase(o.log, fmt.Sprintf("cache of one sequence at %d positions", n))
		releaseMemory()
		peak := resetPeakRSS()
		before := peakRSS()
		if fs[i], err = e.CacheFootprint(n); err != nil {
			return err
		}
		if peak {
			t.raw(fmt.Sprintf("resident memory growth at %d positions", n), float64(peakRSS()-before), "B")
		}
		t.raw(fmt.Sprintf("recurrent states at %d positions", n), float64(fs[i].State), "B")
		t.raw(fmt.Sprintf("attention keys and values at %d positions", n), float64(fs[i].KV), "B")
	}
	if fs[0].State == 0 {
		t.setNotMeasurable("the model has no recurrent layer")
		return nil
	}
	t.judge(float64(fs[1].State) / float64(fs[0].State))
	t.note("the attention layers' keys and values grow %.1f× (%s → %s) over the same lengths",
		float64(fs[1].KV)/float64(fs[0].KV), bytesize.Format(fs[0].KV), bytesize.Format(fs[1].KV))
	return nil
}
