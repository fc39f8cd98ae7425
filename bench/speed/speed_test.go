package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/profiler"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/synth"
)

func TestTargetJudge(t *testing.T) {
	for _, c := range []struct {
		atMost     bool
		threshold  float64
		ratio      float64
		want       verdict
		wantMissed bool
	}{
		{false, 0.85, 0.85, pass, false},
		{false, 0.85, 0.849, fail, true},
		{true, 1.15, 1.15, pass, false},
		{true, 1.15, 1.16, fail, true},
	} {
		tg := &target{AtMost: c.atMost, Threshold: c.threshold}
		tg.judge(c.ratio)
		if tg.Verdict != c.want || tg.missed() != c.wantMissed || *tg.Measured != c.ratio {
			t.Errorf("%s with %v: verdict %s, missed %v; want %s, %v", tg.goal(), c.ratio, tg.Verdict, tg.missed(),
				c.want, c.wantMissed)
		}
	}
	tg := &target{Threshold: 1}
	tg.setUnavailable("no feature")
	if !tg.missed() || tg.Measured != nil {
		t.Errorf("unavailable target: missed %v, measured %v; want missed and not measured", tg.missed(), tg.Measured)
	}
	tg.setNotMeasurable("tmpfs")
	if tg.missed() {
		t.Error("a target this machine cannot measure counts as missed")
	}
}

func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--shape", "gpt-5"}, `unknown --shape "gpt-5"`},
		{[]string{"--new-tokens", "1"}, "--new-tokens must be at least 2"},
		{[]string{"--runs", "0"}, "--runs must be at least 1"},
		{[]string{"--layers", "-1"}, "--layers must be positive"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--no-such-flag"}, "flag provided but not defined"},
	} {
		var stdout, stderr bytes.Buffer
		code := mainExit(context.Background(), "speed", c.args, &stdout, &stderr)
		if code != exitError || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr.String(), exitError, c.want)
		}
	}
}

func TestWarmUpKeepsCacheCapacity(t *testing.T) {
	req := engine.Request{PromptIDs: []int{5, 6, 7}, MaxNewTokens: 10}
	w := warmUp(req)
	if w.MaxNewTokens != 2 || len(w.PromptIDs)+w.MaxNewTokens != len(req.PromptIDs)+req.MaxNewTokens {
		t.Errorf("warm-up: %d prompt + %d new tokens; want 2 new tokens and %d positions in all",
			len(w.PromptIDs), w.MaxNewTokens, len(req.PromptIDs)+req.MaxNewTokens)
	}
	if len(req.PromptIDs) != 3 {
		t.Error("warmUp changed the request's prompt")
	}
}

func TestJudgePrefillNeedsOnePassPerLayer(t *testing.T) {
	r := &report{Model: modelInfo{Layers: 2, LayerMatrixParams: 1e6}, Machine: machine{Matmul: matmulResult{GFlops: 1}}}
	res := &engine.Result{Timings: engine.Timings{Prefill: 1e9, TTFT: 1e9}}
	once := []profiler.Event{
		{Step: 0, Layer: 0, Category: profiler.DiskRead}, {Step: 0, Layer: 0, Category: profiler.Forward},
		{Step: 0, Layer: 1, Category: profiler.DiskRead}, {Step: 0, Layer: 1, Category: profiler.Forward},
		{Step: 1, Layer: 1, Category: profiler.Forward}, // a decode step: not the prompt's
	}
	tg := newTargets(100, 64)[4]
	judgePrefill(tg, r, res, once, 1000) // 2 GFLOP in 1 s against 1 GFLOP/s
	if tg.Verdict != pass || *tg.Measured != 2 {
		t.Fatalf("one pass per layer: %s %v (%s); want PASS 2", tg.Verdict, *tg.Measured, tg.Reason)
	}
	ahead := append(slices.Clone(once), profiler.Event{Step: 0, Layer: 0, Category: profiler.DiskRead, Start: 5})
	tg = newTargets(100, 64)[4]
	judgePrefill(tg, r, res, ahead, 1000) // the next pass's layer 0, read after layer 0 computed
	if tg.Verdict != pass {
		t.Errorf("a read-ahead into the next pass: %s (%s); want PASS", tg.Verdict, tg.Reason)
	}
	twice := append(once, profiler.Event{Step: 0, Layer: 1, Category: profiler.Forward})
	tg = newTargets(100, 64)[4]
	judgePrefill(tg, r, res, twice, 1000)
	if tg.Verdict != fail || !strings.Contains(tg.Reason, "layer 1: 2 forward passes") {
		t.Errorf("two passes over layer 1: %s (%s); want FAIL naming layer 1", tg.Verdict, tg.Reason)
	}
}

