package kvcache

import (
	"errors"
	"fmt"
)

// State sizes the per-sequence state of a recurrent layer (Gated DeltaNet linear attention): K and V elements of
// float32 per sequence, held in the layer's Slot.K and Slot.V ([batch, 1, 1, K] and [batch, 1, 1, V], float32
// even in a Half store). The engine keeps the conv1d's last inputs in K and the delta rule's state matrices in V.
// The state does not grow with the sequence: a recurrent layer's memory is constant in the context length.
type State struct{ K, V int }

// Recurrent reports whether layer holds a recurrent state rather than positions.
func (c Config) Recurrent(layer int) bool {
	return c.State != nil && (c.State[layer].K > 0 || c.State[layer].V > 0)
}

// ErrRecurrent is wrapped by Truncate's error when a sequence of a store with recurrent layers would keep some
// of its positions but not all: a recurrent state sums every position, and cannot forget the last ones. The
// error also wraps ErrRingOverwritten, so that callers computing a prefix again for a ring do so here too.
var ErrRecurrent = errors.New("kvcache: a recurrent layer's state cannot be cut back to fewer positions")

// newState allocates the state of recurrent layer i.
func (s *Store) newState(i int, alloc Allocator) error {
	st, sl := s.cfg.State[i], &s.slots[i]
	var err error
	if sl.K, sl.KHandle, err = alloc([]int{s.cfg.Batch, 1, 1, max(st.K, 1)}); err != nil {
		return fmt.Errorf("kvcache: layer %d state: %w", i, err)
	}
	if sl.V, sl.VHandle, err = alloc([]int{s.cfg.Batch, 1, 1, max(st.V, 1)}); err != nil {
		return fmt.Errorf("kvcache: layer %d state: %w", i, err)
	}
	// A state is read whatever the sequence's length: zero it even where the allocator reuses memory.
	clear(sl.K)
	clear(sl.V)
	return nil
}

// State returns sequence b's state of the view's recurrent layer: its K and V parts, which the caller reads and
// updates in place. Both are zero while the sequence holds no position.
func (v *View) State(b int) (k, val []float32) {
	st := v.store.cfg.State[v.layer]
	k, val = v.slot.K[b*max(st.K, 1):], v.slot.V[b*max(st.V, 1):]
	return k[:st.K], val[:st.V]
}

// Recurrent reports whether the view's layer holds a recurrent state.
func (v *View) Recurrent() bool { return v.store.cfg.Recurrent(v.layer) }

// clearState zeroes sequence b's state in every recurrent layer.
func (s *Store) clearState(b int) {
	for l := range s.slots {
		if s.cfg.Recurrent(l) {
			k, val := s.View(l).State(b)
			clear(k)
			clear(val)
		}
	}
}

// truncateState clears sequence b's state for n = 0, keeps it for n = Len(b), and refuses anything between
// (ErrRecurrent) when the store has a recurrent layer.
func (s *Store) truncateState(b, n int) error {
	if s.cfg.State == nil || n == s.lens[b] {
		return nil
	}
	if n == 0 {
		s.clearState(b)
		return nil
	}
	for l := range s.slots {
		if s.cfg.Recurrent(l) {
			return fmt.Errorf("%w (%w: layer %d, sequence %d cut from %d to %d positions)", ErrRecurrent, ErrRingOverwritten, l, b, s.lens[b], n)
		}
	}
	return nil
}

// copyState copies the state of recurrent layer l of the first rows sequences from src.
func (s *Store) copyState(src *Store, l, rows int) {
	to, from := s.View(l), src.View(l)
	for b := range rows {
		tk, tv := to.State(b)
		fk, fv := from.State(b)
		copy(tk, fk)
		copy(tv, fv)
	}
}
