// Package kvcache stores the attention keys and values of every decoder layer between layer visits.
//
// The engine streams the model one layer at a time, so the layer computation is layer-agnostic: when layer i
// runs it receives a one-layer View of the store, addressed as layer index 0, and the store maps i to its slot.
//
// Each layer's keys and values are flat slices laid out [batch, kvHeads, slots, headDim]: float32, or with
// Config.Half IEEE half precision (float16, as llama.cpp's default cache), which halves the cache's memory. A layer with
// full attention has Capacity slots and keeps position p in slot p. A sliding-window layer (Config.Ring) keeps
// only its last positions, in a ring of S slots (its window plus Config.RingSlack, rounded up to RingAlign):
// position p in slot p mod S, so its memory stays bounded however long the sequence grows (Mistral's
// sliding_window, Qwen2's sliding layers, Gemma's local layers). The slices
// come from an Allocator so the engine can hand out memory the compute backend reads without a copy (a shared
// device buffer); the Handle of each slice travels with it. The number of positions is tracked per sequence of
// the batch: a forward pass writes its new positions into every layer at Len(b).., and Advance commits them
// once the last layer has run. A latent layer (Config.Latent: multi-head latent attention) keeps one array whose
// values are its keys: V is K, so that each position costs KVHeads·HeadDim elements rather than twice that.
package kvcache

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/layerstream/layerstream/quant"
)

// Config sizes a Store.
type Config struct {
	Layers   int // decoder layers
	Batch    int // sequences decoded together
	KVHeads  int // key/value heads per layer
	Capacity int // positions per sequence
	HeadDim  int // elements per head
	// Ring, when not nil, has one entry per layer: a positive entry is that layer's sliding window W, which makes
	// it a ring of RingSlots(W, RingSlack) slots when that is smaller than Capacity (the layer only needs the
	// last W positions); 0, or a ring that would not be smaller, gives the layer Capacity slots.
	Ring []int
	// RingSlack is how many positions a pass may write into a ring before its queries attend to it (the engine's
	// host kernels write a short pass's new keys first): the ring then still holds every position those queries
	// see, in blocks aligned as the attention kernel's (RingAlign).
	RingSlack int
	// Half stores keys and values as float16 (Slot.K16, V16) instead of float32 (Slot.K, V): Write rounds each to
	// the nearest float16 and clamps one beyond float16's range (±65504) to it, counting it (TakeClamped).
	Half bool
	// State, when not nil, has one entry per layer: a non-zero entry makes the layer recurrent (Gated DeltaNet
	// linear attention), holding per sequence a fixed-size state instead of positions (recurrent.go).
	State []State
	// Dims, when not nil, has one entry per layer: a non-zero entry is the layer's own key/value heads and head
	// size, in place of KVHeads and HeadDim (shared.go).
	Dims []Dims
	// Share, when not nil, has one entry per layer: the layer whose storage it reads, its own index for one
	// that stores its own (shared.go).
	Share []int
	// Latent, when not nil, has one entry per layer: a true entry makes the layer's values its keys (Slot.V is
	// Slot.K, V16 is K16, and VHandle is KHandle): multi-head latent attention, whose one key/value head holds
	// the compressed latent (the values, and the keys' first part) and the rotated key shared by every head.
	Latent []bool
}

// RingAlign is what ring sizes are multiples of: the attention kernel's block of keys, so that a ring's wrap
// falls on a block boundary.
const RingAlign = 64

// RingSlots is the number of slots of a ring for a sliding window of window positions and a slack of slack
// positions: window + slack + RingAlign, rounded up to a multiple of RingAlign. Without slack it is the window.
func RingSlots(window, slack int) int {
	if slack == 0 {
		return window
	}
	return (window + slack + 2*RingAlign - 1) / RingAlign * RingAlign
}

// Slots is the number of positions layer keeps per sequence.
func (c Config) Slots(layer int) int {
	layer = c.source(layer)
	if c.Recurrent(layer) {
		return 1
	}
	if c.ring(layer) {
		return RingSlots(c.Ring[layer], c.RingSlack)
	}
	return c.Capacity
}

