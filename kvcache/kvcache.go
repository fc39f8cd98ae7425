// Package kvcache stores the attention keys and values of every decoder layer between layer visits.
//
// The engine streams the model one layer at a time, so the layer computation is layer-agnostic: when layer i
// runs it receives a one-layer View of the store, addressed as layer index 0, and the store maps i to its slot.
//
// Each layer's keys and values are flat float32 slices laid out [batch, kvHeads, capacity, headDim]. The slices
// come from an Allocator so the engine can hand out memory the compute backend reads without a copy (a shared
// device buffer); the Handle of each slice travels with it. The number of valid positions is tracked per
// sequence of the batch: a forward pass writes its new positions into every layer at Len(b).., and Advance
// commits them once the last layer has run.
package kvcache

import (
	"fmt"
)

// Config sizes a Store.
type Config struct {
	Layers   int // decoder layers
	Batch    int // sequences decoded together
	KVHeads  int // key/value heads per layer
	Capacity int // positions per sequence
	HeadDim  int // elements per head
}

// Size is the number of float32 elements of one K (or V) slice of one layer.
func (c Config) Size() int { return c.Batch * c.KVHeads * c.Capacity * c.HeadDim }

// Allocator returns n zeroed float32 elements and an opaque handle the caller associates with them (for
// example the device buffer that shares the memory). A nil Allocator uses make.
type Allocator func(n int) (data []float32, handle any, err error)

// Slot is one layer's storage.
type Slot struct {
	K, V             []float32 // [batch, kvHeads, capacity, headDim]
	KHandle, VHandle any       // from the Allocator
}

// Store holds the K/V slots of every layer and the committed length of every sequence.
type Store struct {
	cfg   Config
	slots []Slot
	lens  []int
}

// New allocates a Store. Memory is allocated once; Reset makes a Store reusable for a new generation.
func New(cfg Config, alloc Allocator) (*Store, error) {
	if cfg.Layers <= 0 || cfg.Batch <= 0 || cfg.KVHeads <= 0 || cfg.Capacity <= 0 || cfg.HeadDim <= 0 {
		return nil, fmt.Errorf("kvcache: all dimensions must be positive, got %+v", cfg)
	}
	if alloc == nil {
		alloc = func(n int) ([]float32, any, error) { return make([]float32, n), nil, nil }
	}
	s := &Store{cfg: cfg, slots: make([]Slot, cfg.Layers), lens: make([]int, cfg.Batch)}
	n := cfg.Size()
	for i := range s.slots {
		var err error
		sl := &s.slots[i]
		if sl.K, sl.KHandle, err = alloc(n); err != nil {
			return nil, fmt.Errorf("kvcache: layer %d keys: %w", i, err)
		}
		if sl.V, sl.VHandle, err = alloc(n); err != nil {
			return nil, fmt.Errorf("kvcache: layer %d values: %w", i, err)
		}
		if len(sl.K) != n || len(sl.V) != n {
			return nil, fmt.Errorf("kvcache: allocator returned %d/%d elements for layer %d, want %d", len(sl.K), len(sl.V), i, n)
		}
	}
	return s, nil
}

// Config returns the sizes the Store was created with.
func (s *Store) Config() Config { return s.cfg }

// Len is the number of committed positions of sequence b.
func (s *Store) Len(b int) int { return s.lens[b] }

// Reset forgets every position (the memory is kept; stale values are masked by Len).
func (s *Store) Reset() { clear(s.lens) }

// CheckRoom returns an error when n more positions do not fit sequence b.
func (s *Store) CheckRoom(b, n int) error {
	if s.lens[b]+n > s.cfg.Capacity {
		return fmt.Errorf("kvcache: sequence %d holds %d positions, %d more exceed the capacity of %d", b, s.lens[b], n, s.cfg.Capacity)
	}
	return nil
}

