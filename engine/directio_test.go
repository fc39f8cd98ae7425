package engine

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/memavail"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/synth"
)

// TestDirectIOAuto: by default the engine reads with O_DIRECT exactly when the shard files take more than nine
// tenths of the available memory (stubbed here), and the logits are the same either way.
func TestDirectIOAuto(t *testing.T) {
	ctx := context.Background()
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 12})
	ref := open(t, model, Options{DirectIO: DirectIOOff})
	var need int64
	for _, u := range ref.store.set.Units() {
		need += u.FileSize
	}
	ids := []int{1, 3, 5}
	want, err := ref.Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer func(f func() (memavail.Available, error)) { availableMemory = f }(availableMemory)
	for _, c := range []struct {
		name  string
		avail int64 // < 0: unknown
		opts  Options
		want  DirectIOMode
	}{
		{"fits", need * 2, Options{}, DirectIOOff},
		{"fits in nine tenths", need/9*10 + 10, Options{}, DirectIOOff},
		{"only in all of it", need, Options{}, DirectIOOn},
		{"too big", need / 2, Options{}, DirectIOOn},
		{"unknown", -1, Options{}, DirectIOOff},
		{"resident", need * 2, Options{Resident: true}, DirectIOOff},
		{"forced off", need / 2, Options{DirectIO: DirectIOOff}, DirectIOOff},
		{"forced on", need * 2, Options{DirectIO: DirectIOOn}, DirectIOOn},
	} {
		availableMemory = func() (memavail.Available, error) {
			if c.avail < 0 {
				return memavail.Available{}, errors.New("no /proc/meminfo")
			}
			return memavail.Available{Bytes: c.avail, Source: "test"}, nil
		}
		e := open(t, model, c.opts)
		if e.opts.DirectIO != c.want || e.store.mapShards() == (c.want == DirectIOOn) {
			t.Errorf("%s (%d bytes of shards, %d available): direct I/O %v, mapped %v; want %v", c.name, need, c.avail, e.opts.DirectIO, e.store.mapShards(), c.want)
		}
		got, err := e.Logits(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(want, got); d != 0 {
			t.Errorf("%s: logits differ by %g", c.name, d)
		}
	}
}

func TestDirectIOFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want DirectIOMode
		ok   bool
	}{
		{nil, DirectIOAuto, true},
		{[]string{"--direct-io"}, DirectIOOn, true},
		{[]string{"--direct-io=true"}, DirectIOOn, true},
		{[]string{"--direct-io=on"}, DirectIOOn, true},
		{[]string{"--direct-io=false"}, DirectIOOff, true},
		{[]string{"--direct-io=off"}, DirectIOOff, true},
		{[]string{"--direct-io=auto"}, DirectIOAuto, true},
		{[]string{"--direct-io=maybe"}, 0, false},
	} {
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var m DirectIOMode
		fs.Var(&m, "direct-io", "")
		err := fs.Parse(c.args)
		if (err == nil) != c.ok || (c.ok && m != c.want) {
			t.Errorf("%v: got %v, %v; want %v (ok %v)", c.args, m, err, c.want, c.ok)
		}
		if c.ok {
			var again DirectIOMode
			if err := again.Set(m.String()); err != nil || again != m {
				t.Errorf("%v: String %q parses back as %v, %v", c.args, m.String(), again, err)
			}
		}
	}
}