// latent reports whether layer's values are its keys (Config.Latent).
func (c Config) latent(layer int) bool { return c.Latent != nil && c.Latent[layer] }

func (c Config) ring(layer int) bool {
	layer = c.source(layer)
	return c.Ring != nil && c.Ring[layer] > 0 && RingSlots(c.Ring[layer], c.RingSlack) < c.Capacity
}

// Size is the number of elements of one K (or V) slice of layer.
func (c Config) Size(layer int) int {
	kvHeads, headDim := c.LayerDims(layer)
	return c.Batch * kvHeads * c.Slots(layer) * headDim
}

// Bytes is the memory the keys and values of every layer take.
func (c Config) Bytes() int64 {
	elem := int64(4)
	if c.Half {
		elem = 2
	}
	var n int64
	for l := range c.Layers {
		if c.Shared(l) {
			continue
		}
		if c.Recurrent(l) {
			n += int64(c.Batch) * int64(c.State[l].K+c.State[l].V) * 4
			continue
		}
		arrays := int64(2)
		if c.latent(l) {
			arrays = 1
		}
		n += arrays * int64(c.Size(l)) * elem
	}
	return n
}

// Equal reports whether two configs size stores the same way.
func (c Config) Equal(o Config) bool {
	return c.Layers == o.Layers && c.Batch == o.Batch && c.KVHeads == o.KVHeads && c.Capacity == o.Capacity &&
		c.HeadDim == o.HeadDim && slices.Equal(c.Ring, o.Ring) && c.Half == o.Half &&
		slices.Equal(c.State, o.State) && slices.Equal(c.Dims, o.Dims) && slices.Equal(c.Share, o.Share) &&
		slices.Equal(c.Latent, o.Latent)
}

// Allocator returns zeroed float32 elements for an array of dims ([batch, kvHeads, slots, headDim]) and an
// opaque handle the caller associates with them (for example the device buffer that shares the memory). A nil
// Allocator uses make. A Half store is always made with make.
type Allocator func(dims []int) (data []float32, handle any, err error)

// Slot is one layer's storage: K and V, or in a Half store K16 and V16 (float16 bits).
type Slot struct {
	K, V             []float32 // [batch, kvHeads, slots, headDim]
	K16, V16         []uint16  // [batch, kvHeads, slots, headDim], Config.Half
	KHandle, VHandle any       // from the Allocator
}

// Store holds the K/V slots of every layer and the committed length of every sequence.
type Store struct {
	cfg     Config
	slots   []Slot
	lens    []int
	clamped atomic.Int64 // values Write clamped to float16's range (Half)
}