// Advance commits n positions of sequence b, written to every layer by the forward pass that just ended.
func (s *Store) Advance(b, n int) error {
	if err := s.CheckRoom(b, n); err != nil {
		return err
	}
	s.lens[b] += n
	return nil
}

// View returns layer's storage as a one-layer cache: the view's only layer is index 0.
func (s *Store) View(layer int) *View {
	return &View{store: s, slot: &s.slots[layer]}
}

// View is a one-layer window of a Store. The layer computation addresses it as layer 0.
type View struct {
	store *Store
	slot  *Slot
}

// Layer returns the storage of layer i of the view; a view has exactly one layer, index 0.
func (v *View) Layer(i int) (*Slot, error) {
	if i != 0 {
		return nil, fmt.Errorf("kvcache: a one-layer view has only layer 0, asked for %d", i)
	}
	return v.slot, nil
}

// Len is the committed length of sequence b.
func (v *View) Len(b int) int { return v.store.lens[b] }

// Write stores the keys and values of n new positions of sequence b of layer 0 of the view at positions
// Len(b)..Len(b)+n-1. k and v are laid out [kvHeads, stride, headDim]: position t of head h is at
// (h*stride+t)*headDim, so a graph output padded to a bucket of stride ≥ n positions is written as is.
func (v *View) Write(b, n, stride int, k, val []float32) error {
	c := v.store.cfg
	if err := v.store.CheckRoom(b, n); err != nil {
		return err
	}
	if n > stride {
		return fmt.Errorf("kvcache: %d positions do not fit a stride of %d", n, stride)
	}
	if want := c.KVHeads * stride * c.HeadDim; len(k) != want || len(val) != want {
		return fmt.Errorf("kvcache: write of %d positions (stride %d): got %d/%d elements, want %d", n, stride, len(k), len(val), want)
	}
	pos := v.store.lens[b]
	d := c.HeadDim
	for h := range c.KVHeads {
		dst := ((b*c.KVHeads+h)*c.Capacity + pos) * d
		src := h * stride * d
		copy(v.slot.K[dst:dst+n*d], k[src:src+n*d])
		copy(v.slot.V[dst:dst+n*d], val[src:src+n*d])
	}
	return nil
}

// Truncate forgets the positions of sequence b from n on (n ≤ Len(b)): the first n stay valid. Truncate(b, 0)
// frees the row for another sequence.
func (s *Store) Truncate(b, n int) error {
	if n < 0 || n > s.lens[b] {
		return fmt.Errorf("kvcache: truncate sequence %d to %d positions: it holds %d", b, n, s.lens[b])
	}
	s.lens[b] = n
	return nil
}

// CopyFrom copies the committed positions of every sequence both Stores have from src (a Store of the same
// layers, heads and head size, typically a smaller one being replaced by s). It fails when a sequence of src
// holds more positions than s has room for.
func (s *Store) CopyFrom(src *Store) error {
	c, o := s.cfg, src.cfg
	if c.Layers != o.Layers || c.KVHeads != o.KVHeads || c.HeadDim != o.HeadDim {
		return fmt.Errorf("kvcache: copy from a store of other dimensions (%+v into %+v)", o, c)
	}
	rows := min(c.Batch, o.Batch)
	for b := range rows {
		if src.lens[b] > c.Capacity {
			return fmt.Errorf("kvcache: sequence %d holds %d positions, more than the capacity of %d", b, src.lens[b], c.Capacity)
		}
	}
	d := c.HeadDim
	for l := range s.slots {
		dst, from := &s.slots[l], &src.slots[l]
		for b := range rows {
			n := src.lens[b] * d
			for h := range c.KVHeads {
				to := ((b*c.KVHeads + h) * c.Capacity) * d
				at := ((b*o.KVHeads + h) * o.Capacity) * d
				copy(dst.K[to:to+n], from.K[at:at+n])
				copy(dst.V[to:to+n], from.V[at:at+n])
			}
		}
	}
	copy(s.lens, src.lens[:rows])
	return nil
}
