package shards

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/synth"
)

// captureLogs sends slog's default logger to a buffer for the rest of the test.
func captureLogs(t *testing.T) *testutil.SyncBuffer {
	t.Helper()
	buf := &testutil.SyncBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() { slog.SetDefault(old) })
	return buf
}

// overwriteWith writes a checkpoint of ck's shape with other weights (another seed) over ck's files, in place,
// as a fine-tune saved over its base would, and reopens it.
func overwriteWith(t *testing.T, ck *checkpoint.Checkpoint, seed uint64) *checkpoint.Checkpoint {
	t.Helper()
	other := t.TempDir()
	shape := synth.Shape{HiddenSize: 64, IntermediateSize: 160, NumLayers: 4, NumHeads: 4, NumKVHeads: 2, VocabSize: 256,
		BOSTokenID: 1, EOSTokenID: 2}
	dt := ck.Tensors[0].DType
	if err := synth.Write(other, synth.Options{Shape: shape, DType: dt, Seed: seed, MaxFileBytes: 100_000}); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(other)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			b, err := os.ReadFile(filepath.Join(other, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ck.Dir, e.Name()), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	ck2, err := checkpoint.Open(ck.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return ck2
}

// flipTensor changes the first byte of a tensor in place in its checkpoint file.
func flipTensor(t *testing.T, ck *checkpoint.Checkpoint, name string) {
	t.Helper()
	ti, ok := ck.Tensor(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	f, err := os.OpenFile(ti.File, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, ti.Offset)
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, ti.Offset); err != nil {
		t.Fatal(err)
	}
}

// identities returns each shard file's inode identity, to tell which ones a split rewrote.
func identities(t *testing.T, dir string) map[string]os.FileInfo {
	t.Helper()
	m := map[string]os.FileInfo{}
	names, _ := filepath.Glob(filepath.Join(dir, "*.shard"))
	for _, n := range names {
		st, err := os.Stat(n)
		if err != nil {
			t.Fatal(err)
		}
		m[filepath.Base(n)] = st
	}
	return m
}

func rewritten(before, after map[string]os.FileInfo) []string {
	var names []string
	for n, a := range after {
		if b, ok := before[n]; !ok || !os.SameFile(a, b) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// Issue #13 case 4: weights of the same shapes saved over the checkpoint. Split again (as split --verify
// advises) must re-split them, and Ensure (what generate does) must notice it too.
func TestSplitFollowsOverwrittenWeights(t *testing.T) {
	for _, entry := range []struct {
		name string
		run  func(context.Context, *checkpoint.Checkpoint, SplitOptions) (*Set, error)
	}{{"Split", Split}, {"Ensure", Ensure}} {
		t.Run(entry.name, func(t *testing.T) {
			ck := tinyCheckpoint(t, checkpoint.BF16)
			out := t.TempDir()
			split(t, ck, out, Raw)
			ck = overwriteWith(t, ck, 99)
			logs := captureLogs(t)
			s, err := entry.run(context.Background(), ck, SplitOptions{Out: out})
			if err != nil {
				t.Fatal(err)
			}
			checkIdentical(t, s, ck)
			r, err := s.Verify(context.Background(), ck)
			if err != nil || !r.OK() {
				t.Fatalf("verify after the re-split: %v %v", err, r.Problems)
			}
			if n := strings.Count(logs.String(), "changed since it was split"); n != 1 {
				t.Errorf("want one log line saying the checkpoint changed, got %d:\n%s", n, logs)
			}
		})
	}
}

// Only the units whose tensors changed are split again; a file whose identity changed but whose bytes did not
// costs a hash, not a rewrite.
func TestResplitOnlyChangedUnits(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := t.TempDir()
	split(t, ck, out, Raw)
	before := identities(t, out)
	flipTensor(t, ck, "model.layers.2.mlp.up_proj.weight")
	logs := captureLogs(t)
	s, err := Ensure(context.Background(), ck, SplitOptions{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	checkIdentical(t, s, ck)
	if got := rewritten(before, identities(t, out)); !slices.Equal(got, []string{"layer.2.shard"}) {
		t.Fatalf("rewrote %v, want only layer.2.shard", got)
	}
	if !strings.Contains(logs.String(), "resplit_units=layer.2") {
		t.Errorf("log does not name the re-split unit:\n%s", logs)
	}

	// Touching a file changes its identity only: hashed again, nothing rewritten, nothing logged at Info.
	before = identities(t, out)
	now := time.Now().Add(time.Minute)
	for _, f := range s.Source().Files {
		if f.Weights {
			os.Chtimes(filepath.Join(ck.Dir, f.Name), now, now)
		}
	}
	n := len(logs.String())
	if s, err = Ensure(context.Background(), ck, SplitOptions{Out: out}); err != nil {
		t.Fatal(err)
	}
	if got := rewritten(before, identities(t, out)); len(got) != 0 {
		t.Fatalf("touching the weights rewrote %v", got)
	}
	if extra := logs.String()[n:]; extra != "" {
		t.Errorf("unexpected log after touching the files: %s", extra)
	}
	// The record now holds the new identities: the next Ensure is a stat of each file.
	if ok, why := upToDate(s.Source(), ck, s.Units()); !ok {
		t.Fatalf("not up to date after the refresh: %s", why)
	}
}

// The copies of config.json and tokenizer files inside the split follow their originals (Ensure: generate).
func TestEnsureRefreshesCopiedFiles(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.F32)
	out := t.TempDir()
	if _, err := Ensure(context.Background(), ck, SplitOptions{Out: out}); err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(filepath.Join(ck.Dir, "config.json"))
	var m map[string]any
	json.Unmarshal(cfg, &m)
	m["rms_norm_eps"] = 1e-3
	cfg, _ = json.Marshal(m)
	os.WriteFile(filepath.Join(ck.Dir, "config.json"), cfg, 0o644)
	os.WriteFile(filepath.Join(ck.Dir, "tokenizer.json"), []byte(`{"edited": true}`), 0o644)
	logs := captureLogs(t)
	s, err := Ensure(context.Background(), ck, SplitOptions{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if s.Config.RMSNormEps != 1e-3 {
		t.Errorf("the split's config still has rms_norm_eps %g", s.Config.RMSNormEps)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "tokenizer.json")); string(b) != `{"edited": true}` {
		t.Errorf("the split's tokenizer.json was not refreshed: %.40s", b)
	}
	if !strings.Contains(logs.String(), "changed_files=config.json,tokenizer.json") {
		t.Errorf("log does not name the changed files:\n%s", logs)
	}
	// A file removed from the checkpoint is removed from the split.
	os.Remove(filepath.Join(ck.Dir, "tokenizer.json"))
	if _, err := Ensure(context.Background(), ck, SplitOptions{Out: out}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "tokenizer.json")); !os.IsNotExist(err) {
		t.Errorf("tokenizer.json removed from the checkpoint stays in the split: %v", err)
	}
}

// A split made before splits recorded their source (no record in the manifest) is checked against the
// checkpoint once, by the checksums it has, and gets a record.
func TestSplitWithoutSourceRecord(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := t.TempDir()
	s := split(t, ck, out, Raw)
	if err := writeManifest(out, s.Units(), nil); err != nil {
		t.Fatal(err)
	}
	flipTensor(t, ck, "model.layers.1.self_attn.q_proj.weight")
	before := identities(t, out)
	s, err := Ensure(context.Background(), ck, SplitOptions{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	checkIdentical(t, s, ck)
	if got := rewritten(before, identities(t, out)); !slices.Equal(got, []string{"layer.1.shard"}) {
		t.Fatalf("rewrote %v, want only layer.1.shard", got)
	}
	if s.Source() == nil || len(s.Source().Units) != len(s.Units()) {
		t.Fatalf("no complete source record after the update: %+v", s.Source())
	}
}

// Ensure trusts a shard of an unchanged unit without reading it (Load checks it); Split re-reads it.
func TestEnsureIsQuickSplitIsThorough(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := t.TempDir()
	s := split(t, ck, out, Raw)
	u, _ := s.Unit("layer.0")
	f, _ := os.OpenFile(filepath.Join(out, u.File), os.O_RDWR, 0)
	f.WriteAt([]byte{0xff}, u.Tensors[0].Offset)
	f.Close()
	if _, err := Ensure(context.Background(), ck, SplitOptions{Out: out}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(context.Background(), "layer.0", NewBuffer(0)); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("Load of the damaged shard: %v", err)
	}
	s = split(t, ck, out, Raw)
	checkIdentical(t, s, ck)
}

// Issue #13 case 8 (lock): a second split of the same folder waits for the first instead of deleting its
// temporary files (which made the first fail with a rename ENOENT).
func TestConcurrentSplitsWait(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := t.TempDir()
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	testHookWriter = func(w io.Writer) io.Writer {
		first := false
		once.Do(func() { first = true })
		if first {
			close(paused)
			<-resume
		}
		return w
	}
	defer func() { testHookWriter = nil }()
	errs := make(chan error, 2)
	go func() {
		_, err := Split(context.Background(), ck, SplitOptions{Out: out})
		errs <- err
	}()
	<-paused // the first split is writing its first shard
	go func() {
		_, err := Split(context.Background(), ck, SplitOptions{Out: out})
		errs <- err
	}()
	time.Sleep(200 * time.Millisecond) // the second split starts (and, without a lock, cleans up and writes)
	close(resume)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	s, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	checkIdentical(t, s, ck)
	if _, err := os.Stat(filepath.Join(out, lockFile)); !os.IsNotExist(err) {
		t.Errorf("lock file left behind: %v", err)
	}
}

// A lock file left by a killed split (no process holds it) does not block the next one.
func TestLeftoverLockFile(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := t.TempDir()
	os.WriteFile(filepath.Join(out, lockFile), nil, 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := Split(ctx, ck, SplitOptions{Out: out}); err != nil {
		t.Fatal(err)
	}
}

// Issue #13 case 5: read-only checkpoints whose paths differ only where the cache name sanitizes get distinct
// cache folders.
func TestCacheNamesDoNotCollide(t *testing.T) {
	root := t.TempDir()
	t.Setenv("LAYERSTREAM_CACHE", filepath.Join(root, "cache"))
	var dirs []string
	for _, p := range []string{"a_b/model", "a/b_model", "a b/model", "a/b/model"} {
		d := filepath.Join(root, p)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o555)
		t.Cleanup(func() { os.Chmod(d, 0o755) })
		dirs = append(dirs, DefaultDir(d))
	}
	for i := range dirs {
		if filepath.Dir(dirs[i]) != filepath.Join(root, "cache") {
			t.Errorf("%s is not in the cache", dirs[i])
		}
		for j := range i {
			if dirs[i] == dirs[j] {
				t.Errorf("two checkpoints share the cache folder %s", dirs[i])
			}
		}
	}
}

func TestParseSourceRejects(t *testing.T) {
	good := `{"checkpoint":"/x","files":[{"name":"config.json","size":3,"mtime_ns":1,"sha256":"` + strings.Repeat("ab", 32) + `"}],"units":{"embed":"` + strings.Repeat("cd", 16) + `"}}`
	if _, err := parseSource(good); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{"files":[{"name":"../config.json"}]}`,
		`{"files":[{"name":"a"},{"name":"a"}]}`,
		`{"files":[{"name":"a","sha256":"xyz"}]}`,
		`{"units":{"layer.x":"` + strings.Repeat("cd", 16) + `"}}`,
		`{"units":{"embed":"short"}}`,
		`{"extra":1}`,
		`{} {}`,
	} {
		if _, err := parseSource(bad); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// TestSourceOrigin: a copied file comes from the checkpoint folder, a single-file model's generated files from
// that file (a split GGUF model's from its first part), and a file the checkpoint lacked (or a split without a
// record) from nowhere known.
func TestSourceOrigin(t *testing.T) {
	hf := &Source{Checkpoint: "/ck", Files: []SourceFile{{Name: "config.json"}, {Name: "tokenizer.json"}, {Name: "chat_template.jinja", Absent: true}, {Name: "model.safetensors", Weights: true}}}
	gg := &Source{Checkpoint: "/models", Files: []SourceFile{{Name: "m.gguf", Weights: true}}}
	parts := &Source{Checkpoint: "/models", Files: []SourceFile{{Name: "m-00001-of-00002.gguf", Weights: true}, {Name: "m-00002-of-00002.gguf", Weights: true}}}
	st := &Source{Checkpoint: "/ck", Files: []SourceFile{{Name: "a.safetensors", Weights: true}, {Name: "b.safetensors", Weights: true}, {Name: "config.json"}}}
	for _, c := range []struct {
		src       *Source
		name      string
		path      string
		generated bool
	}{
		{hf, "tokenizer.json", "/ck/tokenizer.json", false},
		{hf, "chat_template.jinja", "", false},
		{gg, "tokenizer.json", "/models/m.gguf", true},
		{parts, "tokenizer.json", "/models/m-00001-of-00002.gguf", true}, // a split GGUF model: its first part
		{st, "tokenizer.json", "", false},
		{nil, "tokenizer.json", "", false},
	} {
		if path, generated := c.src.Origin(c.name); path != c.path || generated != c.generated {
			t.Errorf("%+v Origin(%s) = %q, %v; want %q, %v", c.src, c.name, path, generated, c.path, c.generated)
		}
	}
}