// TestResidentRefusedWhenTooLarge: Open refuses --resident up front when the model's units do not fit in nine
// tenths of the available memory, naming both sizes and the troubleshooting section; it opens when they fit,
// when the memory is unknown, and when streaming.
func TestResidentRefusedWhenTooLarge(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 17, DType: checkpoint.BF16})
	ref := open(t, model, Options{})
	var need int64
	for _, u := range ref.store.set.Units() {
		need += u.BufferSize()
	}
	defer func(f func() (memavail.Available, error)) { availableMemory = f }(availableMemory)
	for _, c := range []struct {
		name  string
		avail int64 // < 0: unknown
		opts  Options
		ok    bool
	}{
		{"fits", need * 2, Options{Resident: true}, true},
		{"too big", need, Options{Resident: true}, false},
		{"unknown", -1, Options{Resident: true}, true},
		{"streamed", need / 4, Options{}, true},
	} {
		availableMemory = func() (memavail.Available, error) {
			if c.avail < 0 {
				return memavail.Available{}, errors.New("no /proc/meminfo")
			}
			return memavail.Available{Bytes: c.avail, Source: "memory.max"}, nil
		}
		e, err := Open(context.Background(), model, c.opts)
		if e != nil {
			e.Close()
		}
		if c.ok != (err == nil) {
			t.Errorf("%s: %v", c.name, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "--resident") || !strings.Contains(err.Error(), "memory.max") ||
			!strings.Contains(err.Error(), sections.Anchor(sections.ResidentTooLarge))) {
			t.Errorf("%s: the error does not name the flag, the bound and the section: %v", c.name, err)
		}
	}
}

