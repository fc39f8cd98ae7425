package engine

import (
	"slices"

	"github.com/layerstream/layerstream/kvcache"
)

// Speculative decoding with recurrent layers. A draft's verification runs the last token and the draft through
// a recurrent layer position after position, leaving its state after the last of them; a rejected suffix must
// leave the state as it was after the last position kept. Rather than keep a copy of the state after every
// position (a state is [value heads, d_k, d_v] per layer: 2 MiB at Qwen3.5's sizes, times the draft's length,
// per row), the pass journals the state before it and each position's inputs to the state — the conv's input
// row, and each value head's normalized key, value, decay and strength: 33 KB per position and layer at
// Qwen3.5-9B's sizes — and going back replays the kept positions from the state before the pass
// (stateJournal.restore): the same operations on the same values as the pass, so the same bits as decode steps
// give.

// stateJournal is the journal of the last host pass that verified drafts, per cache row and recurrent layer. The
// runner owns it; the batch loop restores from it after the pass (batcher.cut). Entries keep their arrays from
// pass to pass.
type stateJournal struct {
	kv   *kvcache.Store
	rows map[int]*rowJournal // by cache row: the rows the last verifying pass verified
	free []*rowJournal       // entries of earlier passes, for reuse
}

// rowJournal is one row's journal: its length before the pass and after it, and each recurrent layer's entry.
type rowJournal struct {
	start, end int
	layers     map[int]*stateEntry
}

// stateEntry is what restores one recurrent layer of one row to its state after any of the pass's positions.
type stateEntry struct {
	t           int       // the pass's positions
	conv, delta []float32 // the states before the pass
	x           []float32 // the conv's inputs [t, channels]
	// The delta rule's inputs: each value head's l2-normed key [t, value heads, d_k], its value [t, value heads,
	// d_v], decay and strength (β) [t, value heads].
	k, v, decay, beta []float32
	nv, dk, dv        int
}

// begin starts the journal of a pass over kv whose verifying feeds are feeds with every set; the journal of the
// previous pass is dropped.
func (j *stateJournal) begin(kv *kvcache.Store, feeds []feed) {
	for row, r := range j.rows {
		j.free = append(j.free, r)
		delete(j.rows, row)
	}
	j.kv = kv
	for _, f := range feeds {
		if !f.every || f.tree != nil {
			continue
		}
		r := &rowJournal{layers: map[int]*stateEntry{}}
		if n := len(j.free); n > 0 {
			r, j.free = j.free[n-1], j.free[:n-1]
		}
		r.start = kv.Len(f.row)
		r.end = r.start + len(f.ids)
		if j.rows == nil {
			j.rows = map[int]*rowJournal{}
		}
		j.rows[f.row] = r
	}
}

// entry returns the entry of layer for cache row, sized for t positions, or nil when the pass does not journal
// the row.
func (j *stateJournal) entry(layer, row, t int) *stateEntry {
	if j == nil {
		return nil
	}
	r := j.rows[row]
	if r == nil {
		return nil
	}
	e := r.layers[layer]
	if e == nil {
		e = &stateEntry{}
		r.layers[layer] = e
	}
	e.t = t
	return e
}

// restore sets every journaled recurrent layer's state of row to that after its first n positions, where the
// last verifying pass over kv journaled the row, the row still holds what that pass left, and n is within it.
// It reports whether it did.
func (j *stateJournal) restore(kv *kvcache.Store, row, n int) bool {
	r := j.rows[row]
	if r == nil || kv != j.kv || kv.Len(row) != r.end || n < r.start || n > r.end {
		return false
	}
	for l, e := range r.layers {
		conv, delta := kv.View(l).State(row)
		e.replay(conv, delta, n-r.start)
	}
	return true
}

// recordConv journals the conv state before the pass (st) and the pass's conv inputs x [t, channels].
func (e *stateEntry) recordConv(st, x []float32) {
	e.conv = append(e.conv[:0], st...)
	e.x = append(e.x[:0], x...)
}

// beginDelta journals the delta rule's state before the pass and sizes its inputs' arrays.
func (e *stateEntry) beginDelta(s []float32, nv, dk, dv int) {
	e.delta = append(e.delta[:0], s...)
	e.nv, e.dk, e.dv = nv, dk, dv
	e.k = resize(e.k, e.t*nv*dk)
	e.v = resize(e.v, e.t*nv*dv)
	e.decay, e.beta = resize(e.decay, e.t*nv), resize(e.beta, e.t*nv)
}

// recordDelta journals value head h's inputs at position ti.
func (e *stateEntry) recordDelta(ti, h int, k, v []float32, decay, beta float32) {
	copy(e.k[(ti*e.nv+h)*e.dk:][:e.dk], k)
	copy(e.v[(ti*e.nv+h)*e.dv:][:e.dv], v)
	e.decay[ti*e.nv+h], e.beta[ti*e.nv+h] = decay, beta
}

// replay writes into conv and delta the states after the first n of the pass's positions.
func (e *stateEntry) replay(conv, delta []float32, n int) {
	if e.conv != nil {
		window := slices.Concat(e.conv, e.x[:n*len(e.x)/e.t])
		copy(conv, window[len(window)-len(conv):])
	}
	if e.delta == nil {
		return
	}
	copy(delta, e.delta)
	size, mem := e.dk*e.dv, make([]float32, e.dv)
	for ti := range n {
		for h := range e.nv {
			at := ti*e.nv + h
			deltaUpdate(delta[h*size:][:size], e.k[at*e.dk:][:e.dk], e.v[at*e.dv:][:e.dv], mem, e.decay[at], e.beta[at])
		}
	}
}

// resize returns s with length n, reusing its array when it is large enough.
func resize(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}