func TestMeasureDirectRead(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte{7}, 3*4096)
	if err := os.WriteFile(filepath.Join(dir, "layer.0.shard"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	units := []shards.UnitInfo{{Name: "layer.0", File: "layer.0.shard", FileSize: int64(len(data))}}
	r, err := measureDirectRead(dir, units, []int64{0, 4096})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Supported {
		t.Skipf("O_DIRECT unsupported here: %s", r.Reason)
	}
	if r.Bytes != int64(len(data)) || r.GBps <= 0 || len(r.Passes) != 2 {
		t.Errorf("read %d bytes at %v GB/s in %d passes; want %d bytes at a positive rate in 2", r.Bytes, r.GBps,
			len(r.Passes), len(data))
	}
	later := r
	later.Passes = []readPass{{Chunk: 0, Time: r.Best / 2}}
	r.merge(later)
	if len(r.Passes) != 3 || r.Best != later.Passes[0].Time {
		t.Errorf("merged: %d passes, best %v; want 3 passes, best %v", len(r.Passes), r.Best, later.Passes[0].Time)
	}
	units[0].FileSize = 4 * 4096 // the file is shorter than the manifest says
	if _, err := measureDirectRead(dir, units, []int64{0}); err == nil || !strings.Contains(err.Error(), "layer.0.shard") {
		t.Errorf("short file: err %v; want an error naming the shard", err)
	}
}

// tinyShape is a model small enough for a test to generate with in well under a second per run.
var tinyShape = synth.Shape{HiddenSize: 32, IntermediateSize: 64, NumLayers: 2, NumHeads: 4, NumKVHeads: 2,
	VocabSize: 64, MaxPositionEmbeddings: 64, BOSTokenID: 1, EOSTokenID: 2}

func runTiny(t *testing.T) *report {
	t.Helper()
	return runTinyWith(t, func(*options) {})
}

// runTinyWith runs the harness on a tiny model with options changed by set (no peer unless set adds one).
func runTinyWith(t *testing.T, set func(*options)) *report {
	t.Helper()
	ctx := context.Background()
	var log bytes.Buffer
	dir, err := prepareModel(ctx, filepath.Join(t.TempDir(), "tiny"), tinyShape, checkpoint.BF16, 1, peerConfig{}, &log)
	if err != nil {
		t.Fatal(err)
	}
	o := options{shards: dir, shapeName: "tiny", newTokens: 3, runs: 1, prefillTokens: 16, batchNewTokens: 4,
		dtype: "auto", seed: 1, matmulSize: [3]int{16, 32, 32}, memcpyBytes: 1 << 20, readBytes: 1 << 20,
		noPeer: "no llama.cpp in this test", log: &log}
	set(&o)
	r, err := run(ctx, o)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	return r
}

// peerTargets are the targets that compare with llama.cpp.
var peerTargets = map[int]bool{6: true, 7: true, 9: true, 13: true}

// pairTargets run the real Qwen2.5-Coder pair, which the tests have not (TestRunSpeculation gives them a tiny one).
var pairTargets = map[int]bool{15: true, 16: true, 17: true, 21: true, 22: true, 23: true}

// hybridTargets need a hybrid model of 16k positions, which the tiny Llama has not (TestRunHybrid gives them one).
var hybridTargets = map[int]bool{20: true}

// TestRunWithoutEngineFeatures runs the whole harness on a tiny model: the page-cache targets are measured, the
// ones needing engine features the engine lacks are UNAVAILABLE and count as missed.
func TestRunWithoutEngineFeatures(t *testing.T) {
	savedDirect, savedBatch := directIO, generateBatch
	directIO, generateBatch = nil, nil
	t.Cleanup(func() { directIO, generateBatch = savedDirect, savedBatch })
	r := runTiny(t)
	want := map[int]bool{1: true, 3: true, 5: true, 8: true} // measured
	for _, tg := range r.Targets {
		if want[tg.ID] != (tg.Measured != nil) {
			t.Errorf("target %d: measured %v, want %v (%s %s)", tg.ID, tg.Measured != nil, want[tg.ID], tg.Verdict, tg.Reason)
		}
		switch {
		case peerTargets[tg.ID] || pairTargets[tg.ID] || hybridTargets[tg.ID]:
			if tg.Verdict != notMeasurable || tg.missed() {
				t.Errorf("target %d without llama.cpp: %s (%s); want NOT MEASURABLE HERE, not missed", tg.ID, tg.Verdict, tg.Reason)
			}
		case !want[tg.ID] && r.Machine.DirectRead.Supported && (tg.Verdict != unavailable || !strings.Contains(tg.Reason, "features.go")):
			t.Errorf("target %d: %s (%s); want UNAVAILABLE pointing at features.go", tg.ID, tg.Verdict, tg.Reason)
		}
	}
	if r.Missed < 3 && r.Machine.DirectRead.Supported {
		t.Errorf("missed %d targets; the three unavailable ones must count", r.Missed)
	}
	if r.Model.Layers != 2 || r.Model.LayerFileBytes == 0 || r.Model.HeadParams != 64*32 {
		t.Errorf("model info %+v", r.Model)
	}
	if len(r.Profiles) != 1 || r.Profiles[0].Summary.Events == 0 {
		t.Errorf("want the streamed run's profile, got %d profiles", len(r.Profiles))
	}
	var text bytes.Buffer
	if err := r.writeText(&text); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"memory copy", "memory read", "sequential read", "matmul", "UNAVAILABLE", "NOT MEASURABLE HERE", "sum of categories", "target(s) missed"} {
		if !strings.Contains(text.String(), s) {
			t.Errorf("text report lacks %q:\n%s", s, text.String())
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Targets []struct {
			ID       int      `json:"id"`
			Verdict  string   `json:"verdict"`
			Measured *float64 `json:"measured"`
		} `json:"targets"`
		Missed int `json:"missed"`
	}
	if err := json.Unmarshal(b, &back); err != nil || len(back.Targets) != 23 || back.Missed != r.Missed {
		t.Errorf("JSON round trip: %v, %+v", err, back)
	}
}

// TestRun runs the harness with the hooks as wired: a wired feature's targets are measured.
func TestRun(t *testing.T) {
	r := runTiny(t)
	if !r.Machine.DirectRead.Supported {
		t.Skipf("O_DIRECT unsupported here: %s", r.Machine.DirectRead.Reason)
	}
	wired := map[int]bool{1: true, 2: directIO != nil, 3: true, 4: directIO != nil && generateBatch != nil, 5: true, 8: true,
		10: directIO != nil, 11: directIO != nil, 12: directIO != nil, 14: directIO != nil}
	for _, tg := range r.Targets {
		if wired[tg.ID] != (tg.Measured != nil) {
			t.Errorf("target %d: measured %v, want %v (%s %s)", tg.ID, tg.Measured != nil, wired[tg.ID], tg.Verdict, tg.Reason)
		}
	}
}

// TestRunWithEngineFeatures measures targets 2 and 4 with stand-ins: page-cache reads for O_DIRECT when it is not
// wired, and always sequences generated one after another for a batch, which target 4 must judge a FAIL.
func TestRunWithEngineFeatures(t *testing.T) {
	if directIO == nil {
		directIO = func(*engine.Options) {}
		t.Cleanup(func() { directIO = nil })
	}
	saved := generateBatch
	generateBatch = func(ctx context.Context, e *engine.Engine, reqs []engine.Request) ([]*engine.Result, error) {
		var out []*engine.Result
		for _, r := range reqs {
			res, err := e.Generate(ctx, r, nil)
			if err != nil {
				return nil, err
			}
			out = append(out, res)
		}
		return out, nil
	}
	t.Cleanup(func() { generateBatch = saved })
	r := runTiny(t)
	if !r.Machine.DirectRead.Supported {
		t.Skipf("O_DIRECT unsupported here: %s", r.Machine.DirectRead.Reason)
	}
	for _, tg := range r.Targets {
		if tg.Measured == nil && !peerTargets[tg.ID] && !pairTargets[tg.ID] && !hybridTargets[tg.ID] && !isMoETarget(tg.ID) {
			t.Errorf("target %d not measured: %s (%s)", tg.ID, tg.Verdict, tg.Reason)
		}
	}
	t2, t4 := r.Targets[1], r.Targets[3]
	if len(t2.Raw) != 4 || len(t4.Raw) != 2 || len(r.Profiles) != 2 {
		t.Errorf("target 2 raw %v, target 4 raw %v, %d profiles; want 4 and 2 values and 2 profiles", t2.Raw, t4.Raw, len(r.Profiles))
	}
	// Sequences run one after another cannot be 8x faster together.
	if t4.Verdict != fail {
		t.Errorf("sequential stand-in for batching: target 4 %s, want FAIL", t4.Verdict)
	}
}

func TestPrepareModelReusesTheSplit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	var log bytes.Buffer
	out, err := prepareModel(context.Background(), dir, tinyShape, checkpoint.BF16, 1, peerConfig{}, &log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "checkpoint")); !os.IsNotExist(err) {
		t.Errorf("the checkpoint is kept after the split (stat: %v)", err)
	}
	log.Reset()
	again, err := prepareModel(context.Background(), dir, tinyShape, checkpoint.BF16, 1, peerConfig{}, &log)
	if err != nil || again != out || log.Len() != 0 {
		t.Errorf("second prepare: %q, %v, log %q; want the same folder, reused silently", again, err, log.String())
	}
}

