package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/profiler"
)

func TestStatusBytes(t *testing.T) {
	status := "Name:\tlayerstream\nVmPeak:\t  999 kB\nVmHWM:\t   23456 kB\nVmRSS:\t 100 kB\nRssAnon:\t 60 kB\nRssFile:\t 40 kB\n"
	for key, want := range map[string]int64{"VmHWM": 23456, "RssAnon": 60, "RssFile": 40, "VmSwap": 0} {
		if got := statusBytes(status, key); got != want*1024 {
			t.Errorf("%s: %d, want %d", key, got, want*1024)
		}
	}
	if got := statusBytes("VmHWM: lots\n", "VmHWM"); got != 0 {
		t.Fatalf("malformed VmHWM gave %d", got)
	}
	if peak, anon, file := memStatus(); peak < 0 || anon < 0 || file < 0 || (peak > 0 && anon == 0) {
		t.Fatalf("memStatus %d %d %d", peak, anon, file)
	}
}

func TestMeasureRun(t *testing.T) {
	gen := func(n, report int) func(context.Context, func()) (int, error) {
		return func(_ context.Context, onToken func()) (int, error) {
			for range n {
				time.Sleep(time.Millisecond)
				onToken()
			}
			return report, nil
		}
	}
	r, err := measureRun(context.Background(), gen(5, 5), 100)
	if err != nil {
		t.Fatal(err)
	}
	if r.Generated != 5 || r.TTFT <= 0 || r.Decode <= 0 || r.Total < r.TTFT+r.Decode {
		t.Fatalf("run %+v", r)
	}
	if want := 100 / r.TTFT.Seconds(); r.PrefillTokS != want {
		t.Fatalf("prefill tok/s %v, want %v", r.PrefillTokS, want)
	}
	if want := 4 / r.Decode.Seconds(); r.DecodeTokS != want {
		t.Fatalf("decode tok/s %v, want %v", r.DecodeTokS, want)
	}
	if r, err := measureRun(context.Background(), gen(1, 1), 10); err != nil || r.DecodeTokS != 0 {
		t.Fatalf("one token: %+v, %v", r, err)
	}
	if _, err := measureRun(context.Background(), gen(3, 4), 10); err == nil {
		t.Fatal("token count mismatch not reported")
	}
	fail := func(context.Context, func()) (int, error) { return 0, errors.New("boom") }
	if _, err := measureRun(context.Background(), fail, 10); err == nil || err.Error() != "boom" {
		t.Fatalf("engine error: %v", err)
	}
}

func TestSyntheticPrompt(t *testing.T) {
	cfg := &checkpoint.Config{VocabSize: 10, MaxPositionEmbeddings: 1000}
	eos := 7
	gen := &checkpoint.GenerationConfig{EOSTokenID: []int{eos}}
	a, err := syntheticPrompt(cfg, gen, 500, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := syntheticPrompt(cfg, gen, 500, 1)
	c, _ := syntheticPrompt(cfg, gen, 500, 2)
	if !slices.Equal(a, b) || slices.Equal(a, c) || len(a) != 500 {
		t.Fatal("prompt ids are not a deterministic function of the seed")
	}
	for _, id := range a {
		if id < 3 || id >= 10 || id == eos {
			t.Fatalf("id %d: special, end-of-sequence or out of the vocabulary", id)
		}
	}
	if _, err := syntheticPrompt(&checkpoint.Config{VocabSize: 4}, gen, 1, 1); err == nil ||
		!strings.Contains(err.Error(), "vocab_size") {
		t.Fatalf("tiny vocabulary: %v", err)
	}
}

func TestBenchReportOutput(t *testing.T) {
	rep := &benchReport{Model: "m", Device: "cpu", Reads: "O_DIRECT", PromptTokens: 8, NewTokens: 4, Warmup: 1, PeakRSS: 50e6,
		Runs: []benchRun{
			{Generated: 4, TTFT: 100 * time.Millisecond, Total: 400 * time.Millisecond, PrefillTokS: 80, DecodeTokS: 10},
			{Generated: 4, TTFT: 200 * time.Millisecond, Total: 700 * time.Millisecond, PrefillTokS: 40, DecodeTokS: 6},
			{Generated: 4, TTFT: 50 * time.Millisecond, Total: 500 * time.Millisecond, PrefillTokS: 160, DecodeTokS: 8},
		}}
	rep.summarize()
	if rep.PrefillTokS != 80 || rep.DecodeTokS != 8 || rep.SecPerToken != 0.125 || rep.TTFT != 0.1 ||
		rep.Total != 0.5 {
		t.Fatalf("medians %+v", rep)
	}
	var tbl bytes.Buffer
	if err := rep.writeTable(&tbl); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"on cpu (shard reads: O_DIRECT)", "3 runs (+1 warm-up)", "median             80.0          8.00     0.1250      0.100      0.500",
		"peak RSS 50.0 MB"} {
		if !strings.Contains(tbl.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tbl.String())
		}
	}
	var js bytes.Buffer
	if err := rep.writeJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back["decode_tok_s"] != 8.0 || back["s_per_token"] != 0.125 || back["reads"] != "O_DIRECT" || len(back["runs"].([]any)) != 3 {
		t.Fatalf("JSON %s", js.String())
	}
	// scripts/benchmark_cpu_vs_cuda.sh reads the first occurrence of each median: it must precede the runs.
	s := js.String()
	if strings.Index(s, `"decode_tok_s"`) > strings.Index(s, `"runs"`) {
		t.Fatal("medians must come before the per-run list in the JSON")
	}
}

func TestBenchUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "--runs", "2"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "--model is required") {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	if code := run([]string{"bench", "--model", "x", "--new-tokens", "0"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "--new-tokens must be at least 1") {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
}

// TestBenchStories260K benchmarks the real tiny model, profiling the last run into a Parquet trace.
func TestBenchStories260K(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	trace := filepath.Join(t.TempDir(), "trace.parquet")
	prof, err := parseProfileFlags(t, "--profile-out", trace)
	if err != nil {
		t.Fatal(err)
	}
	o := benchOptions{model: model, promptTokens: 8, newTokens: 6, runs: 2, warmup: 1, seed: 3,
		eng: engine.Options{ShardDir: t.TempDir()}}
	rep, err := runBench(context.Background(), o, prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.PrefillTokS <= 0 || rep.DecodeTokS <= 0 || rep.Reads != "page cache" {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Runs {
		if r.Generated != 6 {
			t.Fatalf("run generated %d tokens, want 6 (end-of-sequence must not stop a bench run)", r.Generated)
		}
	}
	evs, err := profiler.ReadParquet(trace)
	if err != nil {
		t.Fatal(err)
	}
	// The trace covers the last run only: one forward pass of layer 0 per step.
	steps := map[int]int{}
	for _, e := range evs {
		if e.Category == profiler.Forward && e.Layer == 0 {
			steps[e.Step]++
		}
	}
	if len(steps) == 0 {
		t.Fatal("no forward events of layer 0 in the trace")
	}
	for step, n := range steps {
		if n != 1 || step < 0 || step >= 6 {
			t.Fatalf("step %d: %d forward passes of layer 0 (want 1 per step of one run)", step, n)
		}
	}
	var wall time.Duration
	for _, e := range evs {
		wall = max(wall, e.End())
	}
	s := profiler.Summarize(evs, wall)
	t.Logf("last run: sum of categories %v, overlapped %v, not covered %v of %v", s.Sum, s.Overlapped, s.Untracked,
		wall)
}

// TestBenchMoE: on a mixture of experts streamed without an expert cache, bench reports the shard bytes read per
// decoded token (the layers' tensors but their experts, and the routed experts: under the decoder layers' bytes),
// the layers' bytes and the expert counters, in the JSON and the table.
func TestBenchMoE(t *testing.T) {
	o := benchOptions{model: hffixture.Checkpoint(t, "qwen3_moe", hffixture.V5), promptTokens: 4, newTokens: 5, runs: 2, warmup: 1, seed: 3,
		eng: engine.Options{ShardDir: t.TempDir(), NoMap: true, ExpertCache: -1}}
	prof, err := parseProfileFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := runBench(context.Background(), o, prof)
	if err != nil {
		t.Fatal(err)
	}
	x := rep.Experts
	if rep.LayerBytes == 0 || rep.ReadBytesPerToken <= 0 || rep.ReadBytesPerToken >= rep.LayerBytes || x == nil || x.Misses == 0 || x.Hits != 0 || x.Predicted == 0 {
		t.Fatalf("read %d bytes per token of %d layer bytes; experts %+v", rep.ReadBytesPerToken, rep.LayerBytes, x)
	}
	var js, table bytes.Buffer
	if err := rep.writeJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := rep.writeTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"read_bytes_per_token":`, `"layer_bytes":`, `"hit_rate":`, `"prediction_accuracy":`} {
		if !strings.Contains(js.String(), want) {
			t.Errorf("JSON without %s: %s", want, js.String())
		}
	}
	for _, want := range []string{"shard bytes read per decoded token", "expert cache: 0.0% hits", "prediction accuracy"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table without %q:\n%s", want, table.String())
		}
	}
}
