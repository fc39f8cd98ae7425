package engine

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/shards"
)

// moeFixture opens the resident engine of fixture name, skipping the test unless the engine implements it and it
// is a mixture of experts (its plan binds routed experts).
func moeFixture(t *testing.T, name string) (dir string, resident *Engine) {
	dir = hffixture.Checkpoint(t, name, hffixture.V5)
	e, err := Open(context.Background(), dir, Options{Resident: true})
	if errors.Is(err, checkpoint.ErrUnsupportedArchitecture) {
		t.Skipf("refused: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if !slices.ContainsFunc(e.store.plan.Weights, func(w model.WeightSpec) bool { return w.Expert() >= 0 }) {
		t.Skip("not a mixture of experts")
	}
	return dir, e
}

// moeFixtureNames are the transformers fixtures whose config has routed experts (num_experts, num_local_experts
// or n_routed_experts, at the top level or in text_config), so that the dense ones are not run, nor counted as
// skipped.
func moeFixtureNames(t *testing.T) []string {
	var names []string
	for _, name := range hffixture.Names() {
		dir, err := hffixture.Dir(name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			NumExperts      int `json:"num_experts"`
			NumLocalExperts int `json:"num_local_experts"`
			NRoutedExperts  int `json:"n_routed_experts"`
			Text            *struct {
				NumExperts      int `json:"num_experts"`
				NumLocalExperts int `json:"num_local_experts"`
			} `json:"text_config"`
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cfg.NumExperts+cfg.NumLocalExperts+cfg.NRoutedExperts > 0 || cfg.Text != nil && cfg.Text.NumExperts+cfg.Text.NumLocalExperts > 0 {
			names = append(names, name)
		}
	}
	return names
}

// moeRequests are several sequences of different lengths generated together: decode steps share a group, the
// prompts form groups of their own, so a layer's experts serve several groups of one pass.
func moeRequests() []Request {
	return []Request{
		{PromptIDs: []int{1, 43, 47, 61, 78, 32, 83}, MaxNewTokens: 12, StopIDs: []int{}},
		{PromptIDs: []int{5, 77}, MaxNewTokens: 9, StopIDs: []int{}},
		{PromptIDs: []int{9, 200, 12, 44, 6}, MaxNewTokens: 14, StopIDs: []int{}},
		{PromptIDs: []int{2}, MaxNewTokens: 6, StopIDs: []int{}},
	}
}

// TestRoutedExpertsMatchResident: on every mixture-of-experts fixture the engine implements (Mixtral, Qwen2/3-MoE,
// OLMoE, GLM-4.5, MiniMax-M2, Llama 4 at least), streaming a layer's routed experts only (with a small expert
// cache, with none, reading predicted experts ahead, and with the whole layer read, mapped or read) gives exactly
// the logits and greedy tokens of the resident model, for one sequence and for a batch of several.
func TestRoutedExpertsMatchResident(t *testing.T) {
	ctx := context.Background()
	ran, names := 0, moeFixtureNames(t)
	defer func() {
		if ran < len(names) || ran < 12 {
			t.Errorf("%d of the %d mixture-of-experts fixtures ran, want every one (12 or more)", ran, len(names))
		}
	}()
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			dir, res := moeFixture(t, name)
			ran++
			ids := ints(hffixture.MustReference(t, name).InputIDs)[:16]
			want := tokenByToken(t, res, ids)
			wantBatch, err := res.GenerateBatch(ctx, moeRequests(), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, mode := range []struct {
				name   string
				opts   Options
				routed bool
			}{
				{"cache of 1 KiB", Options{NoMap: true, ExpertCache: 1 << 10}, true},
				{"no cache, lfu", Options{ExpertCache: -1, ExpertPolicy: ExpertLFU}, true},
				{"cache of 1 MiB", Options{NoMap: true, ExpertCache: 1 << 20, MaxLayerBuffers: 1, Prefetch: 1}, true},
				{"read ahead", Options{NoMap: true, ExpertCache: -1}, true},
				{"whole layers", Options{NoMap: true, WholeExperts: true}, false},
			} {
				t.Run(mode.name, func(t *testing.T) {
					e := open(t, dir, mode.opts)
					if mode.name == "read ahead" {
						e.store.experts.pred.warmup, e.store.experts.pred.minAccuracy = 0, 0 // read every prediction ahead
						defer func() {
							if e.Stats().Experts.ReadAhead == 0 {
								t.Error("nothing was read ahead")
							}
						}()
					}
					if (e.store.experts != nil) != mode.routed {
						t.Fatalf("routed-only streaming: %v, want %v", e.store.experts != nil, mode.routed)
					}
					if d := maxDiff(tokenByToken(t, e, ids), want); d != 0 {
						t.Errorf("logits differ from the resident model's by %g", d)
					}
					batch, err := e.GenerateBatch(ctx, moeRequests(), nil)
					if err != nil {
						t.Fatal(err)
					}
					for i := range batch {
						if !slices.Equal(batch[i].GeneratedIDs, wantBatch[i].GeneratedIDs) {
							t.Errorf("sequence %d: %v, resident %v", i, batch[i].GeneratedIDs, wantBatch[i].GeneratedIDs)
						}
					}
					if x := e.store.experts; x != nil {
						if c := x.cached(); c > x.budget {
							t.Errorf("the expert cache holds %d bytes over its budget of %d", c, x.budget)
						}
						if x.misses.Load() == 0 {
							t.Error("no expert was read")
						}
						if x.pred != nil && x.predicted.Load() == 0 {
							t.Error("no expert was predicted")
						}
					}
				})
			}
		})
	}
}

