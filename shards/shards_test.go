package shards

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/synth"
)

// tinyCheckpoint writes a small synthetic checkpoint (4 layers, untied) and opens it.
func tinyCheckpoint(t testing.TB, dt checkpoint.DType) *checkpoint.Checkpoint {
	t.Helper()
	dir := t.TempDir()
	shape := synth.Shape{HiddenSize: 64, IntermediateSize: 160, NumLayers: 4, NumHeads: 4, NumKVHeads: 2, VocabSize: 256,
		BOSTokenID: 1, EOSTokenID: 2}
	if err := synth.Write(dir, synth.Options{Shape: shape, DType: dt, Seed: 3, MaxFileBytes: 100_000}); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

func split(t testing.TB, ck *checkpoint.Checkpoint, out string, enc Encoding) *Set {
	t.Helper()
	s, err := Split(context.Background(), ck, SplitOptions{Out: out, Encoding: enc, DiskRate: -1})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// checkIdentical loads every unit and compares every tensor with the checkpoint's bytes.
func checkIdentical(t *testing.T, s *Set, ck *checkpoint.Checkpoint) {
	t.Helper()
	checkIdenticalWith(t, s, ck, s.Load)
}

// loadFunc is Set.Load or Set.Map.
type loadFunc func(ctx context.Context, unit string, buf *Buffer) (*Loaded, error)

// loaders returns s's two ways to load a unit, by name.
func loaders(s *Set) []struct {
	name string
	load loadFunc
} {
	return []struct {
		name string
		load loadFunc
	}{{"Load", s.Load}, {"Map", s.Map}}
}

// checkIdenticalWith loads every unit with load and compares every tensor with the checkpoint's bytes.
func checkIdenticalWith(t *testing.T, s *Set, ck *checkpoint.Checkpoint, load loadFunc) {
	t.Helper()
	buf := NewBuffer(0)
	defer buf.Release()
	n := 0
	for _, u := range s.Units() {
		l, err := load(context.Background(), u.Name, buf)
		if err != nil {
			t.Fatal(err)
		}
		if l.ReadBytes != u.FileSize || l.ReadBytes%pageSize != 0 {
			t.Fatalf("%s: read %d bytes, file is %d", u.Name, l.ReadBytes, u.FileSize)
		}
		for name, tn := range l.Tensors {
			src, ok := ck.Tensor(name)
			if !ok {
				t.Fatalf("%s: tensor %q not in checkpoint", u.Name, name)
			}
			want := make([]byte, src.Length)
			if err := checkpoint.ReadTensorAt(src, want); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(tn.Data, want) || tn.DType != src.DType || !slices.Equal(tn.Shape, src.Shape) {
				t.Fatalf("%s: tensor %q differs from the checkpoint", u.Name, name)
			}
			if len(tn.Data) > 0 && uintptr(unsafe.Pointer(&tn.Data[0]))%dataAlign != 0 {
				t.Fatalf("%s: tensor %q data not 64-byte aligned", u.Name, name)
			}
			if len(tn.Data) > 0 && !within(tn.Data, buf.Bytes()) && (buf.mapped == nil || !within(tn.Data, buf.mapped)) {
				t.Fatalf("%s: tensor %q does not alias the buffer", u.Name, name)
			}
			n++
		}
	}
	if n != len(ck.Tensors) {
		t.Fatalf("loaded %d tensors, checkpoint has %d", n, len(ck.Tensors))
	}
}

func within(b, buf []byte) bool {
	if len(b) == 0 || len(buf) == 0 {
		return false
	}
	p, lo := uintptr(unsafe.Pointer(&b[0])), uintptr(unsafe.Pointer(&buf[0]))
	return p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(buf))
}

func TestSplitStoriesBitIdentical(t *testing.T) {
	ck, err := checkpoint.Open(testutil.SharedPath(t, "models", "stories260K-hf"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	s := split(t, ck, out, Raw)
	var names []string
	for _, u := range s.Units() {
		names = append(names, u.Name)
	}
	if got := strings.Join(names, " "); got != "embed layer.0 layer.1 layer.2 layer.3 layer.4 norm" {
		t.Fatalf("units %s", got)
	}
	checkIdentical(t, s, ck)
	checkCopied(t, ck.Dir, out)
	if s.Config.NumHiddenLayers != 5 || len(checkpoint.EOSTokenIDs(s.Config, s.Generation)) != 2 {
		t.Fatalf("config/generation not read back: %+v %+v", s.Config, s.Generation)
	}
	r, err := s.Verify(context.Background(), ck)
	if err != nil || !r.OK() || r.Tensors != len(ck.Tensors) {
		t.Fatalf("verify: %+v %v", r, err)
	}
}

func TestEncodingsRoundTrip(t *testing.T) {
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F32} {
		ck := tinyCheckpoint(t, dt)
		for _, enc := range []Encoding{Raw, Zstd, ShuffleZstd, Planes} {
			t.Run(string(dt)+"/"+string(enc), func(t *testing.T) {
				s := split(t, ck, t.TempDir(), enc)
				checkIdentical(t, s, ck)
				var encoded int
				var stored, raw int64
				for _, u := range s.Units() {
					for _, ti := range u.Tensors {
						stored += ti.EncodedLength
						raw += ti.Length
						if ti.Encoding != Raw {
							encoded++
						}
					}
					if (u.DecodeSize > 0) != slices.ContainsFunc(u.Tensors, func(t TensorInfo) bool { return t.Encoding != Raw }) {
						t.Fatalf("%s: DecodeSize %d inconsistent with encodings", u.Name, u.DecodeSize)
					}
				}
				if enc == Raw && (encoded != 0 || stored != raw) {
					t.Fatalf("raw split stored %d encoded tensors", encoded)
				}
				// Shuffled N(0, 0.02) weights always compress; plain zstd may store them raw.
				if (enc == ShuffleZstd || enc == Planes) && (encoded == 0 || stored >= raw) {
					t.Fatalf("shuffle-zstd: %d encoded tensors, %d stored bytes for %d raw", encoded, stored, raw)
				}
				t.Logf("%s %s: %d of %d bytes stored (%.2fx)", dt, enc, stored, raw, float64(raw)/float64(stored))
			})
		}
	}
}

func TestShuffleRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 7, shuffleBlock - 2, shuffleBlock, shuffleBlock + 6, 3*shuffleBlock + 5} {
		for _, es := range []int{2, 4} {
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i*31 + i/7)
			}
			dst := make([]byte, n)
			shuffle(dst, src, es)
			if n >= 2*es && bytes.Equal(dst, src) {
				t.Fatalf("n=%d es=%d: shuffle changed nothing", n, es)
			}
			unshuffleInPlace(dst, make([]byte, shuffleBlock), es)
			if !bytes.Equal(dst, src) {
				t.Fatalf("n=%d es=%d: round trip differs", n, es)
			}
		}
	}
}