// TestStreamEncodedOverlapped streams shards with encoded tensors read into buffers, where prefetch starts a
// unit's read while the previous unit still decodes (shards.LoadTrace): with every prefetch depth, and
// cancelled mid-pass, the logits are those of the raw split, bit for bit, and no buffer is lost.
func TestStreamEncodedOverlapped(t *testing.T) {
	ctx := context.Background()
	shape := tinyShape(false)
	shape.HiddenSize, shape.IntermediateSize = 128, 256
	model := writeTiny(t, synth.Options{Shape: shape, Seed: 21, DType: checkpoint.BF16})
	ck, err := checkpoint.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	planes := filepath.Join(t.TempDir(), "planes")
	set, err := shards.Split(ctx, ck, shards.SplitOptions{Out: planes, Encoding: shards.Planes, DiskRate: -1})
	if err != nil {
		t.Fatal(err)
	}
	encoded := 0
	for _, u := range set.Units() {
		if u.Layer >= 0 && u.DecodeSize > 0 {
			encoded++
		}
	}
	if encoded != shape.NumLayers {
		t.Fatalf("%d of %d layers have encoded tensors", encoded, shape.NumLayers)
	}
	ids := []int{1, 3, 5, 7, 9}
	want := tokenByToken(t, open(t, model, Options{DType: "f32"}), ids)
	for _, prefetch := range []int{1, 2, 3, 5} {
		for _, direct := range []DirectIOMode{DirectIOOn, DirectIOOff} {
			e := open(t, planes, Options{DType: "f32", Prefetch: prefetch, DirectIO: direct, NoMap: true, MemoryBudget: MemoryBudgetOff}) // every layer streamed
			if d := maxDiff(want, tokenByToken(t, e, ids)); d != 0 {
				t.Errorf("prefetch %d, direct I/O %v: logits differ from the raw split's by %g", prefetch, direct, d)
			}
			// A cancelled pass stops the stream with its loads in flight; the next pass gets every buffer back.
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := e.Logits(cctx, ids); err == nil {
				t.Errorf("prefetch %d: a cancelled pass returned no error", prefetch)
			}
			got, err := e.Logits(ctx, ids)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(e.store.pools.host); n != cap(e.store.pools.host) {
				t.Errorf("prefetch %d: %d of %d host buffers back after the passes", prefetch, n, cap(e.store.pools.host))
			}
			if d := maxDiff(want[len(ids)-1:], got[len(ids)-1:]); d > 1e-4 {
				t.Errorf("prefetch %d: the pass after a cancelled one differs by %g", prefetch, d)
			}
		}
	}

	// A shard corrupted under a running engine: the load that reads it fails the generation, naming it, while
	// the loads around it were in flight; every buffer comes back (the batch loop stops its stream once it has
	// handed the error to the sequences, so they come back just after Generate returns).
	e := open(t, planes, Options{DType: "f32", Prefetch: 3, DirectIO: DirectIOOn, NoMap: true, MemoryBudget: MemoryBudgetOff}) // every layer streamed
	if _, err := e.Logits(ctx, ids); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(planes, "layer.5.shard")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = e.Generate(ctx, Request{PromptIDs: ids, MaxNewTokens: 3}, nil)
	if err == nil || !strings.Contains(err.Error(), "layer.5") {
		t.Fatalf("got %v, want an error naming layer.5's shard", err)
	}
	for i := 0; len(e.store.pools.host) != cap(e.store.pools.host); i++ {
		if i == 200 {
			t.Fatalf("after the failed generation: %d of %d host buffers back", len(e.store.pools.host), cap(e.store.pools.host))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMemoryBudget: under a memory budget the store keeps as many decoder layers resident as it holds, spread
// among the streamed ones (the automatic budget when the model does not fit in the memory available: from that
// memory); the logits are those of streaming every layer, and the stream reads only the others.
func TestMemoryBudget(t *testing.T) {
	shape := tinyShape(false)
	shape.NumLayers = 40 // enough layers that a stream's footprint (three buffers, three times over) leaves room
	model := writeTiny(t, synth.Options{Shape: shape, Seed: 3})
	ctx := context.Background()
	ids := []int{1, 40, 41, 12, 7}
	all := open(t, model, Options{DirectIO: DirectIOOn, MemoryBudget: MemoryBudgetOff})
	want, err := all.Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	layer, files := all.store.layerBytes(), all.store.set.FileBytes()
	defer func(f func() (memavail.Available, error)) { availableMemory = f }(availableMemory)
	// A machine whose memory the shards just do not fit in (nine tenths of it): the automatic budget.
	small := files * 10 / 9
	autoLayers := int((small/10*9 - 3*3*layer - all.store.kvEstimate() - min(residencyMargin, small/4)) / layer)
	for _, c := range []struct {
		name     string
		opts     Options
		avail    int64
		resident int
		pattern  []bool
	}{
		{"3 layers' budget", Options{MemoryBudget: 3*layer + layer/2, DirectIO: DirectIOOn}, 1 << 40, 3, nil},
		{"auto, larger than memory", Options{}, small, autoLayers, nil},
		{"auto, --direct-io forced: streaming asked for", Options{DirectIO: DirectIOOn}, 1 << 40, 0, nil},
		{"mapped: the page cache keeps it", Options{MemoryBudget: 3 * layer}, 1 << 40, 0, nil},
		{"off", Options{MemoryBudget: MemoryBudgetOff}, small, 0, nil},
	} {
		availableMemory = func() (memavail.Available, error) { return memavail.Available{Bytes: c.avail, Source: "test"}, nil }
		e := open(t, model, c.opts)
		if st := e.Stats(); st.ResidentLayers != c.resident {
			t.Errorf("%s: %d layers resident, want %d", c.name, st.ResidentLayers, c.resident)
		}
		if c.pattern != nil && !slices.Equal(e.store.keep, c.pattern) {
			t.Errorf("%s: resident layers %v, want %v", c.name, e.store.keep, c.pattern)
		}
		got, err := e.Logits(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(got, want); d != 0 {
			t.Errorf("%s: logits differ from streaming every layer by %g", c.name, d)
		}
	}
	if autoLayers < 1 || autoLayers >= 40 {
		t.Errorf("the automatic case keeps %d layers: it should keep some, not all", autoLayers)
	}
}

// TestSpreadResident: the resident layers are spread among the streamed ones, none two apart more than the
// others, so that the disk reads a streamed layer while resident ones compute.
func TestSpreadResident(t *testing.T) {
	for _, c := range []struct {
		n, k int
		want string
	}{{8, 3, "..R..R.R"}, {8, 0, "........"}, {8, 8, "RRRRRRRR"}, {6, 3, ".R.R.R"}, {5, 1, "....R"}} {
		var got strings.Builder
		for _, r := range spread(c.n, c.k) {
			got.WriteString(map[bool]string{true: "R", false: "."}[r])
		}
		if got.String() != c.want {
			t.Errorf("%d of %d: %s, want %s", c.k, c.n, got.String(), c.want)
		}
	}
}
