package kvcache

import (
	"errors"
	"slices"
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

// TestMixedLayers: one store of a latent layer of its own dims, a ring, a recurrent layer, layers sharing the ring
// and the latent layer, and a full layer of its own dims (DeepSeek's, Gemma 4's and Qwen3.5's kinds in one
// model), float32 and float16: Bytes counts each kind's arrays, New allocates only those, Write lands in each
// layer's own layout (the latent layer's values are its keys; a sharing layer refuses), the sharing views read
// their sources' slots and positions, CopyFrom into a bigger store moves every kind, and Truncate refuses a cut
// the recurrent layer cannot make, changing nothing, and clears everything at 0.
func TestMixedLayers(t *testing.T) {
	for _, half := range []bool{false, true} {
		cfg := Config{Layers: 6, Batch: 2, KVHeads: 2, Capacity: 10, HeadDim: 2, Half: half,
			Latent: []bool{true, false, false, false, false, false},
			Dims:   []Dims{{KVHeads: 1, HeadDim: 3}, {}, {}, {}, {}, {KVHeads: 1, HeadDim: 4}},
			Ring:   []int{0, 3, 0, 0, 0, 0},
			State:  []State{{}, {}, {K: 2, V: 3}, {}, {}, {}},
			Share:  []int{0, 1, 2, 1, 0, 5}}
		elem := int64(4)
		if half {
			elem = 2
		}
		// latent 2·1·10·3 once; ring 2·2·3·2 twice; state 2·(2+3) float32; shared nothing; full 2·1·10·4 twice.
		if got, want := cfg.Bytes(), (60+2*24+2*80)*elem+2*5*4; got != want {
			t.Errorf("half %v: Bytes %d, want %d", half, got, want)
		}
		arrays := 0
		alloc := func(dims []int) ([]float32, any, error) {
			arrays++
			return make([]float32, dims[0]*dims[1]*dims[2]*dims[3]), arrays, nil
		}
		s, err := New(cfg, alloc)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 7, true: 2}[half]; arrays != want { // a Half store allocates only the states
			t.Errorf("half %v: %d arrays allocated, want %d", half, arrays, want)
		}
		if s.slots[3].K != nil || s.slots[4].K != nil || s.slots[3].K16 != nil || s.slots[4].K16 != nil {
			t.Errorf("half %v: a sharing layer has storage of its own", half)
		}
		// Sequence 1: a prefill of 5 positions then 2 steps; key = layer + head/4 + position/32 + element/256, exact
		// in float16.
		value := func(l, h, p, i int) float32 { return float32(l) + float32(h)/4 + float32(p)/32 + float32(i)/256 }
		write := func(from, n int) {
			for _, l := range []int{0, 1, 5} {
				kvHeads, d := cfg.LayerDims(l)
				k, v := make([]float32, kvHeads*n*d), make([]float32, kvHeads*n*d)
				for h := range kvHeads {
					for p := range n {
						for i := range d {
							k[(h*n+p)*d+i], v[(h*n+p)*d+i] = value(l, h, from+p, i), -value(l, h, from+p, i)
						}
					}
				}
				if err := s.View(l).Write(1, n, n, k, v); err != nil {
					t.Fatalf("half %v layer %d: %v", half, l, err)
				}
			}
			for _, l := range []int{3, 4} {
				kvHeads, d := cfg.LayerDims(cfg.Share[l])
				z := make([]float32, kvHeads*n*d)
				if err := s.View(l).Write(1, n, n, z, z); err == nil || !strings.Contains(err.Error(), "writes none") {
					t.Errorf("half %v: write through sharing layer %d: %v", half, l, err)
				}
			}
			if err := s.Advance(1, n); err != nil {
				t.Fatal(err)
			}
		}
		write(0, 5)
		write(5, 1)
		write(6, 1)
		k, val := s.View(2).State(1)
		for i := range k {
			k[i] = float32(i + 1)
		}
		for i := range val {
			val[i] = float32(-i - 1)
		}
		check := func(what string, st *Store) {
			t.Helper()
			slots := func(l int) (keys, values []float32) {
				sl, _ := st.View(l).Layer(0)
				if half {
					return halves(sl.K16), halves(sl.V16)
				}
				return sl.K, sl.V
			}
			for _, l := range []int{0, 1, 3, 4, 5} {
				v := st.View(l)
				src := st.cfg.source(l)
				kvHeads, d := st.cfg.LayerDims(src)
				keys, values := slots(l)
				for h := range kvHeads {
					for j := range v.Slots() {
						p := v.Position(1, j)
						if p < 0 {
							continue
						}
						for i := range d {
							at := ((1*kvHeads+h)*v.Slots()+j)*d + i
							wantV := -value(src, h, p, i)
							if src == 0 {
								wantV = -wantV // the latent layer's values are its keys
							}
							if keys[at] != value(src, h, p, i) || values[at] != wantV {
								t.Fatalf("half %v, %s: layer %d (storage of %d) head %d slot %d (position %d) element %d: %g/%g, want %g/%g",
									half, what, l, src, h, j, p, i, keys[at], values[at], value(src, h, p, i), wantV)
							}
						}
					}
				}
			}
			if st.View(3).Slots() != 3 || st.View(3).Position(1, 0) != 6 || st.View(4).Slots() != st.cfg.Capacity {
				t.Errorf("half %v, %s: sharing views: %d slots, slot 0 at position %d; latent view %d slots", half, what,
					st.View(3).Slots(), st.View(3).Position(1, 0), st.View(4).Slots())
			}
			if k, val := st.View(2).State(1); !slices.Equal(k, []float32{1, 2}) || !slices.Equal(val, []float32{-1, -2, -3}) {
				t.Errorf("half %v, %s: recurrent state %v %v", half, what, k, val)
			}
		}
		check("written", s)
		big := cfg
		big.Batch, big.Capacity = 3, 20
		b, err := New(big, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.CopyFrom(s); err != nil {
			t.Fatal(err)
		}
		if b.Len(1) != 7 {
			t.Fatalf("half %v: copied length %d", half, b.Len(1))
		}
		check("copied", b)
		other := big
		other.Share = []int{0, 1, 2, 3, 0, 5}
		if o, err := New(other, nil); err != nil || o.CopyFrom(s) == nil {
			t.Errorf("half %v: a store sharing other layers took the copy (%v)", half, err)
		}
		if err := s.Truncate(1, 6); !errors.Is(err, ErrRecurrent) || s.Len(1) != 7 {
			t.Errorf("half %v: cut back one position beside a recurrent layer: %v (length %d)", half, err, s.Len(1))
		}
		check("after a refused cut", s)
		if err := s.Truncate(1, 0); err != nil || s.Len(1) != 0 {
			t.Fatalf("half %v: truncate to 0: %v", half, err)
		}
		if k, _ := s.View(2).State(1); k[0] != 0 || s.View(3).Position(1, 0) != -1 {
			t.Errorf("half %v: truncate to 0 kept the state %v or a shared position", half, k)
		}
	}
	// A recurrent layer stores no positions to share, and a sharing layer has no state of its own.
	for _, c := range []Config{
		{Layers: 2, Batch: 1, KVHeads: 1, Capacity: 4, HeadDim: 2, State: []State{{K: 1, V: 1}, {}}, Share: []int{0, 0}},
		{Layers: 2, Batch: 1, KVHeads: 1, Capacity: 4, HeadDim: 2, State: []State{{}, {K: 1, V: 1}}, Share: []int{0, 0}},
	} {
		if _, err := New(c, nil); err == nil {
			t.Errorf("states %v with Share %v accepted", c.State, c.Share)
		}
	}
}