// TestRunWithPeer runs the harness with a stand-in for llama.cpp speaking peer.py's protocol (this test binary,
// re-executed as TestHelperPeer): targets 6, 7, 9 and 13 are measured against its fixed rates, and what it is sent
// is what peer.py expects.
func TestRunWithPeer(t *testing.T) {
	saved := peerCommand
	peerCommand = func(ctx context.Context, python, script string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperPeer$")
		cmd.Env = append(os.Environ(), "SPEED_HELPER_PEER=1")
		return cmd
	}
	t.Cleanup(func() { peerCommand = saved })
	cache := t.TempDir()
	r := runTinyWith(t, func(o *options) {
		o.peer, o.gguf, o.noPeer = peerConfig{Python: "python3"}, "model.gguf", ""
		// Target 13 on a committed tiny GGUF (llama.cpp's Q4_1 of a random one-layer model).
		o.ggufModel, o.ggufPython, o.cacheDir = filepath.Join("..", "..", "gguf", "testdata", "tiny", "tiny-llama-Q4_1.gguf"), "python3", cache
	})
	for id := range peerTargets {
		tg := r.target(id)
		if tg.Measured == nil || *tg.Measured <= 0 {
			t.Errorf("target %d with a peer: %s (%s)", id, tg.Verdict, tg.Reason)
		}
	}
	if v := r.target(7).Raw[1]; v.Name != "llama.cpp decode (median)" || v.Value != 1e6 {
		t.Errorf("target 7's llama.cpp rate: %+v, want the stand-in's 1e6 tok/s", v)
	}
	if r.target(6).Verdict != fail || r.target(9).Verdict != fail {
		t.Error("against a stand-in a million times faster, targets 6 and 9 must fail")
	}
}

