package shards

import (
	"context"
	"errors"
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

// TestLoadTraceYield: Load and LoadPart call Yield before each read of the file, in yieldChunk pieces with
// O_DIRECT (readChunk ones from the page cache), also where no checksum overlaps the reading (a second load under
// VerifyOnce, which would otherwise read the file in one piece), and the first call comes before any byte is
// read; an error from Yield ends the load with it.
func TestLoadTraceYield(t *testing.T) {
	s := split(t, moeCheckpoint(t), t.TempDir(), Raw)
	s.SetVerify(VerifyOnce)
	var u UnitInfo
	for _, c := range s.Units() {
		if c.Layer >= 0 {
			u = c
			break
		}
	}
	buf := NewBuffer(0)
	for _, direct := range []bool{true, false} {
		s.SetDirectIO(direct)
		for _, part := range []bool{false, true} {
			size := u.FileSize
			load := s.Load
			if part {
				size = u.PartBytes(NoExpert)
				load = func(ctx context.Context, unit string, buf *Buffer) (*Loaded, error) {
					return s.LoadPart(ctx, unit, NoExpert, buf)
				}
			}
			for pass := range 2 { // the second load under VerifyOnce checks nothing
				calls, read := 0, false
				ctx := WithLoadTrace(context.Background(), &LoadTrace{
					ReadDone: func() { read = true },
					Yield: func(context.Context) error {
						if calls == 0 && read {
							t.Errorf("direct %v, part %v: Yield first called after the read", direct, part)
						}
						calls++
						return nil
					},
				})
				l, err := load(ctx, u.Name, buf)
				if err != nil {
					t.Fatal(err)
				}
				chunk := int64(readChunk)
				if s.direct.Load() { // not where the filesystem refuses O_DIRECT
					chunk = yieldChunk
				}
				if want := int((size + chunk - 1) / chunk); calls != want {
					t.Errorf("direct %v, part %v, load %d (verified %v): Yield called %d times, want %d (%d bytes in %d-byte reads)",
						direct, part, pass+1, l.Verified, calls, want, size, chunk)
				}
			}
		}
	}
	stop := errors.New("held back")
	ctx := WithLoadTrace(context.Background(), &LoadTrace{Yield: func(context.Context) error { return stop }})
	if _, err := s.LoadPart(ctx, u.Name, NoExpert, buf); !errors.Is(err, stop) {
		t.Errorf("LoadPart with a failing Yield: error %v, want %v", err, stop)
	}
}