// New allocates a Store. Memory is allocated once; Reset makes a Store reusable for a new generation.
func New(cfg Config, alloc Allocator) (*Store, error) {
	if cfg.Layers <= 0 || cfg.Batch <= 0 || cfg.KVHeads <= 0 || cfg.Capacity <= 0 || cfg.HeadDim <= 0 {
		return nil, fmt.Errorf("kvcache: all dimensions must be positive, got %+v", cfg)
	}
	if cfg.Ring != nil && len(cfg.Ring) != cfg.Layers {
		return nil, fmt.Errorf("kvcache: %d ring sizes for %d layers", len(cfg.Ring), cfg.Layers)
	}
	if cfg.State != nil && len(cfg.State) != cfg.Layers {
		return nil, fmt.Errorf("kvcache: %d state sizes for %d layers", len(cfg.State), cfg.Layers)
	}
	if err := cfg.checkShared(); err != nil {
		return nil, err
	}
	if cfg.Latent != nil && len(cfg.Latent) != cfg.Layers {
		return nil, fmt.Errorf("kvcache: %d latent flags for %d layers", len(cfg.Latent), cfg.Layers)
	}
	if alloc == nil {
		alloc = func(dims []int) ([]float32, any, error) {
			return make([]float32, dims[0]*dims[1]*dims[2]*dims[3]), nil, nil
		}
	}
	s := &Store{cfg: cfg, slots: make([]Slot, cfg.Layers), lens: make([]int, cfg.Batch)}
	for i := range s.slots {
		var err error
		sl := &s.slots[i]
		if cfg.Shared(i) { // it reads its source's slot (View)
			continue
		}
		if cfg.Recurrent(i) {
			if err := s.newState(i, alloc); err != nil {
				return nil, err
			}
			continue
		}
		if cfg.Half {
			sl.K16, sl.V16 = make([]uint16, cfg.Size(i)), make([]uint16, cfg.Size(i))
			if cfg.latent(i) {
				sl.V16 = sl.K16
			}
			continue
		}
		kvHeads, headDim := cfg.LayerDims(i)
		dims := []int{cfg.Batch, kvHeads, cfg.Slots(i), headDim}
		if sl.K, sl.KHandle, err = alloc(dims); err != nil {
			return nil, fmt.Errorf("kvcache: layer %d keys: %w", i, err)
		}
		if cfg.latent(i) {
			sl.V, sl.VHandle = sl.K, sl.KHandle
		} else if sl.V, sl.VHandle, err = alloc(dims); err != nil {
			return nil, fmt.Errorf("kvcache: layer %d values: %w", i, err)
		}
		if n := cfg.Size(i); len(sl.K) != n || len(sl.V) != n {
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
func (s *Store) Reset() {
	clear(s.lens)
	for b := range s.cfg.Batch {
		s.clearState(b)
	}
}

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
// A layer that reads another's storage (Config.Share) gets a read-only view of that layer's.
func (s *Store) View(layer int) *View {
	src := s.cfg.source(layer)
	kvHeads, headDim := s.cfg.LayerDims(src)
	return &View{store: s, slot: &s.slots[src], slots: s.cfg.Slots(src), ring: s.cfg.ring(src), layer: src,
		kvHeads: kvHeads, headDim: headDim, readOnly: src != layer}
}

// View is a one-layer window of a Store. The layer computation addresses it as layer 0.
type View struct {
	store            *Store
	slot             *Slot
	slots            int
	ring             bool
	layer            int // the layer whose storage it is
	kvHeads, headDim int
	// readOnly: the view is a sharing layer's (Config.Share), which writes nothing.
	readOnly bool
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

// Slots is the number of positions the layer keeps per sequence: Capacity, or its ring's size.
func (v *View) Slots() int { return v.slots }

// Run is slots [Slot, Slot+N) of one sequence of a layer, holding positions Pos, Pos+1, … .
type Run struct{ Slot, Pos, N int }

// Runs returns the runs of consecutive positions the slots of sequence b hold once it has length positions (the
// committed ones and any written beyond them), in position order: one from slot 0 for a full layer; for a ring
// that has wrapped, its oldest positions, then the newest from slot 0.
func (v *View) Runs(b, length int) []Run {
	if !v.ring || length <= v.slots {
		if length == 0 {
			return nil
		}
		return []Run{{Slot: 0, Pos: 0, N: min(length, v.slots)}}
	}
	newest := length - 1
	at := newest % v.slots // the newest position's slot
	runs := make([]Run, 0, 2)
	if at+1 < v.slots {
		runs = append(runs, Run{Slot: at + 1, Pos: newest + 1 - v.slots, N: v.slots - at - 1})
	}
	return append(runs, Run{Slot: 0, Pos: newest - at, N: at + 1})
}

// WritesAhead reports whether a pass may write n new positions of a sequence before its queries attend to
// them without overwriting a position those queries see: always for a full layer, up to Config.RingSlack for a
// ring.
func (v *View) WritesAhead(n int) bool { return !v.ring || n <= v.store.cfg.RingSlack }

// Position returns the position whose keys and values slot j of sequence b holds, or -1 when it holds none yet.
func (v *View) Position(b, j int) int {
	return SlotPosition(v.store.lens[b], v.slots, v.ring, j)
}

// SlotPosition is the position held in slot j of a layer with the given number of slots after length
// committed positions: j itself for a full layer, else the latest position p < length with p ≡ j (mod slots)
// for a ring; -1 when none.
func SlotPosition(length, slots int, ring bool, j int) int {
	if j >= length {
		return -1
	}
	if !ring {
		return j
	}
	return j + slots*((length-1-j)/slots)
}

// Round rounds new keys or values in place to what Write stores (float16 in a Half store, clamped and counted
// as Write does it; nothing otherwise): for a pass that attends to its new positions before they are read back
// from the cache, so that they count the same whether a prompt is computed in one pass or a token at a time.
func (v *View) Round(x []float32) {
	if v.store.cfg.Half {
		if n := quant.RoundHalfClamped(x); n > 0 {
			v.store.clamped.Add(int64(n))
		}
	}
}

// TakeClamped returns the number of keys and values Write has clamped to float16's range since the last call
// (always 0 unless Config.Half), and starts counting again.
func (s *Store) TakeClamped() int64 { return s.clamped.Swap(0) }

// Write stores the keys and values of n new positions of sequence b of layer 0 of the view at positions
// Len(b)..Len(b)+n-1 (a ring layer keeps the last of them that fit). k and v are laid out
// [kvHeads, stride, headDim]: position t of head h is at (h*stride+t)*headDim, so a graph output padded to a
// bucket of stride ≥ n positions is written as is. A Half store rounds them to float16 (quant.HalvesClamped).
// A latent layer stores k alone (its values are its keys): val is not read.
func (v *View) Write(b, n, stride int, k, val []float32) error {
	c := v.store.cfg
	if v.readOnly {
		return fmt.Errorf("kvcache: a layer reading layer %d's keys and values writes none", v.layer)
	}
	if err := v.store.CheckRoom(b, n); err != nil {
		return err
	}
	if n > stride {
		return fmt.Errorf("kvcache: %d positions do not fit a stride of %d", n, stride)
	}
	if want := v.kvHeads * stride * v.headDim; len(k) != want || len(val) != want {
		return fmt.Errorf("kvcache: write of %d positions (stride %d): got %d/%d elements, want %d", n, stride, len(k), len(val), want)
	}
	pos := v.store.lens[b]
	d := v.headDim
	latent := c.latent(v.layer)
	put := func(dst, src, m int) { // m elements of k and val from src to the slot's dst
		if !c.Half {
			copy(v.slot.K[dst:dst+m], k[src:src+m])
			if !latent {
				copy(v.slot.V[dst:dst+m], val[src:src+m])
			}
			return
		}
		clamped := quant.HalvesClamped(v.slot.K16[dst:dst+m], k[src:src+m])
		if !latent {
			clamped += quant.HalvesClamped(v.slot.V16[dst:dst+m], val[src:src+m])
		}
		if clamped > 0 {
			v.store.clamped.Add(int64(clamped))
		}
	}
	for h := range v.kvHeads {
		base := (b*v.kvHeads + h) * v.slots
		src := h * stride * d
		if !v.ring {
			put((base+pos)*d, src, n*d)
			continue
		}
		for i := max(0, n-v.slots); i < n; i++ { // earlier ones would be overwritten within this write
			put((base+v.slotOf(pos+i))*d, src+i*d, d)
		}
	}
	return nil
}

// ErrRingOverwritten is wrapped by Truncate's error when a ring no longer holds the positions before the new
// length: the caller must compute them again.
var ErrRingOverwritten = errors.New("kvcache: a sliding-window ring has overwritten the positions before that length")

// Truncate forgets the positions of sequence b from n on (n ≤ Len(b)): the first n stay valid. Truncate(b, 0)
// frees the row for another sequence. A ring has written later positions over earlier ones; it stays valid if it
// still holds the last W-1 positions before n (all a sliding window of W positions needs besides the new one),
// which it does when it never wrapped, or was cut back by at most its slack plus one position; otherwise the
// error wraps ErrRingOverwritten and nothing changes.
func (s *Store) Truncate(b, n int) error { return s.truncate(b, n, true) }

// Rewind is Truncate for a caller that has already set every recurrent layer's state of sequence b
// (View.State) to the state after its first n positions (speculative decoding keeps what restores it): the
// states are left as they are, the other layers cut back as Truncate cuts them.
func (s *Store) Rewind(b, n int) error { return s.truncate(b, n, false) }

// truncate is Truncate, and with states false Rewind.
func (s *Store) truncate(b, n int, states bool) error {
	if n < 0 || n > s.lens[b] {
		return fmt.Errorf("kvcache: truncate sequence %d to %d positions: it holds %d", b, n, s.lens[b])
	}
	if states {
		if err := s.truncateState(b, n); err != nil {
			return err
		}
	}
	for l := range s.slots {
		if !s.cfg.ring(l) || n == 0 || s.cfg.Shared(l) {
			continue
		}
		slots, window := s.cfg.Slots(l), s.cfg.Ring[l]
		if lost := s.lens[b] - slots; lost > max(0, n-window+1) { // positions [0, lost) are overwritten
			return fmt.Errorf("%w (layer %d: ring of %d slots for a window of %d, sequence %d cut from %d to %d positions)", ErrRingOverwritten, l, slots, window, b, s.lens[b], n)
		}
	}
	s.lens[b] = n
	return nil
}

// CopyFrom copies the committed positions of every sequence both Stores have from src (a Store of the same
// layers, heads and head size, typically a smaller one being replaced by s): each layer the positions both hold
// (a ring holds its last Ring). It fails when a sequence of src holds more positions than s has room for.
func (s *Store) CopyFrom(src *Store) error {
	c, o := s.cfg, src.cfg
	if c.Layers != o.Layers || c.KVHeads != o.KVHeads || c.HeadDim != o.HeadDim || c.Half != o.Half || !slices.Equal(c.State, o.State) ||
		!slices.Equal(c.Dims, o.Dims) || !slices.Equal(c.Share, o.Share) || !slices.Equal(c.Latent, o.Latent) {
		return fmt.Errorf("kvcache: copy from a store of other dimensions (%+v into %+v)", o, c)
	}
	rows := min(c.Batch, o.Batch)
	for b := range rows {
		if src.lens[b] > c.Capacity {
			return fmt.Errorf("kvcache: sequence %d holds %d positions, more than the capacity of %d", b, src.lens[b], c.Capacity)
		}
	}
	for l := range s.slots {
		if c.Shared(l) {
			continue
		}
		if c.Recurrent(l) {
			s.copyState(src, l, rows)
			continue
		}
		to, from := s.View(l), src.View(l)
		kvHeads, d := c.LayerDims(l)
		for b := range rows {
			n := src.lens[b]
			for p := max(0, n-min(to.slots, from.slots)); p < n; p++ {
				dst, at := to.slotOf(p), from.slotOf(p)
				for h := range kvHeads {
					i := ((b*kvHeads+h)*to.slots + dst) * d
					j := ((b*kvHeads+h)*from.slots + at) * d
					if c.Half { // a latent layer's V16 is its K16: copied twice, harmlessly
						copy(to.slot.K16[i:i+d], from.slot.K16[j:j+d])
						copy(to.slot.V16[i:i+d], from.slot.V16[j:j+d])
						continue
					}
					copy(to.slot.K[i:i+d], from.slot.K[j:j+d])
					copy(to.slot.V[i:i+d], from.slot.V[j:j+d])
				}
			}
		}
	}
	copy(s.lens, src.lens[:rows])
	return nil
}

// slotOf is the slot that holds (or will hold) position p.
func (v *View) slotOf(p int) int {
	if v.ring {
		return p % v.slots
	}
	return p
}