// TestHelperPeer is the stand-in llama.cpp of TestRunWithPeer (it does nothing in a normal test run): it
// checks each command and answers at a million tokens per second.
func TestHelperPeer(t *testing.T) {
	if os.Getenv("SPEED_HELPER_PEER") != "1" {
		return
	}
	out := json.NewEncoder(os.Stdout)
	out.Encode(map[string]any{"ready": true, "system": "stand-in"})
	in := json.NewDecoder(os.Stdin)
	for {
		var c struct {
			Op      string  `json:"op"`
			IDs     []int   `json:"ids"`
			N       int     `json:"n"`
			Prompts [][]int `json:"prompts"`
		}
		if err := in.Decode(&c); err != nil {
			os.Exit(0)
		}
		switch {
		case c.Op == "prefill" && len(c.IDs) > 0:
			out.Encode(map[string]any{"secs": float64(len(c.IDs)) / 1e6})
		case c.Op == "decode" && len(c.IDs) > 0 && c.N >= 2:
			out.Encode(map[string]any{"tok_s": 1e6, "ids": make([]int, c.N)})
		case c.Op == "batch" && len(c.Prompts) == batchSize && c.N == 4:
			out.Encode(map[string]any{"tok_s": 1e6, "secs": 1e-3})
		default:
			fmt.Fprintf(os.Stderr, "bad command %+v\n", c)
			os.Exit(1)
		}
	}
}

