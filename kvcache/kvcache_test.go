package kvcache

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

func TestViewIsLayerZero(t *testing.T) {
	s, err := New(Config{Layers: 3, Batch: 1, KVHeads: 2, Capacity: 4, HeadDim: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Two new positions from a graph output padded to a stride of 4: [kvHeads=2, stride=4, headDim=2].
	k := []float32{1, 1, 2, 2, 0, 0, 0, 0, 3, 3, 4, 4, 0, 0, 0, 0}
	v := make([]float32, len(k))
	for i := range v {
		v[i] = -k[i]
	}
	view := s.View(2)
	if _, err := view.Layer(1); err == nil {
		t.Error("a one-layer view answered for layer 1")
	}
	slot, err := view.Layer(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := view.Write(0, 2, 4, k, v); err != nil {
		t.Fatal(err)
	}
	// Layer 2 of the store holds the positions at 0 and 1 of each head; other layers are untouched.
	want := []float32{1, 1, 2, 2, 0, 0, 0, 0, 3, 3, 4, 4, 0, 0, 0, 0}
	for i := range want {
		if slot.K[i] != want[i] || slot.V[i] != -want[i] {
			t.Fatalf("layer 2 K = %v V = %v, want %v", slot.K, slot.V, want)
		}
	}
	for _, l := range []int{0, 1} {
		other, _ := s.View(l).Layer(0)
		for _, x := range other.K {
			if x != 0 {
				t.Fatalf("layer %d was written: %v", l, other.K)
			}
		}
	}
	if err := s.Advance(0, 2); err != nil {
		t.Fatal(err)
	}
	// The next write appends at position 2.
	one := []float32{5, 5, 6, 6}
	if err := view.Write(0, 1, 1, one, one); err != nil {
		t.Fatal(err)
	}
	if slot.K[4] != 5 || slot.K[12] != 6 {
		t.Errorf("append landed wrong: %v", slot.K)
	}
	if err := s.Advance(0, 1); err != nil {
		t.Fatal(err)
	}
	// Overflow is an error, not a silent overwrite.
	if err := view.Write(0, 2, 2, make([]float32, 8), make([]float32, 8)); err == nil || !strings.Contains(err.Error(), "capacity") {
		t.Errorf("overflow: got %v", err)
	}
	s.Reset()
	if s.Len(0) != 0 || view.Len(0) != 0 {
		t.Error("Reset kept positions")
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Config{Layers: 1, Batch: 1, KVHeads: 0, Capacity: 1, HeadDim: 1}, nil); err == nil {
		t.Error("zero kv heads accepted")
	}
	short := func(dims []int) ([]float32, any, error) {
		return make([]float32, dims[0]*dims[1]*dims[2]*dims[3]-1), nil, nil
	}
	if _, err := New(Config{Layers: 1, Batch: 1, KVHeads: 1, Capacity: 2, HeadDim: 2}, short); err == nil {
		t.Error("a short allocation accepted")
	}
}

// TestCopyFromAndTruncate: a bigger store takes every sequence's committed positions from a smaller one, and
// Truncate forgets positions from its length on.
func TestCopyFromAndTruncate(t *testing.T) {
	small, err := New(Config{Layers: 2, Batch: 2, KVHeads: 2, Capacity: 3, HeadDim: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Sequence 1 holds 2 positions in every layer: value = 100·layer + 10·head + position.
	for l := range 2 {
		k := make([]float32, 2*2*2) // [kvHeads, stride 2, headDim]
		for h := range 2 {
			for p := range 2 {
				k[(h*2+p)*2], k[(h*2+p)*2+1] = float32(100*l+10*h+p), float32(100*l+10*h+p)
			}
		}
		if err := small.View(l).Write(1, 2, 2, k, k); err != nil {
			t.Fatal(err)
		}
	}
	small.Advance(1, 2)
	big, err := New(Config{Layers: 2, Batch: 4, KVHeads: 2, Capacity: 8, HeadDim: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := big.CopyFrom(small); err != nil {
		t.Fatal(err)
	}
	if big.Len(0) != 0 || big.Len(1) != 2 || big.Len(2) != 0 {
		t.Fatalf("lengths %d %d %d, want 0 2 0", big.Len(0), big.Len(1), big.Len(2))
	}
	for l := range 2 {
		slot, _ := big.View(l).Layer(0)
		for h := range 2 {
			for p := range 2 {
				at := ((1*2+h)*8 + p) * 2
				if want := float32(100*l + 10*h + p); slot.K[at] != want || slot.V[at+1] != want {
					t.Errorf("layer %d head %d position %d: %g, want %g", l, h, p, slot.K[at], want)
				}
			}
		}
	}
	if err := big.Truncate(1, 3); err == nil {
		t.Error("truncating past the length succeeded")
	}
	if err := big.Truncate(1, 1); err != nil || big.Len(1) != 1 {
		t.Errorf("truncate: %v, length %d", err, big.Len(1))
	}
	tiny, _ := New(Config{Layers: 2, Batch: 2, KVHeads: 2, Capacity: 1, HeadDim: 2}, nil)
	if err := tiny.CopyFrom(small); err == nil || !strings.Contains(err.Error(), "capacity") {
		t.Errorf("copy into too small a store: %v", err)
	}
}

// TestRing: a sliding-window layer keeps its last Ring positions in slots p mod Ring, however long the sequence,
// while a full layer of the same store keeps every position; SlotPosition says which position each slot holds.
func TestRing(t *testing.T) {
	s, err := New(Config{Layers: 2, Batch: 2, KVHeads: 1, Capacity: 10, HeadDim: 1, Ring: []int{3, 0}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ring, full := s.View(0), s.View(1)
	if ring.Slots() != 3 || full.Slots() != 10 {
		t.Fatalf("slots %d and %d, want 3 and 10", ring.Slots(), full.Slots())
	}
	if len(ring.slot.K) != 2*3 || len(full.slot.K) != 2*10 {
		t.Fatalf("sizes %d and %d", len(ring.slot.K), len(full.slot.K))
	}
	// Sequence 1: a prefill of 5 positions (values 0..4, padded to a stride of 8), then two single steps.
	prefill := []float32{0, 1, 2, 3, 4, -1, -1, -1}
	for _, v := range []*View{ring, full} {
		if err := v.Write(1, 5, 8, prefill, prefill); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Advance(1, 5); err != nil {
		t.Fatal(err)
	}
	for p := 5; p < 7; p++ {
		one := []float32{float32(p)}
		for _, v := range []*View{ring, full} {
			if err := v.Write(1, 1, 1, one, one); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Advance(1, 1); err != nil {
			t.Fatal(err)
		}
	}
	// 7 positions: the ring holds 6 (slot 0), 4 (slot 1), 5 (slot 2); sequence 0 is untouched.
	for j, want := range []int{6, 4, 5} {
		if got := ring.Position(1, j); got != want || ring.slot.K[3+j] != float32(want) || ring.slot.V[3+j] != float32(want) {
			t.Errorf("ring slot %d: position %d holding %g, want %d", j, got, ring.slot.K[3+j], want)
		}
		if got := ring.Position(0, j); got != -1 {
			t.Errorf("empty sequence: slot %d holds position %d", j, got)
		}
	}
	for j := range 10 {
		want := -1
		if j < 7 {
			want = j
		}
		if got := full.Position(1, j); got != want || (want >= 0 && full.slot.K[10+j] != float32(j)) {
			t.Errorf("full slot %d: position %d, want %d", j, got, want)
		}
	}
	// A bigger store takes the ring's positions (in their slots of the new layout) and the full layer's.
	big, err := New(Config{Layers: 2, Batch: 3, KVHeads: 1, Capacity: 20, HeadDim: 1, Ring: []int{3, 0}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := big.CopyFrom(s); err != nil {
		t.Fatal(err)
	}
	for j := range 3 {
		if p := big.View(0).Position(1, j); big.slots[0].K[3+j] != float32(p) {
			t.Errorf("copied ring slot %d holds %g, want position %d", j, big.slots[0].K[3+j], p)
		}
	}
	if big.slots[1].K[20+6] != 6 || big.Len(1) != 7 {
		t.Errorf("copied full layer: %v", big.slots[1].K[20:30])
	}
	// Cutting back one position keeps the ring valid (it holds the 2 positions a window of 3 needs before the
	// next); cutting back more is refused: the ring wrote later positions over those.
	if err := s.Truncate(1, 5); !errors.Is(err, ErrRingOverwritten) || s.Len(1) != 7 {
		t.Errorf("cut a wrapped ring back 2 positions: %v (length %d)", err, s.Len(1))
	}
	if err := s.Truncate(1, 6); err != nil || ring.Position(1, 1) != 4 || ring.Position(1, 2) != 5 {
		t.Errorf("cut back one position: %v", err)
	}
	cfg := s.Config()
	if !cfg.Equal(Config{Layers: 2, Batch: 2, KVHeads: 1, Capacity: 10, HeadDim: 1, Ring: []int{3, 0}}) || cfg.Equal(Config{Layers: 2, Batch: 2, KVHeads: 1, Capacity: 10, HeadDim: 1}) {
		t.Error("Equal")
	}
}

// TestHalf: a float16 store holds, element for element, what a float32 store given the same writes holds, rounded
// as quant.RoundHalfClamped rounds (a ring layer and a full one, a prefill then steps); values beyond float16's
// range are clamped and counted once each; Round gives new positions the same rounding; a bigger float16 store
// takes the positions, and a float32 one refuses them.
func TestHalf(t *testing.T) {
	cfg := Config{Layers: 2, Batch: 2, KVHeads: 2, Capacity: 12, HeadDim: 3, Ring: []int{4, 0}}
	full, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := cfg
	hc.Half = true
	half, err := New(hc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Equal(hc) || hc.Bytes()*2 != cfg.Bytes() || hc.Bytes() != 2*2*2*(4+12)*3*2 {
		t.Fatalf("Equal %v, Bytes %d (float32 %d)", cfg.Equal(hc), hc.Bytes(), cfg.Bytes())
	}
	val := func(i int) float32 { return float32(i)*1.2345e-3 + float32(i%7)*0.1 } // mostly not float16 values
	write := func(n, stride, from int, big bool) {
		k := make([]float32, cfg.KVHeads*stride*cfg.HeadDim)
		for i := range k {
			k[i] = val(from + i)
		}
		if big {
			k[1], k[4] = 70000, -1e9
		}
		v := make([]float32, len(k))
		for i := range v {
			v[i] = -k[i]
		}
		for l := range cfg.Layers {
			for _, s := range []*Store{full, half} {
				if err := s.View(l).Write(1, n, stride, slices.Clone(k), slices.Clone(v)); err != nil {
					t.Fatal(err)
				}
			}
		}
		full.Advance(1, n)
		half.Advance(1, n)
	}
	write(5, 8, 0, true)
	for p := range 3 {
		write(1, 1, 100+10*p, false)
	}
	// k[1] (position 0) and k[4] (position 1) in keys and values (their negatives) of the full layer; the ring of
	// 4 keeps the prefill's last 4 positions, so only k[4].
	if n := half.TakeClamped(); n != 6 {
		t.Errorf("clamped %d, want 6", n)
	}
	if n := half.TakeClamped(); n != 0 || full.TakeClamped() != 0 {
		t.Errorf("counted again: %d", n)
	}
	for l := range cfg.Layers {
		if hs := half.slots[l]; hs.K != nil || len(hs.K16) != cfg.Size(l) || len(hs.V16) != cfg.Size(l) {
			t.Fatalf("layer %d: float32 slices %d, float16 %d", l, len(hs.K), len(hs.K16))
		}
	}
	for l := range cfg.Layers {
		fs, hs := full.slots[l], half.slots[l]
		k, v := slices.Clone(fs.K), slices.Clone(fs.V)
		quant.RoundHalfClamped(k)
		quant.RoundHalfClamped(v)
		for i := range k {
			if got := quant.HalfToFloat32(hs.K16[i]); got != k[i] || quant.HalfToFloat32(hs.V16[i]) != v[i] {
				t.Fatalf("layer %d element %d: float16 store %g, float32 store rounded %g", l, i, got, k[i])
			}
		}
	}
	x := []float32{1.0001, 1e6}
	full.View(0).Round(x)
	if x[0] != 1.0001 || full.TakeClamped() != 0 {
		t.Errorf("a float32 store's Round changed %v", x)
	}
	half.View(0).Round(x)
	if x[0] != 1 || x[1] != quant.HalfMax || half.TakeClamped() != 1 {
		t.Errorf("Round in a float16 store gave %v", x)
	}
	bc := hc
	bc.Batch, bc.Capacity = 3, 20
	big, err := New(bc, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := big.CopyFrom(half); err != nil {
		t.Fatal(err)
	}
	for l := range cfg.Layers {
		from, to := half.View(l), big.View(l)
		for h := range cfg.KVHeads {
			for j := range from.Slots() {
				p := from.Position(1, j)
				if p < 0 {
					continue
				}
				a := ((1*cfg.KVHeads+h)*from.Slots() + j) * cfg.HeadDim
				b := ((1*cfg.KVHeads+h)*to.Slots() + to.slotOf(p)) * cfg.HeadDim
				if !slices.Equal(half.slots[l].K16[a:a+cfg.HeadDim], big.slots[l].K16[b:b+cfg.HeadDim]) {
					t.Errorf("layer %d head %d position %d not copied", l, h, p)
				}
			}
		}
	}
	if err := full.CopyFrom(half); err == nil {
		t.Error("a float32 store took a float16 store's positions")
	}
}

// TestLatent: a latent layer keeps one array, its values its keys (float32 and float16, handles included): a
// write stores the keys and reads no values, the layer costs half the bytes, CopyFrom carries it, and a store of
// other latent layers is another store.
func TestLatent(t *testing.T) {
	for _, half := range []bool{false, true} {
		cfg := Config{Layers: 2, Batch: 1, KVHeads: 1, Capacity: 4, HeadDim: 3, Latent: []bool{true, false}, Half: half}
		handles := 0
		alloc := func(dims []int) ([]float32, any, error) {
			handles++
			return make([]float32, dims[0]*dims[1]*dims[2]*dims[3]), handles, nil
		}
		s, err := New(cfg, alloc)
		if err != nil {
			t.Fatal(err)
		}
		plain := cfg
		plain.Latent = nil
		if cfg.Equal(plain) || 4*cfg.Bytes() != 3*plain.Bytes() {
			t.Errorf("half %v: Equal %v, Bytes %d against %d with values apart: want 3/4 (one of two layers latent)", half, cfg.Equal(plain), cfg.Bytes(), plain.Bytes())
		}
		k := []float32{1, 2, 3, 4, 5, 6}
		if err := s.View(0).Write(0, 2, 2, k, make([]float32, len(k))); err != nil {
			t.Fatal(err)
		}
		if err := s.View(1).Write(0, 2, 2, k, []float32{-1, -2, -3, -4, -5, -6}); err != nil {
			t.Fatal(err)
		}
		s.Advance(0, 2)
		dst, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := dst.CopyFrom(s); err != nil {
			t.Fatal(err)
		}
		for _, st := range []*Store{s, dst} {
			l0, _ := st.View(0).Layer(0)
			l1, _ := st.View(1).Layer(0)
			keys, values, other := l0.K, l0.V, l1.V
			if half {
				keys, values, other = halves(l0.K16), halves(l0.V16), halves(l1.V16)
			}
			if !slices.Equal(keys[:6], k) || !slices.Equal(values[:6], k) || other[0] != -1 {
				t.Errorf("half %v: latent layer keys %v values %v, plain layer's values %v", half, keys[:6], values[:6], other[:6])
			}
		}
		l0, _ := s.View(0).Layer(0)
		if !half && (l0.KHandle != l0.VHandle || handles != 3) {
			t.Errorf("latent layer handles %v and %v, %d arrays allocated: want one handle, 3 arrays", l0.KHandle, l0.VHandle, handles)
		}
	}
	if _, err := New(Config{Layers: 2, Batch: 1, KVHeads: 1, Capacity: 4, HeadDim: 3, Latent: []bool{true}}, nil); err == nil {
		t.Error("one latent flag for two layers accepted")
	}
}

// halves widens float16 bits.
func halves(h []uint16) []float32 {
	f := make([]float32, len(h))
	quant.WidenHalves(f, h)
	return f
}