// failingWriter fails once `left` bytes have been written.
type failingWriter struct {
	w    io.Writer
	left *int64
}

var errInjected = errors.New("injected write failure")

func (f failingWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > *f.left {
		n, _ := f.w.Write(p[:*f.left])
		*f.left = 0
		return n, errInjected
	}
	*f.left -= int64(len(p))
	return f.w.Write(p)
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestInterruptedSplitResumes(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := t.TempDir()
	// Fail in the middle of the third shard (embed and layer.0 complete).
	left := int64(0)
	var plans []unitPlan
	plans, err := planUnits(ck)
	if err != nil {
		t.Fatal(err)
	}
	left = estimateSize(plans[0]) + estimateSize(plans[1])/1 + plans[2].bytes()/2
	testHookWriter = func(w io.Writer) io.Writer { return failingWriter{w, &left} }
	_, err = Split(context.Background(), ck, SplitOptions{Out: out})
	testHookWriter = nil
	if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "layer.1.shard") {
		t.Fatalf("want the injected failure while writing layer.1.shard, got %v", err)
	}
	names := listDir(t, out)
	if slices.Contains(names, ManifestFile) || IsSet(out) {
		t.Fatal("interrupted split left a manifest")
	}
	for _, n := range names {
		if !strings.HasSuffix(n, ".shard") || strings.HasPrefix(n, ".") {
			t.Fatalf("interrupted split left %q", n)
		}
	}
	if want := []string{"embed.shard", "layer.0.shard"}; !slices.Equal(names, want) {
		t.Fatalf("after the failure: %v, want %v", names, want)
	}
	if _, err := Open(out); err == nil || !strings.Contains(err.Error(), "no manifest.parquet") {
		t.Fatalf("Open of an incomplete split: %v", err)
	}
	before, _ := os.Stat(filepath.Join(out, "embed.shard"))
	stale := filepath.Join(out, ".layer.1.shard.tmp123") // as left by a killed process
	os.WriteFile(stale, []byte("partial"), 0o644)
	s := split(t, ck, out, Raw)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale temporary file not removed: %v", err)
	}
	checkIdentical(t, s, ck)
	after, _ := os.Stat(filepath.Join(out, "embed.shard"))
	if !os.SameFile(before, after) {
		t.Fatal("re-run rewrote embed.shard, which was complete")
	}
}

func TestResumeRedoesOnlyBadShards(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := t.TempDir()
	s := split(t, ck, out, ShuffleZstd)
	stat := func() map[string]os.FileInfo {
		m := map[string]os.FileInfo{}
		for _, u := range s.Units() {
			st, err := os.Stat(filepath.Join(out, u.File))
			if err != nil {
				t.Fatal(err)
			}
			m[u.Name] = st
		}
		return m
	}
	before := stat()
	stray := filepath.Join(out, "layer.9.shard") // from an earlier split of a deeper model
	os.WriteFile(stray, []byte("old"), 0o644)
	if err := os.Remove(filepath.Join(out, "layer.1.shard")); err != nil {
		t.Fatal(err)
	}
	flipByte(t, filepath.Join(out, "layer.3.shard"), s.mustUnit(t, "layer.3").Tensors[2].Offset+5)

	s = split(t, ck, out, ShuffleZstd)
	after := stat()
	if _, err := os.Stat(stray); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("shard of a unit the checkpoint does not have was kept: %v", err)
	}
	// layer.1 was deleted, so it is back only if it was rewritten (its old inode may be reused: not compared).
	for name, st := range after {
		if rewritten := !os.SameFile(before[name], st); name != "layer.1" && rewritten != (name == "layer.3") {
			t.Errorf("%s: rewritten=%v, want %v", name, rewritten, name == "layer.3")
		}
	}
	checkIdentical(t, s, ck)

	// Changing the encoding redoes everything.
	s = split(t, ck, out, Raw)
	for name, st := range stat() {
		if os.SameFile(after[name], st) {
			t.Errorf("%s kept after an encoding change", name)
		}
	}
	checkIdentical(t, s, ck)
}