// runQuantized writes shape directly as q4 shards into a temporary folder and runs the harness on them as
// --quantize does (stream only, one run of newTokens tokens, no llama.cpp); it returns the report and the shards'
// folder.
func runQuantized(t *testing.T, name string, shape synth.Shape, newTokens int) (*report, string) {
	t.Helper()
	ctx := context.Background()
	var log bytes.Buffer
	dir, err := prepareQuantized(ctx, filepath.Join(t.TempDir(), name), shape, checkpoint.BF16, 1, shards.Q4, &log)
	if err != nil {
		t.Fatal(err)
	}
	o := options{shards: dir, shapeName: name, newTokens: newTokens, runs: 1, prefillTokens: 16, dtype: "auto", seed: 1,
		memcpyBytes: 1 << 20, readBytes: 1 << 20, noPeer: "no llama.cpp in this test", log: &log, streamOnly: true}
	r, err := run(ctx, o)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	return r, dir
}

// TestRunStreamOnly runs the harness as --quantize q4 does: the model written directly as q4 shards, only
// targets 2 and 10 measured (the others not measurable, not missed), the streamed engine's peak memory reported.
func TestRunStreamOnly(t *testing.T) {
	shape := synth.Shape{HiddenSize: 256, IntermediateSize: 512, NumLayers: 2, NumHeads: 4, NumKVHeads: 2,
		VocabSize: 64, MaxPositionEmbeddings: 64, BOSTokenID: 1, EOSTokenID: 2}
	r, dir := runQuantized(t, "q4", shape, 3)
	set, err := shards.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := set.Load(context.Background(), "layer.0", shards.NewBuffer(0)); err != nil || l.Tensors["model.layers.0.mlp.up_proj.weight"].DType != checkpoint.Q4_K {
		t.Fatalf("layer.0 of the q4 split: %v", err)
	}
	if !r.Machine.DirectRead.Supported {
		t.Skipf("O_DIRECT unsupported here: %s", r.Machine.DirectRead.Reason)
	}
	for _, tg := range r.Targets {
		measured := tg.ID == 2 || tg.ID == 10
		if measured != (tg.Measured != nil) || (!measured && (tg.Verdict != notMeasurable || tg.missed())) {
			t.Errorf("target %d: %s %v (%s)", tg.ID, tg.Verdict, tg.Measured, tg.Reason)
		}
	}
	if runtime.GOOS == "linux" && r.Machine.StreamedPeakRSS <= 0 {
		t.Errorf("no peak memory reported")
	}
	var text bytes.Buffer
	if err := r.writeText(&text); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text.String(), "GFLOP/s") || !strings.Contains(text.String(), "layer matrices in Q4_K blocks") ||
		(runtime.GOOS == "linux" && !strings.Contains(text.String(), "peak memory")) {
		t.Errorf("text report:\n%s", text.String())
	}
}