// TestRoutedExpertsReadLess: a decode step of one sequence reads the layers' other tensors and its routed
// experts only, as Stats.ReadBytes counts and the process's read system calls confirm (/proc/self/io rchar),
// well under the decoder layers' bytes.
func TestRoutedExpertsReadLess(t *testing.T) {
	if _, err := os.Stat("/proc/self/io"); err != nil {
		t.Skip("no /proc/self/io")
	}
	dir := hffixture.Checkpoint(t, "qwen3_moe", hffixture.V5)
	e := open(t, dir, Options{NoMap: true, ExpertCache: -1, NoExpertPrefetch: true})
	ctx := context.Background()
	ids := []int{1, 43, 47, 61}
	kv, err := e.run.kvStore(bucket(len(ids)), e.run.onHost(false))
	if err != nil {
		t.Fatal(err)
	}
	start, rchar := e.Stats().ReadBytes, readChars(t)
	st := e.store.newStream(ctx, 2, false)
	if _, err := e.run.pass(ctx, st, kv, ids[:3], false); err != nil {
		t.Fatal(err)
	}
	misses := e.Stats().Experts.Misses
	if _, err := e.run.pass(ctx, st, kv, ids[3:], false); err != nil {
		t.Fatal(err)
	}
	st.stop()
	stats := e.Stats()
	read, sys := stats.ReadBytes-start, readChars(t)-rchar
	// The read calls also count the first reading of /proc/self/io, a few hundred bytes.
	if sys < read || sys-read >= 4096 {
		t.Errorf("two passes read %d bytes by system calls, Stats.ReadBytes counts %d", sys, read)
	}
	cfg := e.Config()
	var dense, expert int64
	for l := range cfg.NumHiddenLayers {
		u, _ := e.store.set.Unit(layerUnit(l))
		dense += u.PartBytes(shards.NoExpert)
		expert = u.PartBytes(0)
	}
	if want := 2*dense + stats.Experts.Misses*expert; read != want {
		t.Errorf("two passes read %d bytes; want twice the layers' other tensors (%d) and %d experts of %d bytes: %d",
			read, dense, stats.Experts.Misses, expert, want)
	}
	if got, want := stats.Experts.Misses-misses, int64(cfg.NumHiddenLayers*cfg.NumExpertsPerTok); got != want {
		t.Errorf("a decode step of one sequence read %d experts, want %d (top %d in each of %d layers)", got, want, cfg.NumExpertsPerTok, cfg.NumHiddenLayers)
	}
	if perStep := dense + int64(cfg.NumHiddenLayers*cfg.NumExpertsPerTok)*expert; perStep >= stats.LayerBytes {
		t.Errorf("a decode step reads %d bytes, the decoder layers are %d", perStep, stats.LayerBytes)
	}
}