func (s *Set) mustUnit(t *testing.T, name string) UnitInfo {
	t.Helper()
	u, ok := s.Unit(name)
	if !ok {
		t.Fatalf("no unit %s", name)
	}
	return u
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptShardErrors(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	for _, enc := range []Encoding{Raw, ShuffleZstd} {
		out := t.TempDir()
		s := split(t, ck, out, enc)
		for _, ld := range loaders(s) {
			testCorruptShard(t, s, ck, enc, ld.name, ld.load)
		}
	}
}

func testCorruptShard(t *testing.T, s *Set, ck *checkpoint.Checkpoint, enc Encoding, how string, loadUnit loadFunc) {
	out := s.Dir
	u := s.mustUnit(t, "layer.2")
	path := filepath.Join(out, u.File)
	orig, _ := os.ReadFile(path)
	tn := u.Tensors[3]
	load := func() error {
		buf := NewBuffer(0)
		_, err := loadUnit(context.Background(), "layer.2", buf)
		if err != nil && buf.mapped != nil {
			t.Errorf("%s %s: failed load left the file mapped", enc, how)
		}
		buf.Release()
		os.WriteFile(path, orig, 0o644)
		return err
	}
	cases := []struct {
		name    string
		corrupt func()
		want    []string
	}{
		{"data byte", func() { flipByte(t, path, tn.Offset+tn.EncodedLength/2) }, []string{path, tn.Name}},
		{"header byte", func() { flipByte(t, path, u.FileSize-trailerSize-10) }, []string{path, "header checksum mismatch"}},
		{"truncated", func() { os.WriteFile(path, orig[:len(orig)-100], 0o644) }, []string{path, "truncated"}},
		{"magic", func() { flipByte(t, path, 0) }, []string{path, "not a layerstream shard"}},
		{"missing", func() { os.Remove(path) }, []string{path, "is missing"}},
	}
	for _, c := range cases {
		c.corrupt()
		err := load()
		if err == nil {
			t.Fatalf("%s %s %s: succeeded", enc, how, c.name)
		}
		for _, w := range append(c.want, "run layerstream split again", sections.Corrupt) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s %s %s: error %q does not mention %q", enc, how, c.name, err, w)
			}
		}
	}
	if enc == Raw {
		flipByte(t, path, tn.Offset+1)
		if err := load(); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
			t.Errorf("%s raw data flip: %v", how, err)
		}
	}
	// A shard swapped for another unit's shard disagrees with the manifest.
	other, _ := os.ReadFile(filepath.Join(out, "layer.1.shard"))
	os.WriteFile(path, other, 0o644)
	// (Encoded shards may differ in size: then the size check catches it first.)
	if err := load(); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("%s %s swapped shard: %v", enc, how, err)
	}
	// Verify reports the corruption and names the tensor.
	flipByte(t, path, tn.Offset+tn.EncodedLength/2)
	r, err := s.Verify(context.Background(), ck)
	os.WriteFile(path, orig, 0o644)
	if err != nil || r.OK() || !strings.Contains(strings.Join(r.Problems, "\n"), tn.Name) {
		t.Errorf("verify of a corrupted set: %+v %v", r, err)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no manifest.parquet") {
		t.Fatalf("empty folder: %v", err)
	}
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := t.TempDir()
	split(t, ck, out, Raw)
	mf := filepath.Join(out, ManifestFile)
	b, _ := os.ReadFile(mf)
	os.WriteFile(mf, b[:len(b)/2], 0o644)
	if _, err := Open(out); err == nil || !strings.Contains(err.Error(), ManifestFile) {
		t.Fatalf("truncated manifest: %v", err)
	}
	os.WriteFile(mf, b, 0o644)
	os.Remove(filepath.Join(out, "config.json"))
	if _, err := Open(out); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Fatalf("missing config: %v", err)
	}
}

// TestPin: a shard folder missing a unit's file, or holding one of another size than the manifest's, is refused
// by Pin naming the file, before anything is read.
func TestPin(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := t.TempDir()
	s := split(t, ck, out, Raw)
	if err := s.Pin(); err != nil {
		t.Fatalf("a whole split: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, "layer.1.shard")
	orig, _ := os.ReadFile(path)
	os.WriteFile(path, orig[:len(orig)-4096], 0o644)
	for _, damage := range []string{"truncated or replaced", "is missing"} {
		if damage == "is missing" {
			os.Remove(path)
		}
		err := s.Pin()
		for _, want := range []string{path, damage, "run layerstream split again", sections.Corrupt} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("shard %s: error %v does not say %q", damage, err, want)
			}
		}
	}
}