// speculationIDs are the targets of measureSpeculation.
var speculationIDs = map[int]bool{15: true, 16: true, 17: true}

// TestRunRows runs targets 21-23 on a tiny Q4_K model without llama.cpp: the passes' ratios measured, the
// batch against llama.cpp not measurable.
func TestRunRows(t *testing.T) {
	r := &report{Targets: newTargets(8, 4)}
	o := options{runs: 1, newTokens: 4, batchNewTokens: 4, log: io.Discard, cacheDir: t.TempDir(),
		pairTarget: filepath.Join("..", "..", "gguf", "testdata", "tiny", "tiny-llama-Q4_K.gguf")}
	if err := measureRows(context.Background(), o, r); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{21, 22} {
		if tg := r.target(id); tg.Measured == nil || *tg.Measured <= 0 {
			t.Errorf("target %d: %s %v (%s)", id, tg.Verdict, tg.Measured, tg.Reason)
		}
	}
	if tg := r.target(23); tg.Verdict != notMeasurable || tg.missed() {
		t.Errorf("target 23 without llama.cpp: %s (%s)", tg.Verdict, tg.Reason)
	}
}

// TestRunSpeculation runs targets 15-17 on a tiny pair of one tokenizer (a random GGUF model in float32 and its
// Q8_0 copy as the draft): measured, the greedy output unchanged by the draft.
func TestRunSpeculation(t *testing.T) {
	tiny := filepath.Join("..", "..", "gguf", "testdata", "tiny")
	r := &report{Targets: newTargets(8, 4)}
	o := options{runs: 1, newTokens: 4, log: io.Discard, cacheDir: t.TempDir(),
		pairTarget: filepath.Join(tiny, "tiny-llama-F32.gguf"), pairDraft: filepath.Join(tiny, "tiny-llama-Q8_0.gguf")}
	if err := measureSpeculation(context.Background(), o, r); err != nil {
		t.Fatal(err)
	}
	for id := range speculationIDs {
		tg := r.target(id)
		if tg.Measured == nil || *tg.Measured <= 0 || strings.Contains(tg.Reason, "differs") {
			t.Errorf("target %d: %s %v (%s)", id, tg.Verdict, tg.Measured, tg.Reason)
		}
	}
	if tg := r.target(15); tg.Measured != nil && *tg.Measured <= 1 {
		t.Errorf("target 15: %.2f tokens per pass with a draft of the same weights", *tg.Measured)
	}
}

// TestRunHybrid runs the stream-only harness on a tiny Qwen3.5 shape (q4 shards): targets 2 and 10 measured, and
// target 20: its recurrent layers' cache the same at 1k and 16k positions (a PASS at 1), its attention layer's 16
// times larger.
func TestRunHybrid(t *testing.T) {
	shape := synth.Shape{HiddenSize: 256, IntermediateSize: 512, NumLayers: 4, NumHeads: 4, NumKVHeads: 2, HeadDim: 64,
		VocabSize: 64, MaxPositionEmbeddings: 16384, BOSTokenID: 1, EOSTokenID: 2, Hybrid: &synth.Hybrid{LinearKeyHeads: 2,
			LinearValueHeads: 4, LinearKeyDim: 32, LinearValueDim: 32, ConvKernel: 4, FullAttentionInterval: 4, PartialRotary: 0.25}}
	r, _ := runQuantized(t, "hybrid", shape, 3)
	t20 := r.target(20)
	if t20.Measured == nil || *t20.Measured != 1 || t20.Verdict != pass {
		t.Fatalf("target 20: %s %v (%s)", t20.Verdict, t20.Measured, t20.Reason)
	}
	raw := map[string]float64{}
	for _, v := range t20.Raw {
		raw[v.Name] = v.Value
	}
	if kv1, kv16 := raw["attention keys and values at 1024 positions"], raw["attention keys and values at 16384 positions"]; kv1 <= 0 || kv16 != 16*kv1 {
		t.Errorf("attention cache %v → %v bytes", kv1, kv16)
	}
	if r.Machine.DirectRead.Supported && (r.target(2).Measured == nil || r.target(10).Measured == nil) {
		t.Errorf("targets 2 and 10 not measured: %s, %s", r.target(2).Reason, r.target(10).Reason)
	}
}