// readChars is the bytes this process read by system calls (/proc/self/io rchar).
func readChars(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	return statusField(t, string(b), "rchar")
}

func statusField(t *testing.T, s, key string) int64 {
	for line := range strings.Lines(s) {
		if v, ok := strings.CutPrefix(line, key+": "); ok {
			var n int64
			for _, c := range strings.TrimSpace(v) {
				n = 10*n + int64(c-'0')
			}
			return n
		}
	}
	t.Fatalf("no %s in %q", key, s)
	return 0
}

// TestCorruptExpertNamed: a byte of one expert's tensor changed on disk fails the pass that routes to it, naming
// the expert, its layer and the tensor.
func TestCorruptExpertNamed(t *testing.T) {
	dir := hffixture.Checkpoint(t, "qwen3_moe", hffixture.V5)
	out := filepath.Join(t.TempDir(), "shards")
	e := open(t, dir, Options{ShardDir: out, NoMap: true, ExpertCache: -1})
	u, _ := e.store.set.Unit("layer.0")
	e.Close()
	cfg := e.Config()
	path := filepath.Join(out, u.File)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := make([]bool, cfg.NumExperts) // every expert's first tensor: whichever the router picks fails
	for _, ti := range u.Tensors {
		if x := ti.Expert(); x >= 0 && !corrupt[x] {
			corrupt[x] = true
			b[ti.Offset+ti.EncodedLength/2] ^= 0x40
		}
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	e = open(t, out, Options{NoMap: true, ExpertCache: -1})
	_, err = e.Generate(context.Background(), Request{PromptIDs: []int{1, 2, 3}, MaxNewTokens: 2}, nil)
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch") || !strings.Contains(err.Error(), "expert ") ||
		!strings.Contains(err.Error(), "layer.0") || !strings.Contains(err.Error(), "mlp.experts.") {
		t.Fatalf("corrupted expert: %v", err)
	}
}

// TestExpertCacheEvicts: over its budget the cache evicts unpinned experts, the least recently used first (LRU)
// or the least used (LFU, ties to the least recent), never a pinned one or one still being read, and keeps what
// fits the budget.
func TestExpertCacheEvicts(t *testing.T) {
	for _, c := range []struct {
		policy ExpertPolicy
		keep   []int
	}{{ExpertLRU, []int{2, 3}}, {ExpertLFU, []int{0, 3}}} {
		x := &expertStore{budget: 2 << 20, policy: c.policy, entries: map[expertKey]*expertEntry{}}
		done := make(chan struct{})
		close(done)
		// Expert e used uses[e] times, last at e+1; expert 3 pinned, expert 4 still being read (no bytes yet).
		uses := []int64{5, 1, 2, 1}
		for e := range 5 {
			en := &expertEntry{key: expertKey{0, e}, done: done, bytes: 1 << 20, last: int64(e + 1), buf: shards.NewBuffer(0)}
			if e < len(uses) {
				en.uses = uses[e]
			}
			if e == 3 {
				en.pins = 1
			}
			if e == 4 {
				en.done, en.bytes = make(chan struct{}), 0
			}
			x.entries[en.key] = en
		}
		x.release(nil)
		var kept []int
		for k := range x.entries {
			if k.expert < 4 {
				kept = append(kept, k.expert)
			}
		}
		slices.Sort(kept)
		if !slices.Equal(kept, c.keep) || x.cached() > x.budget {
			t.Errorf("%s: kept experts %v (%d bytes), want %v within %d bytes", c.policy, kept, x.cached(), c.keep, x.budget)
		}
		if _, ok := x.entries[expertKey{0, 4}]; !ok {
			t.Errorf("%s: evicted an expert still being read", c.policy)
		}
	}
}

// TestRoutedExpertsGGUF: mixture-of-experts GGUF files (their fused experts read as one tensor per expert, split
// expert by expert: a Q4_K_M Qwen3-MoE, and gpt-oss's MXFP4 experts whose gate and up slices read as one gate_up)
// stream their routed experts only, with the resident model's logits exactly.
func TestRoutedExpertsGGUF(t *testing.T) {
	for _, name := range []string{"qwen3moe-q4km", "gpt_oss-mxfp4"} {
		t.Run(name, func(t *testing.T) {
			file := "../gguf/testdata/moe/" + name + ".gguf"
			if _, err := os.Stat(file); err != nil {
				t.Skip(err)
			}
			ids := []int{1, 43, 47, 61, 78, 32}
			dir := t.TempDir()
			res := open(t, file, Options{ShardDir: filepath.Join(dir, "shards"), Resident: true})
			e := open(t, file, Options{ShardDir: filepath.Join(dir, "shards"), NoMap: true, ExpertCache: -1})
			if e.store.experts == nil {
				t.Fatal("the GGUF's experts are not streamed apart")
			}
			if d := maxDiff(tokenByToken(t, e, ids), tokenByToken(t, res, ids)); d != 0 {
				t.Errorf("logits differ from the resident model's by %g", d)
			}
			if e.Stats().Experts.Misses == 0 {
				t.Error("no expert was read")
			}
		})
	}
}

// TestExpertReadsQueued: expert reads start in the order they were asked for, at most inFlight at once (with one,
// an expert read is done only once those asked for before it are), and the stream's reads of whole units
// (readGate, shards.LoadTrace.Yield) wait while an expert read is queued or in flight, then go on.
func TestExpertReadsQueued(t *testing.T) {
	dir := hffixture.Checkpoint(t, "qwen3_moe", hffixture.V5)
	e := open(t, dir, Options{NoMap: true, ExpertCache: -1})
	x := e.store.experts
	if x == nil || !x.routed(layerUnit(0)) {
		t.Fatal("the fixture's layers do not stream their routed experts")
	}
	if u, _ := e.store.set.Unit(layerUnit(0)); x.inFlight != expertReadsFor(u.PartBytes(0)) || expertReadsFor(u.PartBytes(0)) != expertReads {
		t.Errorf("%d expert reads in flight for experts of %d bytes, want %d", x.inFlight, u.PartBytes(0), expertReads)
	}
	if n := expertReadsFor(13_246_464); n != 2 { // a gpt-oss-120b expert in MXFP4
		t.Errorf("%d reads in flight for 13.2 MB experts, want 2", n)
	}
	x.inFlight = 1
	order := []int{5, 2, 7, 0}
	yield := x.yield()
	gateHeld := make(chan error, 1)
	var entries []*expertEntry
	x.mu.Lock() // held: no queued read can start (readQueue takes the queue's head under mu)
	for _, ex := range order {
		en := &expertEntry{key: expertKey{0, ex}, done: make(chan struct{}), buf: shards.NewBuffer(0), pins: 1}
		x.entries[en.key] = en
		x.enqueue(en)
		entries = append(entries, en)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	go func() { gateHeld <- yield(ctx) }()
	if err := <-gateHeld; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the stream's read went on while expert reads were queued: %v", err)
	}
	cancel()
	x.mu.Unlock()
	<-entries[len(entries)-1].done
	for i, en := range entries {
		if !isDone(en) || en.err != nil {
			t.Errorf("expert %d (asked for %d of %d) not read when the last was: done %v, err %v", en.key.expert, i+1, len(order), isDone(en), en.err)
		}
	}
	if err := yield(context.Background()); err != nil {
		t.Errorf("the stream's read after the expert reads: %v", err)
	}
	x.release(entries)
}
