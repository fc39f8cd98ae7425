package engine

import "fmt"

// CacheFootprint is the memory one sequence's cache takes at a context length, in bytes: the recurrent layers'
// states (Gated DeltaNet: constant in the length) and the attention layers' keys and values (growing with it, up
// to a sliding window's ring).
type CacheFootprint struct {
	State, KV int64
}

// CacheFootprint allocates the cache of one sequence of positions positions as generation does (the host
// kernels' cache, in Options.KVCache's dtype), writes every element of it so that all of it is resident, as a
// sequence of that length makes it, and returns its arrays' bytes by kind of layer. The cache is freed before
// it returns. Benchmarks measure the process's resident memory around the call.
func (e *Engine) CacheFootprint(positions int) (CacheFootprint, error) {
	if positions <= 0 || positions > e.plan.Context {
		return CacheFootprint{}, fmt.Errorf("engine: cache footprint of %d positions: the model's context is %d", positions, e.plan.Context)
	}
	if err := e.passes.lockBetweenSteps(); err != nil {
		return CacheFootprint{}, err
	}
	defer e.passes.Unlock()
	kv, err := e.run.newKV(e.run.kvConfig(1, positions, true))
	if err != nil {
		return CacheFootprint{}, err
	}
	defer freeKVStore(kv)
	var f CacheFootprint
	for l := range e.plan.Layers {
		s, err := kv.View(l).Layer(0)
		if err != nil {
			return CacheFootprint{}, err
		}
		for _, a := range [][]float32{s.K, s.V} {
			for i := range a {
				a[i] = 1
			}
		}
		for _, a := range [][]uint16{s.K16, s.V16} {
			for i := range a {
				a[i] = 1
			}
		}
		n := 4*int64(len(s.K)+len(s.V)) + 2*int64(len(s.K16)+len(s.V16))
		if e.plan.Layers[l].Recurrent {
			f.State += n
		} else {
			f.KV += n
		}
	}
	return f, nil
}
