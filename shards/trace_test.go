package shards

import (
	"context"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
)

// TestLoadTrace: Load calls ReadDone once, before it returns and while the unit's encoded tensors may still be
// decoding, with O_DIRECT and from the page cache; Map of a page-cache mapping does not call it (it reads
// nothing up front), and neither does a Load that fails before reading.
func TestLoadTrace(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	s := split(t, ck, t.TempDir(), Planes)
	unit := s.Units()[1].Name
	if s.Units()[1].DecodeSize == 0 {
		t.Fatalf("%s has no encoded tensor", unit)
	}
	traced := func(calls *int) context.Context {
		return WithLoadTrace(context.Background(), &LoadTrace{ReadDone: func() { *calls++ }})
	}
	for _, c := range []struct {
		name   string
		direct bool
		mapped bool
		want   int
	}{
		{"O_DIRECT", true, false, 1},
		{"page cache", false, false, 1},
		{"mapped", false, true, 0},
	} {
		s.SetDirectIO(c.direct)
		calls := 0
		load := s.Load
		if c.mapped {
			load = s.Map
		}
		buf := NewBuffer(0)
		l, err := load(traced(&calls), unit, buf)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if calls != c.want {
			t.Errorf("%s: ReadDone called %d times, want %d", c.name, calls, c.want)
		}
		if len(l.Tensors) == 0 {
			t.Errorf("%s: no tensors", c.name)
		}
		buf.Release()
	}
	calls := 0
	if _, err := s.Load(traced(&calls), "layer.99", NewBuffer(0)); err == nil || calls != 0 {
		t.Errorf("Load of an unknown unit: error %v, ReadDone called %d times", err, calls)
	}
}
