package kvcache

import (
	"errors"
	"testing"
)

// TestRecurrentState: a recurrent layer's state sits beside the keys and values of a full layer, is seen by the
// view of its layer (as layer 0), per row; CopyFrom copies it, Truncate(b, 0) and Reset clear it, Truncate to the
// length keeps it, and Truncate to fewer positions is refused (ErrRecurrent, also ErrRingOverwritten) without
// changing anything; its memory does not depend on Capacity.
func TestRecurrentState(t *testing.T) {
	cfg := Config{Layers: 2, Batch: 2, KVHeads: 1, Capacity: 8, HeadDim: 2, State: []State{{K: 3, V: 5}, {}}}
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	v := s.View(0)
	if !v.Recurrent() || s.View(1).Recurrent() {
		t.Fatal("layer 0 is recurrent, layer 1 not")
	}
	for b := range 2 {
		k, val := v.State(b)
		if len(k) != 3 || len(val) != 5 {
			t.Fatalf("row %d state sizes %d, %d", b, len(k), len(val))
		}
		for i := range k {
			k[i] = float32(10*b + i + 1)
		}
		for i := range val {
			val[i] = float32(100*b + i + 1)
		}
		if err := s.Advance(b, 4); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Truncate(0, 2); !errors.Is(err, ErrRecurrent) || !errors.Is(err, ErrRingOverwritten) || s.Len(0) != 4 {
		t.Errorf("truncate to 2 of 4: %v (len %d)", err, s.Len(0))
	}
	if err := s.Truncate(0, 4); err != nil {
		t.Errorf("truncate to the length: %v", err)
	}
	big, err := New(Config{Layers: 2, Batch: 4, KVHeads: 1, Capacity: 16, HeadDim: 2, State: cfg.State}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := big.CopyFrom(s); err != nil {
		t.Fatal(err)
	}
	if k, val := big.View(0).State(1); k[2] != 13 || val[4] != 105 {
		t.Errorf("copied state of row 1: %v %v", k, val)
	}
	if k, _ := big.View(0).State(2); k[0] != 0 {
		t.Errorf("a new row's state is not zero: %v", k)
	}
	if err := s.Truncate(1, 0); err != nil {
		t.Fatal(err)
	}
	if k, val := v.State(1); k[0] != 0 || val[4] != 0 {
		t.Errorf("truncate to 0 kept the state: %v %v", k, val)
	}
	if k, _ := v.State(0); k[0] != 1 {
		t.Errorf("truncating row 1 changed row 0: %v", k)
	}
	s.Reset()
	if k, _ := v.State(0); k[0] != 0 {
		t.Errorf("reset kept the state: %v", k)
	}
	small, large := cfg, cfg
	large.Capacity = 1 << 14
	small.Layers, large.Layers, small.State, large.State = 1, 1, cfg.State[:1], cfg.State[:1]
	if small.Bytes() != large.Bytes() || small.Bytes() != 2*(3+5)*4 {
		t.Errorf("recurrent layer bytes at capacity 8 and 16k: %d, %d", small.Bytes(), large.Bytes())
	}
}
