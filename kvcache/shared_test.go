package kvcache

import (
	"strings"
	"testing"
)

// TestSharedLayers: a layer reading another's storage (Config.Share) allocates nothing and counts nothing, its
// view is the source's storage and refuses writes; layers of their own sizes (Config.Dims) are sized, written and
// copied by them.
func TestSharedLayers(t *testing.T) {
	cfg := Config{Layers: 3, Batch: 1, KVHeads: 2, Capacity: 8, HeadDim: 4,
		Dims: []Dims{{}, {KVHeads: 1, HeadDim: 8}, {}}, Share: []int{0, 1, 0}}
	if got, want := cfg.Bytes(), int64(2*(2*8*4)*4+2*(1*8*8)*4); got != want {
		t.Errorf("Bytes %d, want %d (layer 2 stores nothing)", got, want)
	}
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sl, _ := s.View(2).Layer(0); sl != &s.slots[0] || s.slots[2].K != nil {
		t.Error("layer 2's view is not layer 0's storage, or layer 2 has storage of its own")
	}
	k, v := make([]float32, 2*4), make([]float32, 2*4)
	if err := s.View(2).Write(0, 1, 1, k, v); err == nil || !strings.Contains(err.Error(), "writes none") {
		t.Errorf("write through a shared view: %v", err)
	}
	k1 := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	if err := s.View(1).Write(0, 1, 1, k1, k1); err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(0, 1); err != nil {
		t.Fatal(err)
	}
	big := cfg
	big.Capacity = 16
	b, err := New(big, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.CopyFrom(s); err != nil {
		t.Fatal(err)
	}
	if got := b.slots[1].K[:8]; got[7] != 8 || got[0] != 1 {
		t.Errorf("copied layer 1 keys %v", got)
	}
	for _, bad := range [][]int{{0, 2, 2}, {0, 0, 1}} { // a later source; a source that shares itself
		c := cfg
		c.Share = bad
		if _, err := New(c, nil); err == nil {
			t.Errorf("Share %v accepted", bad)
		}
	}
}