// TestPinnedSetSurvivesResplit: a process reading a split while another re-splits it after its checkpoint
// changed (new files renamed over the old ones) keeps reading the split it opened, whole and verified, by Load
// and Map, through the page cache or with O_DIRECT; a set not pinned meets the new files, which do not match its
// manifest.
func TestPinnedSetSurvivesResplit(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	ref := tinyCheckpoint(t, checkpoint.BF16) // the same weights, left unchanged
	out := t.TempDir()
	split(t, ck, out, Raw).Close()
	open := func(pin bool) *Set {
		s, err := Open(out)
		if err != nil {
			t.Fatal(err)
		}
		if pin {
			if err := s.Pin(); err != nil {
				t.Fatal(err)
			}
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	pinned, unpinned := open(true), open(false)
	if _, err := Ensure(context.Background(), overwriteWith(t, ck, 9), SplitOptions{Out: out, DiskRate: -1}); err != nil {
		t.Fatal(err)
	}
	for _, direct := range []bool{false, true} {
		pinned.SetDirectIO(direct)
		for _, l := range loaders(pinned) {
			checkIdenticalWith(t, pinned, ref, l.load)
		}
		if direct && !pinned.direct.Load() {
			t.Log("O_DIRECT refused by this filesystem: only page-cache reads of the pinned files were checked")
		}
	}
	pinned.SetDirectIO(false)
	pinned.SetKeepMapped(true)
	for range 2 { // mapped, then the kept mapping reused
		for _, u := range pinned.Units() {
			if _, err := pinned.Map(context.Background(), u.Name, NewBuffer(0)); err != nil {
				t.Fatalf("kept mapping of %s: %v", u.Name, err)
			}
		}
	}
	if _, err := unpinned.Load(context.Background(), "layer.1", NewBuffer(0)); err == nil {
		t.Error("an unpinned set read a re-split file without an error: the premise of this test no longer holds")
	}
}

// TestSplitRefusesCheckpointFolder: --out naming the checkpoint's own folder (by any path) is refused before
// anything is written.
func TestSplitRefusesCheckpointFolder(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	before, _ := os.ReadDir(ck.Dir)
	for _, out := range []string{ck.Dir, ck.Dir + "/."} {
		_, err := Split(context.Background(), ck, SplitOptions{Out: out, DiskRate: -1})
		if err == nil || !strings.Contains(err.Error(), "the checkpoint's own folder") {
			t.Errorf("--out %s: %v", out, err)
		}
	}
	if after, _ := os.ReadDir(ck.Dir); len(after) != len(before) {
		t.Errorf("the checkpoint's folder went from %d to %d entries", len(before), len(after))
	}
}

func TestSplitRejectsBadCheckpoints(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	bad := *ck
	bad.Tensors = append(slices.Clone(ck.Tensors), checkpoint.TensorInfo{Name: "model.rotary.inv_freq", DType: checkpoint.F32})
	if _, err := Split(context.Background(), &bad, SplitOptions{Out: t.TempDir()}); err == nil || !strings.Contains(err.Error(), `"model.rotary.inv_freq" in`) {
		t.Fatalf("unknown tensor: %v", err)
	}
	cfg := *ck.Config
	cfg.NumHiddenLayers = 3
	bad = *ck
	bad.Config = &cfg
	if _, err := Split(context.Background(), &bad, SplitOptions{Out: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "num_hidden_layers=3") {
		t.Fatalf("layer count mismatch: %v", err)
	}
	cfg.NumHiddenLayers = 5
	if _, err := Split(context.Background(), &bad, SplitOptions{Out: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "no tensors for unit layer.4 (config.json's num_hidden_layers: 5)") {
		t.Fatalf("missing layer: %v", err)
	}
	// Issue #36 case 8: a config contradicting its weights is refused before the split starts, naming
	// config.json's key and the tensor, and leaves no folder behind.
	for _, c := range []struct {
		edit func(*checkpoint.Config)
		want string
	}{
		{func(c *checkpoint.Config) { c.VocabSize = 1 << 40 }, "config.json's vocab_size and hidden_size (1099511627776, 64) contradict the tensor model.embed_tokens.weight of shape [256 64]"},
		{func(c *checkpoint.Config) { c.HiddenSize = 32 }, "contradict the tensor model.embed_tokens.weight"},
	} {
		cfg := *ck.Config
		c.edit(&cfg)
		bad = *ck
		bad.Config = &cfg
		out := filepath.Join(t.TempDir(), "split")
		if _, err := Ensure(context.Background(), &bad, SplitOptions{Out: out}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config contradicting its weights: %v; want %q", err, c.want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("a refused split left %s behind (%v)", out, err)
		}
	}
	if _, err := Split(context.Background(), ck, SplitOptions{Out: t.TempDir(), Encoding: "lz4"}); err == nil || !strings.Contains(err.Error(), `"lz4"`) {
		t.Fatalf("bad encoding: %v", err)
	}
	if err := checkFreeSpace(t.TempDir(), 1<<62); err == nil || !strings.Contains(err.Error(), "need 4611686018427387904 bytes") || !strings.Contains(err.Error(), "available") {
		t.Fatalf("free space: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := t.TempDir()
	if _, err := Split(ctx, ck, SplitOptions{Out: out}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled split: %v", err)
	}
	if IsSet(out) {
		t.Fatal("cancelled split wrote a manifest")
	}
}

func TestDirectIO(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := t.TempDir()
	s := split(t, ck, out, Raw)
	u := s.Units()[1]
	_, err := readWhole(filepath.Join(out, u.File), NewBuffer(0), u.FileSize, openDirect)
	s.SetDirectIO(true)
	checkIdentical(t, s, ck) // works with O_DIRECT, or after falling back
	if err != nil {
		if s.direct.Load() {
			t.Fatal("direct I/O still on after the filesystem refused it")
		}
		t.Skipf("O_DIRECT not supported on %s (%v): checked the fallback only", out, err)
	}
	if !s.direct.Load() {
		t.Fatal("direct I/O was turned off although the filesystem supports it")
	}
}

func TestMap(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	for _, enc := range []Encoding{Raw, ShuffleZstd} {
		s := split(t, ck, t.TempDir(), enc)
		checkIdenticalWith(t, s, ck, s.Map)
		s.SetVerify(VerifyOnce)
		checkIdenticalWith(t, s, ck, s.Map) // verified
		checkIdenticalWith(t, s, ck, s.Map) // trusted: unchanged files
	}

	s := split(t, ck, t.TempDir(), Raw)
	u := s.mustUnit(t, "layer.1")
	path := filepath.Join(s.Dir, u.File)
	mappings := func() int { // how many mappings of path this process has
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Skipf("no /proc/self/maps: %v", err)
		}
		return strings.Count(string(b), path)
	}
	buf := NewBuffer(0)
	l, err := s.Map(context.Background(), u.Name, buf)
	if err != nil {
		t.Fatal(err)
	}
	if n := mappings(); n != 1 || buf.mapped == nil {
		t.Fatalf("after Map: %d mappings of %s", n, path)
	}
	if l.ReadBytes != u.FileSize || !within(l.Tensors[u.Tensors[0].Name].Data, buf.mapped) {
		t.Fatal("Map's tensors do not alias the mapping")
	}
	if _, err := s.Load(context.Background(), u.Name, buf); err != nil { // a Load into the buffer unmaps
		t.Fatal(err)
	}
	if n := mappings(); n != 0 || buf.mapped != nil {
		t.Fatalf("after Load into the buffer: %d mappings", n)
	}
	s.Map(context.Background(), u.Name, buf)
	if err := buf.Release(); err != nil || mappings() != 0 {
		t.Fatalf("after Release: %d mappings (%v)", mappings(), err)
	}
	if err := buf.Release(); err != nil {
		t.Fatal(err)
	}

	// Kept mappings: one per file, reused while the file is unchanged, replaced when it is; Close unmaps all.
	s.SetKeepMapped(true)
	s.SetVerify(VerifyOnce)
	first, err := s.Map(context.Background(), u.Name, buf)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Map(context.Background(), u.Name, NewBuffer(0))
	if err != nil {
		t.Fatal(err)
	}
	name := u.Tensors[0].Name
	if &first.Tensors[name].Data[0] != &again.Tensors[name].Data[0] || mappings() != 1 || buf.mapped != nil {
		t.Fatalf("kept mapping not reused: %d mappings", mappings())
	}
	// The unchanged, verified file's checked tensors are handed out again (no table read); a touched file (same
	// inode, new times) is checked again.
	if reflect.ValueOf(first.Tensors).UnsafePointer() != reflect.ValueOf(again.Tensors).UnsafePointer() || again.Verified {
		t.Fatal("the kept tensors of an unchanged file were not reused")
	}
	later := time.Now().Add(time.Second)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if touched, err := s.Map(context.Background(), u.Name, NewBuffer(0)); err != nil || !touched.Verified {
		t.Fatalf("a touched file was not verified again: %v", err)
	}
	orig, _ := os.ReadFile(path)
	bad := slices.Clone(orig)
	bad[u.Tensors[0].Offset] ^= 1
	os.WriteFile(path+".new", bad, 0o644)
	os.Rename(path+".new", path) // a new file: mapped anew and verified
	if _, err := s.Map(context.Background(), u.Name, buf); err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("replaced corrupted file under kept mappings: %v", err)
	}
	if first.Tensors[name].Data[0] != orig[u.Tensors[0].Offset] { // the old mapping is still valid
		t.Fatal("old mapping changed")
	}
	os.WriteFile(path+".new", orig, 0o644)
	os.Rename(path+".new", path)
	if _, err := s.Map(context.Background(), u.Name, buf); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil || mappings() != 0 {
		t.Fatalf("after Close: %d mappings (%v)", mappings(), err)
	}
	s.SetKeepMapped(false)

	// With O_DIRECT, Map reads (the point of O_DIRECT is to bypass the page cache).
	s.SetDirectIO(true)
	if _, err := s.Map(context.Background(), u.Name, buf); err != nil || buf.mapped != nil {
		t.Fatalf("Map with direct I/O: mapped=%v, %v", buf.mapped != nil, err)
	}
	s.SetDirectIO(false)

	// Where mapping fails, Map warns once and loads from then on.
	testHookMapFile = func(*os.File, int64) ([]byte, error) { return nil, syscall.ENODEV }
	defer func() { testHookMapFile = mapFile }()
	checkIdenticalWith(t, s, ck, s.Map)
	if !s.noMap.Load() {
		t.Fatal("mapping still on after it failed")
	}
	if _, err := s.Map(context.Background(), "nope", buf); err == nil || !strings.Contains(err.Error(), `no unit "nope"`) {
		t.Fatalf("unknown unit: %v", err)
	}
}

func TestDirectIOFallback(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	s := split(t, ck, t.TempDir(), Raw)
	testHookOpenDirect = func(path string) (*os.File, error) {
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EINVAL}
	}
	defer func() { testHookOpenDirect = openDirect }()
	s.SetDirectIO(true)
	checkIdentical(t, s, ck)
	if s.direct.Load() {
		t.Fatal("direct I/O still on after the filesystem refused it")
	}
}

func TestDefaultDir(t *testing.T) {
	dir := t.TempDir()
	cache := t.TempDir()
	t.Setenv("LAYERSTREAM_CACHE", cache)
	// A checkpoint folder is never written into, writable or not.
	if got, want := DefaultDir(dir), filepath.Join(cache, cacheName(dir)); got != want {
		t.Fatalf("writable: %s, want %s", got, want)
	}
	ro := filepath.Join(dir, "ro")
	os.Mkdir(ro, 0o555)
	if got, want := DefaultDir(ro), filepath.Join(cache, cacheName(ro)); got != want {
		t.Fatalf("read-only: %s, want %s", got, want)
	}
	// A split made inside it by an earlier version is kept.
	os.Mkdir(filepath.Join(dir, "layerstream"), 0o755)
	if got := DefaultDir(dir); got != filepath.Join(dir, "layerstream") {
		t.Fatalf("earlier split inside: %s", got)
	}
	hf := "/home/u/.cache/huggingface/hub/models--TinyLlama--TinyLlama-1.1B/snapshots/abc123"
	if got := DefaultDir(hf); got != filepath.Join(cache, "TinyLlama--TinyLlama-1.1B@abc123") {
		t.Fatalf("hub snapshot: %s", got)
	}
	if got := cacheName("/data/my models/x"); !strings.HasPrefix(got, "data_my_models_x-") || len(got) != len("data_my_models_x-")+12 {
		t.Fatalf("sanitized: %s", got)
	}
	// A writable snapshot is still never written into; a folder inside one is keyed by its path too.
	snap := filepath.Join(dir, "hub", "models--org--name", "snapshots", "0123abcd")
	os.MkdirAll(filepath.Join(snap, "sub dir"), 0o755)
	if got, want := DefaultDir(snap), filepath.Join(cache, "org--name@0123abcd"); got != want {
		t.Fatalf("writable snapshot: %s, want %s", got, want)
	}
	if got, want := DefaultDir(filepath.Join(snap, "sub dir")), filepath.Join(cache, "org--name@0123abcd_sub_dir-"); !strings.HasPrefix(got, want) {
		t.Fatalf("folder in a snapshot: %s, want %s…", got, want)
	}
	if a, b := DefaultDir(filepath.Join(snap, "sub dir")), DefaultDir(filepath.Join(snap, "sub_dir")); a == b {
		t.Fatalf("two folders in a snapshot share %s", a)
	}
	// Folders that only look alike are ordinary checkpoints.
	for _, d := range []string{filepath.Join(dir, "hub", "models--org--name"), filepath.Join(dir, "hub", "models--org--name", "snapshots")} {
		if got := DefaultDir(d); got != filepath.Join(cache, cacheName(d)) {
			t.Fatalf("%s: %s", d, got)
		}
	}
	if runtime.GOOS == "linux" { // os.UserCacheDir is $XDG_CACHE_HOME there
		xdg := t.TempDir()
		t.Setenv("LAYERSTREAM_CACHE", "")
		t.Setenv("XDG_CACHE_HOME", xdg)
		if got, want := DefaultDir(snap), filepath.Join(xdg, "layerstream", "org--name@0123abcd"); got != want {
			t.Fatalf("snapshot without $LAYERSTREAM_CACHE: %s, want %s", got, want)
		}
	}
}

func TestSplitSnapshotIntoCache(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	snap := filepath.Join(t.TempDir(), "models--org--tiny", "snapshots", "feed42")
	if err := os.MkdirAll(filepath.Dir(snap), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(ck.Dir, snap); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(snap)
	if err != nil {
		t.Fatal(err)
	}
	before := listDir(t, snap)
	cache := t.TempDir()
	t.Setenv("LAYERSTREAM_CACHE", cache)
	s, err := Split(context.Background(), ck, SplitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, "org--tiny@feed42"); s.Dir != want {
		t.Fatalf("split into %s, want %s", s.Dir, want)
	}
	if after := listDir(t, snap); !slices.Equal(after, before) {
		t.Fatalf("split wrote into the snapshot: %v, was %v", after, before)
	}
	checkIdentical(t, s, ck)
}

func TestBufferAlignedAndGrown(t *testing.T) {
	b := NewBuffer(10)
	if b.Cap() != pageSize || uintptr(unsafe.Pointer(&b.Bytes()[0]))%pageSize != 0 {
		t.Fatalf("cap %d", b.Cap())
	}
	b.ensure(3 * pageSize)
	if b.Cap() != 3*pageSize || uintptr(unsafe.Pointer(&b.Bytes()[0]))%pageSize != 0 {
		t.Fatalf("grown cap %d", b.Cap())
	}
	if _, err := (&Set{}).Load(context.Background(), "layer.0", b); err == nil || !strings.Contains(err.Error(), `no unit "layer.0"`) {
		t.Fatalf("unknown unit: %v", err)
	}
}

func TestCRC32CCombine(t *testing.T) {
	b := make([]byte, 3*crcSegment+123)
	for i := range b {
		b[i] = byte(i*131 + i>>9)
	}
	for _, cut := range []int{0, 1, 63, crcSegment, len(b) - 1, len(b)} {
		got := crc32cCombine(crc32c(b[:cut]), crc32c(b[cut:]), int64(len(b)-cut))
		if want := crc32c(b); got != want {
			t.Fatalf("cut %d: combined %08x, want %08x", cut, got, want)
		}
	}
	shift := segmentShift()
	cut := len(b) - crcSegment
	if got, want := gf2Times(&shift, crc32c(b[:cut]))^crc32c(b[cut:]), crc32c(b); got != want {
		t.Fatalf("segment shift: %08x, want %08x", got, want)
	}
}

func TestManifestValidation(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := t.TempDir()
	s := split(t, ck, out, Raw)
	good := slices.Clone(s.Units())
	rewrite := func(units []UnitInfo) error {
		if err := writeManifest(out, units, s.Source()); err != nil {
			t.Fatal(err)
		}
		_, err := Open(out)
		return err
	}
	bad := slices.Clone(good)
	bad = append(bad[:2], bad[3:]...) // drop layer.1
	if err := rewrite(bad); err == nil || !strings.Contains(err.Error(), "do not match a 4-layer model") {
		t.Errorf("missing layer: %v", err)
	}
	bad = slices.Clone(good)
	bad[1].File = "../layer.0.shard"
	if err := rewrite(bad); err == nil || !strings.Contains(err.Error(), "plain file name") {
		t.Errorf("escaping file: %v", err)
	}
	bad = slices.Clone(good)
	bad[1].Name = "layer.x"
	if err := rewrite(bad); err == nil || !strings.Contains(err.Error(), `bad unit "layer.x"`) {
		t.Errorf("bad unit name: %v", err)
	}
	bad = slices.Clone(good)
	ts := slices.Clone(bad[1].Tensors)
	ts[0].Offset = bad[1].FileSize
	bad[1].Tensors = ts
	if err := rewrite(bad); err == nil || !strings.Contains(err.Error(), "outside the data section") || !strings.Contains(err.Error(), ts[0].Name) {
		t.Errorf("tensor outside its file: %v", err)
	}
	if err := rewrite(good); err != nil {
		t.Fatal(err)
	}
}

func TestSplitDefaultDir(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.F32)
	s, err := Split(context.Background(), ck, SplitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := DefaultDir(ck.Dir); s.Dir != want || !IsSet(want) || strings.HasPrefix(want, ck.Dir) {
		t.Fatalf("split into %s, want %s", s.Dir, want)
	}
	var calls int
	var last, total int64
	if _, err := Split(context.Background(), ck, SplitOptions{Progress: func(d, tot int64) { calls, last, total = calls+1, d, tot }}); err != nil {
		t.Fatal(err)
	}
	if calls == 0 || last != total || total == 0 {
		t.Fatalf("progress: %d calls, last %d of %d", calls, last, total)
	}
}

func TestMultiFrameTensors(t *testing.T) {
	dir := t.TempDir()
	// A 8192×320 bf16 embedding is 5.2 MB: two zstd frames.
	shape := synth.Shape{HiddenSize: 320, IntermediateSize: 64, NumLayers: 1, NumHeads: 4, VocabSize: 8192, TieEmbeddings: true}
	if err := synth.Write(dir, synth.Options{Shape: shape, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Raw: the embedding spans many read chunks and checksum pieces; damage to any piece is caught.
	out := t.TempDir()
	s := split(t, ck, out, Raw)
	checkIdentical(t, s, ck)
	emb := s.mustUnit(t, "embed").Tensors[0]
	path := filepath.Join(out, "embed.shard")
	orig, _ := os.ReadFile(path)
	for _, off := range []int64{0, readChunk - 1, crcSegment + 5, emb.Length - 1} {
		flipByte(t, path, emb.Offset+off)
		_, err := s.Load(context.Background(), "embed", NewBuffer(0))
		if err == nil || !strings.Contains(err.Error(), "checksum mismatch") || !strings.Contains(err.Error(), emb.Name) {
			t.Fatalf("raw: byte %d of %d flipped: %v", off, emb.Length, err)
		}
		os.WriteFile(path, orig, 0o644)
	}
	for _, enc := range []Encoding{Zstd, ShuffleZstd, Planes} {
		out := t.TempDir()
		s := split(t, ck, out, enc)
		checkIdentical(t, s, ck)
		emb := s.mustUnit(t, "embed").Tensors[0]
		if emb.Encoding != enc || len(emb.Frames) != 2 {
			t.Fatalf("%s: embedding stored %s in %d frames, want %s in 2", enc, emb.Encoding, len(emb.Frames), enc)
		}
		// Damage the second frame: the error names the shard, the tensor and the frame or the checksum.
		path := filepath.Join(out, "embed.shard")
		flipByte(t, path, emb.Offset+emb.Frames[0]+emb.Frames[1]/2)
		_, err := s.Load(context.Background(), "embed", NewBuffer(0))
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), emb.Name) ||
			!(strings.Contains(err.Error(), "frame 1: ") || strings.Contains(err.Error(), "checksum mismatch")) {
			t.Fatalf("%s: damaged frame: %v", enc, err)
		}
	}
}

func TestConcurrentLoads(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	s := split(t, ck, t.TempDir(), ShuffleZstd)
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			buf := NewBuffer(int(s.MaxBufferSize()))
			for range 3 {
				for _, u := range s.Units() {
					if _, err := s.Load(context.Background(), u.Name, buf); err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestVerifyOnce(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	for _, enc := range []Encoding{Raw, ShuffleZstd} {
		out := t.TempDir()
		s := split(t, ck, out, enc)
		u := s.mustUnit(t, "layer.2")
		path := filepath.Join(out, u.File)
		orig, _ := os.ReadFile(path)
		tn := u.Tensors[3]
		buf := NewBuffer(0)
		defer buf.Release()
		load := func(wantVerified bool) error {
			t.Helper()
			l, err := s.Load(context.Background(), u.Name, buf)
			if err == nil && l.Verified != wantVerified {
				t.Fatalf("%s: Verified=%v, want %v", enc, l.Verified, wantVerified)
			}
			// Map follows the same policy, and after it Load again.
			m, merr := s.Map(context.Background(), u.Name, buf)
			wantMap := VerifyPolicy(s.policy.Load()) == VerifyAlways // else Load just verified it
			if (err == nil) != (merr == nil) || (m != nil && m.Verified != wantMap) {
				t.Fatalf("%s: Load gave %v, then Map %v (verified %v)", enc, err, merr, m != nil && m.Verified)
			}
			return err
		}
		// Always (the default) checks on every Load.
		for range 2 {
			if err := load(true); err != nil {
				t.Fatal(err)
			}
		}
		s.SetVerify(VerifyOnce)
		if err := load(false); err != nil { // verified above under Always
			t.Fatal(err)
		}
		// Rewritten in place with a flipped byte: a new modification time (set apart from the old one, which
		// the same clock tick could otherwise repeat) makes it a new file, checked again.
		st, _ := os.Stat(path)
		bad := slices.Clone(orig)
		bad[tn.Offset+tn.EncodedLength/2] ^= 0x10
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(path, st.ModTime().Add(time.Second), st.ModTime().Add(time.Second))
		if err := load(true); err == nil || !strings.Contains(err.Error(), tn.Name) {
			t.Fatalf("%s: in-place corruption after a verified load under VerifyOnce: %v", enc, err)
		}
		// Replaced by a corrupted copy (a new inode, as a split or a copy tool writes it): caught too.
		tmp := path + ".new"
		os.WriteFile(tmp, bad, 0o644)
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		if err := load(true); err == nil || !strings.Contains(err.Error(), tn.Name) {
			t.Fatalf("%s: replaced corrupted file under VerifyOnce: %v", enc, err)
		}
		// Restored: verified once more, then trusted while unchanged.
		os.WriteFile(tmp, orig, 0o644)
		os.Rename(tmp, path)
		if err := load(true); err != nil {
			t.Fatal(err)
		}
		if err := load(false); err != nil {
			t.Fatal(err)
		}
		// Verify checks every checksum whatever the policy.
		if l, err := s.load(context.Background(), u.Name, buf, true); err != nil || !l.Verified {
			t.Fatalf("%s: forced load under VerifyOnce: verified=%v, %v", enc, l != nil && l.Verified, err)
		}
	}
	if VerifyOnce.String() != "once" || VerifyAlways.String() != "always" {
		t.Fatal("policy names")
	}
}

// checkCopied checks that out holds exactly the CopiedFiles present in src, byte for byte.
func checkCopied(t *testing.T, src, out string) {
	t.Helper()
	for _, f := range CopiedFiles {
		want, werr := os.ReadFile(filepath.Join(src, f))
		got, err := os.ReadFile(filepath.Join(out, f))
		if errors.Is(werr, os.ErrNotExist) {
			if !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s is not in %s but is in the split: %v", f, src, err)
			}
			continue
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s not copied: %v", f, err)
		}
	}
}

func TestSplitCopiesChatTemplate(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	tpl := "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
	os.WriteFile(filepath.Join(ck.Dir, "chat_template.jinja"), []byte(tpl), 0o644)
	os.WriteFile(filepath.Join(ck.Dir, "tokenizer_config.json"), []byte(`{"bos_token": "<s>"}`), 0o644)
	out := t.TempDir()
	split(t, ck, out, Raw)
	checkCopied(t, ck.Dir, out)
	if b, _ := os.ReadFile(filepath.Join(out, "chat_template.jinja")); string(b) != tpl {
		t.Fatalf("chat_template.jinja: %q", b)
	}
	// The checkpoint drops its template: a re-split does not keep the old copy.
	os.Remove(filepath.Join(ck.Dir, "chat_template.jinja"))
	split(t, ck, out, Raw)
	checkCopied(t, ck.Dir, out)
}