// tinyMoE is a tiny Qwen3-MoE shape: 8 experts of which each token takes 2; its matrices' input widths are
// multiples of 256, as Q4_K blocks need.
var tinyMoE = synth.Shape{HiddenSize: 256, IntermediateSize: 256, NumLayers: 2, NumHeads: 4, NumKVHeads: 2,
	HeadDim: 64, VocabSize: 64, MaxPositionEmbeddings: 64, BOSTokenID: 1, EOSTokenID: 2, NumExperts: 8,
	NumExpertsPerTok: 2, MoEIntermediateSize: 256}

// TestRunMoE: on a mixture of experts written as q4 shards, the stream-only run measures targets 18 and 19, and
// a decode step reads no more than its active bytes (target 18 passes: the stream reads the routed experts only).
func TestRunMoE(t *testing.T) {
	if directIO == nil {
		t.Skip("the engine offers no O_DIRECT")
	}
	r, _ := runQuantized(t, "tiny-moe", tinyMoE, 4)
	if !r.Machine.DirectRead.Supported {
		t.Skipf("O_DIRECT unsupported here: %s", r.Machine.DirectRead.Reason)
	}
	t18, t19 := r.target(18), r.target(19)
	if t18.Measured == nil || t19.Measured == nil {
		t.Fatalf("targets 18 and 19 not measured: %s (%s), %s (%s)", t18.Verdict, t18.Reason, t19.Verdict, t19.Reason)
	}
	if *t18.Measured > moeReadGoal || *t18.Measured < 0.5 {
		t.Errorf("a decode step read %.2f× its active bytes, want at most %.1f×: %+v", *t18.Measured, moeReadGoal, t18.Raw)
	}
}

// TestActiveBytes: a dense layer counts whole, a sparse one its tensors of no expert and k mean experts; a model
// without experts has none.
func TestActiveBytes(t *testing.T) {
	tensor := func(name string, off, n int64, e int) shards.TensorInfo {
		return shards.TensorInfo{Name: name, Offset: off, Length: n, EncodedLength: n}.WithExpert(e)
	}
	dense := shards.UnitInfo{Name: "layer.0", FileSize: 3 << 12, Tensors: []shards.TensorInfo{tensor("a", 64, 100, shards.NoExpert)}}
	sparse := shards.UnitInfo{Name: "layer.1", FileSize: 10 << 12, Tensors: []shards.TensorInfo{
		tensor("attn", 64, 5000, shards.NoExpert),                                                 // 2 pages
		tensor("e0", 2<<12, 4096, 0), tensor("e1", 3<<12, 8192, 1), tensor("e2", 5<<12, 12288, 2), // 1, 2 and 3 pages
	}}
	if got, want := activeBytes([]shards.UnitInfo{dense, sparse}, 2), int64(3<<12+2<<12+2*(6<<12)/3); got != want {
		t.Errorf("active bytes %d, want %d", got, want)
	}
	if got := activeBytes([]shards.UnitInfo{dense}, 2); got != 0 {
		t.Errorf("a dense model has %d active bytes, want 0", got)
	}
}
