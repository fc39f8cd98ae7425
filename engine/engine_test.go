package engine

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/synth"
)

// tinyShape is a synthetic 8-layer model small enough for unit tests.
func tinyShape(tied bool) synth.Shape {
	return synth.Shape{HiddenSize: 32, IntermediateSize: 48, NumLayers: 8, NumHeads: 4, NumKVHeads: 2,
		VocabSize: 64, TieEmbeddings: tied, MaxPositionEmbeddings: 64, BOSTokenID: 1, EOSTokenID: 2}
}

func writeTiny(t *testing.T, opts synth.Options) string {
	t.Helper()
	dir := t.TempDir()
	if opts.DType == "" {
		opts.DType = checkpoint.F32
	}
	opts.Std = 0.2 // large enough that logits differ clearly between positions
	if err := synth.Write(dir, opts); err != nil {
		t.Fatal(err)
	}
	return dir
}

func open(t *testing.T, model string, opts Options) *Engine {
	t.Helper()
	e, err := Open(context.Background(), model, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func maxDiff(a, b [][]float32) float64 {
	m := 0.0
	for i := range a {
		for j := range a[i] {
			m = max(m, math.Abs(float64(a[i][j]-b[i][j])))
		}
	}
	return m
}

// tokenByToken returns the logits of every position computed one position per forward pass (decode path).
func tokenByToken(t *testing.T, e *Engine, ids []int) [][]float32 {
	t.Helper()
	ctx := context.Background()
	kv, err := e.run.kvStore(bucket(len(ids)), e.run.onHost(false))
	if err != nil {
		t.Fatal(err)
	}
	st := e.store.newStream(ctx, len(ids), e.opts.GraphDecode)
	if st != nil {
		defer st.stop()
	}
	var out [][]float32
	for _, id := range ids {
		l, err := e.run.pass(ctx, st, kv, []int{id}, false)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, l[0])
	}
	return out
}

var testIDs = []int{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421}

// TestStreamedResidentPrefillDecodeAgree: the logits do not depend on how weights reach the device or on
// whether the prompt is prefilled in one pass or fed token by token.
// Tolerances: streamed vs resident run the same code on the same bytes, so they must be identical (0);
// one-pass prefill (graphs) vs token by token (host kernels, or graphs of another shape with GraphDecode) sum
// in different orders: within 2e-5 (logits are of order 10).
func TestStreamedResidentPrefillDecodeAgree(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	ctx := context.Background()
	streamed := open(t, model, Options{Prefetch: 1, MaxLayerBuffers: 1})
	resident := open(t, model, Options{Resident: true})
	all := open(t, model, Options{StreamAll: true})
	copied := open(t, model, Options{NoMap: true}) // shards read into buffers instead of mapped
	a, err := streamed.Logits(ctx, testIDs)
	if err != nil {
		t.Fatal(err)
	}
	b, err := resident.Logits(ctx, testIDs)
	if err != nil {
		t.Fatal(err)
	}
	c, err := all.Logits(ctx, testIDs)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(a, b); d != 0 {
		t.Errorf("streamed vs resident logits differ by %g", d)
	}
	if d := maxDiff(a, c); d != 0 {
		t.Errorf("streamed vs stream-all logits differ by %g", d)
	}
	if d, err := copied.Logits(ctx, testIDs); err != nil || maxDiff(a, d) != 0 {
		t.Errorf("mapped vs copied shards: logits differ (%v)", err)
	}
	graphDecode := open(t, model, Options{GraphDecode: true})
	for name, e := range map[string]*Engine{"streamed": streamed, "resident": resident, "graph decode": graphDecode} {
		tok := tokenByToken(t, e, testIDs)
		d := maxDiff(a, tok)
		t.Logf("%s: one-pass prefill vs token by token: max abs diff %.2g", name, d)
		if d > 2e-5 {
			t.Errorf("%s: one-pass prefill vs token by token differ by %g (> 2e-5)", name, d)
		}
	}
	// Generation with a chunked prefill (3 tokens per pass) picks the same tokens.
	one, err := streamed.Generate(ctx, Request{PromptIDs: testIDs, MaxNewTokens: 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	chunked, err := streamed.Generate(ctx, Request{PromptIDs: testIDs, MaxNewTokens: 20, PrefillChunk: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(one.GeneratedIDs, chunked.GeneratedIDs) {
		t.Errorf("chunked prefill generated %v, one pass %v", chunked.GeneratedIDs, one.GeneratedIDs)
	}
}

func TestTiedAndMissingLMHead(t *testing.T) {
	ctx := context.Background()
	tied := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 1})
	e := open(t, tied, Options{})
	res, err := e.Generate(ctx, Request{PromptIDs: []int{1, 5, 9}, MaxNewTokens: 4, StopIDs: []int{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.GeneratedIDs) != 4 || res.StopReason != StopMaxNewTokens {
		t.Fatalf("tied model: got %v (%s), want 4 tokens and max_new_tokens", res.GeneratedIDs, res.StopReason)
	}
	// The tied head really is the embedding: logits are not all zero and differ across the vocabulary.
	l, err := e.Logits(ctx, []int{1, 5})
	if err != nil {
		t.Fatal(err)
	}
	lo, hi := l[1][0], l[1][0]
	for _, v := range l[1] {
		lo, hi = min(lo, v), max(hi, v)
	}
	if hi-lo < 1e-3 {
		t.Fatalf("tied model logits are flat: [%g, %g]", lo, hi)
	}

	broken := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 1, DropLMHead: true})
	for _, opts := range []Options{{}, {StreamAll: true}, {Resident: true}} {
		_, err = Open(ctx, broken, opts)
		if err == nil {
			t.Fatal("Open of a checkpoint without lm_head.weight and untied embeddings succeeded")
		}
		for _, want := range []string{"lm_head.weight", "tie_word_embeddings"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
	}
}

// TestLayerBufferBudget counts live decoder-layer buffers while a synthetic 8-layer model generates.
func TestLayerBufferBudget(t *testing.T) {
	ctx := context.Background()
	model := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 2})
	ref := open(t, model, Options{Resident: true})
	want, err := ref.Generate(ctx, Request{PromptIDs: []int{1, 7, 3}, MaxNewTokens: 6, StopIDs: []int{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	layerBytes := int64(0)
	for _, s := range ref.store.layerSpecs {
		n := int64(s.dtype.Size())
		for _, d := range s.shape {
			n *= int64(d)
		}
		layerBytes += n
	}
	for _, tc := range []struct {
		name   string
		opts   Options
		budget int
	}{
		{"max-layer-buffers=1", Options{MaxLayerBuffers: 1}, 1},
		{"max-layer-buffers=3", Options{MaxLayerBuffers: 3, Prefetch: 4}, 3},
		{"device-budget=2.5 layers", Options{DeviceBudget: layerBytes * 5 / 2, Prefetch: 3}, 2},
		{"stream-all", Options{StreamAll: true, MaxLayerBuffers: 2}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := open(t, model, tc.opts)
			res, err := e.Generate(ctx, Request{PromptIDs: []int{1, 7, 3}, MaxNewTokens: 6, StopIDs: []int{}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.GeneratedIDs, want.GeneratedIDs) {
				t.Errorf("generated %v, resident %v", res.GeneratedIDs, want.GeneratedIDs)
			}
			s := e.Stats()
			if s.LayerBuffers != tc.budget {
				t.Errorf("%d layer buffers allocated, budget %d", s.LayerBuffers, tc.budget)
			}
			if s.PeakLayerBuffersInUse < 1 || s.PeakLayerBuffersInUse > tc.budget {
				t.Errorf("peak live layer buffers %d, budget %d", s.PeakLayerBuffersInUse, tc.budget)
			}
		})
	}
	_, err = Open(ctx, model, Options{DeviceBudget: layerBytes / 2})
	if err == nil || !strings.Contains(err.Error(), "smaller than one decoder layer") {
		t.Errorf("a budget of half a layer: got %v, want an error", err)
	}
}

// TestDeviceBudgetQuantized: a block-quantized layer counts against the device budget as the blocks the host
// kernels read in place, not at its float size; with the graphs (GraphDecode), which compute on the dequantized
// matrices, at the float size. The error gives the sizes in bytesize's units.
func TestDeviceBudgetQuantized(t *testing.T) {
	ctx := context.Background()
	ck, err := checkpoint.Open(writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 2}))
	if err != nil {
		t.Fatal(err)
	}
	q8 := filepath.Join(t.TempDir(), "q8")
	set, err := shards.Split(ctx, ck, shards.SplitOptions{Out: q8, Quantize: shards.Q8})
	if err != nil {
		t.Fatal(err)
	}
	u, _ := set.Unit("layer.0")
	held, float := u.Bytes(), int64(0) // the Q8_0 blocks and the f32 norm weights as stored; all of it in f32
	for _, t := range u.Tensors {
		n := int64(4)
		for _, d := range t.Shape {
			n *= d
		}
		float += n
	}
	if held*9/4 >= float {
		t.Fatalf("layer of %d bytes as Q8_0, %d as f32: 2.25 quantized layers should not fit the f32 one", held, float)
	}
	e := open(t, q8, Options{DeviceBudget: held * 9 / 4, Prefetch: 3})
	if n := e.Stats().LayerBuffers; n != 2 {
		t.Errorf("a budget of 2.25 Q8_0 layers: %d layer buffers, want 2", n)
	}
	_, err = Open(ctx, q8, Options{DeviceBudget: held * 9 / 4, GraphDecode: true})
	want := "smaller than one decoder layer (" + bytesize.Format(float) + ")"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("graphs, a budget of 2.25 Q8_0 layers: got %v, want an error containing %q", err, want)
	}
}

// TestCloseUnmapsShards: a streamed engine maps each shard file once (the layers it streams, and the head units
// it fills its resident buffers from), keeps the mapping, and unmaps every one when closed.
func TestCloseUnmapsShards(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 5, DType: checkpoint.BF16})
	shardDir := shards.DefaultDir(model)
	mappings := func() int {
		b, err := os.ReadFile("/proc/self/maps")
		if err != nil {
			t.Skipf("no /proc/self/maps: %v", err)
		}
		n := 0
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, shardDir) && strings.Contains(line, ".shard") {
				n++
			}
		}
		return n
	}
	e, err := Open(context.Background(), model, Options{Prefetch: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Generate(context.Background(), Request{PromptIDs: []int{1, 5, 9}, MaxNewTokens: 4}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Generate(context.Background(), Request{PromptIDs: []int{1, 7}, MaxNewTokens: 3}, nil); err != nil {
		t.Fatal(err)
	}
	if held, units := mappings(), len(e.store.set.Units()); held != units {
		t.Errorf("%d shard mappings after two generations, want one per unit (%d: the layers streamed, the head units loaded from mappings)", held, units)
	}
	e.Close()
	if n := mappings(); n > 0 {
		t.Errorf("%d shard mappings left after Close", n)
	}
}

func TestCancellation(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 3})
	before := runtime.NumGoroutine()
	for _, opts := range []Options{{}, {StreamAll: true, Prefetch: 3}, {Resident: true}} {
		e, err := Open(context.Background(), model, opts)
		if err != nil {
			t.Fatal(err)
		}
		// Cancelled mid-generation, from the token callback.
		ctx, cancel := context.WithCancel(context.Background())
		n := 0
		_, err = e.Generate(ctx, Request{PromptIDs: []int{1, 2, 3}, MaxNewTokens: 40, StopIDs: []int{}}, func(Token) error {
			if n++; n == 3 {
				cancel()
			}
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%+v: cancelled generation returned %v, want context.Canceled", opts, err)
		}
		if n != 3 {
			t.Errorf("%+v: %d tokens after cancelling at 3", opts, n)
		}
		// Already cancelled.
		if _, err := e.Logits(ctx, []int{1, 2}); !errors.Is(err, context.Canceled) {
			t.Errorf("%+v: Logits with a cancelled context returned %v", opts, err)
		}
		// The engine still works after a cancellation: every buffer went back to its pool.
		if _, err := e.Generate(context.Background(), Request{PromptIDs: []int{1, 2, 3}, MaxNewTokens: 3}, nil); err != nil {
			t.Errorf("%+v: generation after a cancellation: %v", opts, err)
		}
		e.Close()
	}
	// No stage goroutine outlives its generation.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestContextOverflowIsAnErrorBeforeWork(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 4})
	e := open(t, model, Options{})
	_, err := e.Generate(context.Background(), Request{PromptIDs: make([]int, 60), MaxNewTokens: 10}, func(Token) error {
		t.Fatal("a token was generated")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "max_position_embeddings") {
		t.Fatalf("got %v, want a context overflow error", err)
	}
	// MaxNewTokens 0 fills the context and says so.
	res, err := e.Generate(context.Background(), Request{PromptIDs: make([]int, 60), StopIDs: []int{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.GeneratedIDs) != 4 || res.StopReason != StopContext {
		t.Fatalf("got %d tokens, stop %q; want 4 and %q", len(res.GeneratedIDs), res.StopReason, StopContext)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 5})
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Device: "tpu"}, "unknown device"},
		{Options{DType: "f16"}, "dtype"},
		{Options{Resident: true, StreamAll: true}, "exclude"},
	} {
		if _, err := Open(ctx, model, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want an error containing %q", tc.opts, err, tc.want)
		}
	}
	if _, err := Open(ctx, t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("empty folder: got %v", err)
	}
}

// TestBF16Compute: bf16 weights on the device give logits close to the f32 computation.
func TestBF16Compute(t *testing.T) {
	ctx := context.Background()
	model := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 6, DType: checkpoint.BF16})
	f := open(t, model, Options{DType: "f32"})
	b := open(t, model, Options{DType: "bf16"})
	ids := []int{1, 9, 17, 33}
	lf, err := f.Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	// Activations are rounded to bf16 (8 significant bits) before each matrix product: allow 3% of the
	// logits' range.
	scale := 0.0
	for _, row := range lf {
		for _, v := range row {
			scale = max(scale, math.Abs(float64(v)))
		}
	}
	d := maxDiff(lf, lb)
	t.Logf("bf16 vs f32 compute: max abs diff %.3g (largest |logit| %.3g)", d, scale)
	if d > 0.03*scale || d == 0 {
		t.Errorf("bf16 vs f32 logits differ by %g, want (0, %g]", d, 0.03*scale)
	}
}

// TestOpenSplitsOnFirstUse: a checkpoint folder is split into shards once; the shard folder opens directly and
// gives the same logits.
func TestOpenSplitsOnFirstUse(t *testing.T) {
	ctx := context.Background()
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 8})
	a := open(t, model, Options{})
	dir := a.Dir()
	if !shards.IsSet(dir) || dir != shards.DefaultDir(model) || strings.HasPrefix(dir, model) {
		t.Fatalf("engine reads %s, want a complete split in the cache (%s), not inside %s", dir, shards.DefaultDir(model), model)
	}
	st, err := os.Stat(filepath.Join(dir, shards.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	b := open(t, model, Options{}) // reuses the split
	if st2, err := os.Stat(filepath.Join(dir, shards.ManifestFile)); err != nil || !st2.ModTime().Equal(st.ModTime()) {
		t.Errorf("second Open rewrote the manifest (%v)", err)
	}
	c := open(t, dir, Options{}) // the shard folder itself
	ids := []int{1, 4, 9}
	la, err := a.Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []*Engine{b, c} {
		l, err := e.Logits(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(la, l); d != 0 {
			t.Errorf("%s: logits differ by %g", e.Dir(), d)
		}
	}
}

// TestMonitorStopsOnOverflow: weights scaled to overflow float32 give broken logits (the final RMSNorm's
// sum of squares overflows to Inf, so the logits come out all zero), which a strict monitor turns into an error
// before any token is produced.
func TestMonitorStopsOnOverflow(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 9, Scale: 1e18})
	e := open(t, model, Options{Monitor: guard.NewMonitor(guard.MonitorOptions{Strict: true})})
	_, err := e.Generate(context.Background(), Request{PromptIDs: []int{1, 2, 3}, MaxNewTokens: 4}, func(Token) error {
		t.Error("a token was produced from broken logits")
		return nil
	})
	var p *guard.Problem
	if !errors.As(err, &p) || (p.Kind != guard.KindNaN && p.Kind != guard.KindZero && p.Kind != guard.KindActivationNaN && p.Kind != guard.KindActivationRange) {
		t.Fatalf("got %v, want a guard problem (activations out of range, NaN or all-zero logits)", err)
	}
}

// TestCorruptShardMidStream: a shard corrupted after Open fails the generation with an error naming the shard,
// raised by the prefetch stage and carried to the caller; the other stages stop.
func TestCorruptShardMidStream(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 10})
	e := open(t, model, Options{})
	path := filepath.Join(e.Dir(), "layer.5.shard")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff // inside the tensor data
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = e.Generate(context.Background(), Request{PromptIDs: []int{1, 2}, MaxNewTokens: 3}, nil)
	if err == nil || !strings.Contains(err.Error(), "layer.5") {
		t.Fatalf("got %v, want an error naming layer.5's shard", err)
	}
	t.Log(err)
}

func TestCallerStop(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 11})
	e := open(t, model, Options{})
	n := 0
	res, err := e.Generate(context.Background(), Request{PromptIDs: []int{1, 2}, MaxNewTokens: 10, StopIDs: []int{}}, func(Token) error {
		if n++; n == 2 {
			return ErrStopped
		}
		return nil
	})
	if err != nil || len(res.GeneratedIDs) != 2 || res.StopReason != StopCaller {
		t.Fatalf("got %v, %+v; want 2 tokens stopped by the caller", err, res)
	}
}

// TestDirectIO: reading shards with O_DIRECT (or the page-cache fallback where the filesystem refuses it) gives
// the same logits.
func TestDirectIO(t *testing.T) {
	ctx := context.Background()
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 12})
	ids := []int{1, 3, 5}
	want, err := open(t, model, Options{}).Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	got, err := open(t, model, Options{DirectIO: DirectIOOn, MemoryBudget: MemoryBudgetOff}).Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(want, got); d != 0 {
		t.Errorf("O_DIRECT logits differ by %g", d)
	}
}

func TestRopeScaling(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		scaling string
		ok      bool
	}{
		{`null`, true},
		{`{}`, true},
		{`{"rope_type": "llama3", "factor": 8.0}`, false},
	} {
		model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 13})
		path := filepath.Join(model, "config.json")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]json.RawMessage
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		cfg["rope_scaling"] = json.RawMessage(tc.scaling)
		if b, err = json.Marshal(cfg); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		e, err := Open(ctx, model, Options{})
		if tc.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "rope_scaling")) {
			t.Errorf("rope_scaling %s: got %v", tc.scaling, err)
		}
		if e != nil {
			e.Close()
		}
	}
}

// TestHostDecodeBF16: under --dtype f32 the host kernels read bf16 weight buffers widened exactly on the fly,
// so they agree with f32 compute of the same bf16 checkpoint to float32 rounding (1e-4). Under bf16 they round
// the activations to bf16 before each product (kernels.LinearBF16), and under auto too where the CPU has
// AVX512_BF16: within 5% of the logits' range here, as are the bf16 graphs, which also accumulate reductions
// in bf16 (10%).
func TestHostDecodeBF16(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 14, DType: checkpoint.BF16})
	ids := []int{1, 9, 17, 33, 40}
	exactHost := tokenByToken(t, open(t, model, Options{DType: "f32"}), ids)
	host := tokenByToken(t, open(t, model, Options{DType: "bf16"}), ids)
	auto := tokenByToken(t, open(t, model, Options{}), ids)
	graph := tokenByToken(t, open(t, model, Options{DType: "bf16", GraphDecode: true}), ids)
	exact := tokenByToken(t, open(t, model, Options{DType: "f32", GraphDecode: true}), ids)
	scale := 0.0
	for _, row := range exact {
		for _, v := range row {
			scale = max(scale, math.Abs(float64(v)))
		}
	}
	de, dh, dg := maxDiff(exact, exactHost), maxDiff(exact, host), maxDiff(exact, graph)
	t.Logf("vs f32 graphs: f32 host kernels %.3g, bf16 host kernels %.3g, bf16 graphs %.3g (largest |logit| %.3g)", de, dh, dg, scale)
	if de > 1e-4 {
		t.Errorf("f32 host kernels differ from f32 graphs by %g (> 1e-4)", de)
	}
	if dh > 0.05*scale || dh == 0 {
		t.Errorf("bf16 host kernels differ from f32 by %g, want (0, %g]", dh, 0.05*scale)
	}
	if dg > 0.1*scale || dg == 0 {
		t.Errorf("bf16 graphs differ from f32 by %g, want (0, %g]", dg, 0.1*scale)
	}
	want, name := exactHost, "f32"
	if kernels.NativeBF16() {
		want, name = host, "bf16"
	}
	if d := maxDiff(want, auto); d != 0 {
		t.Errorf("auto host kernels differ from %s ones by %g, want the same", name, d)
	}
}

// TestDeviceBuffersFilledOnDemand: the host kernels read resident layers and the head units (embedding, final
// norm, lm_head) in place, from mapped shards or from buffers of their own (NoMap); their device buffers are
// filled only when a graph first needs them (the embedding's never: its rows are looked up on the host). The
// logits are the same as with buffers filled at Open (GraphDecode) or from the stream.
func TestDeviceBuffersFilledOnDemand(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 13, DType: checkpoint.BF16})
	ctx := context.Background()
	engines := map[string]*Engine{
		"mapped":   open(t, model, Options{}),
		"copied":   open(t, model, Options{NoMap: true}),
		"resident": open(t, model, Options{Resident: true}),
	}
	eager := open(t, model, Options{GraphDecode: true})
	// unfilled counts the sets the graphs read whose device buffers are not filled yet.
	unfilled := func(e *Engine) (n int) {
		for _, w := range append([]*weightSet{e.store.norm, e.store.head}, e.store.resident...) {
			if w.pending != nil {
				n++
			}
		}
		return n
	}
	sets := func(e *Engine) int { return 2 + len(e.store.resident) }
	if n := unfilled(eager); n != 0 {
		t.Fatalf("GraphDecode: %d sets left unfilled at Open", n)
	}
	ids := []int{1, 5, 9, 14}
	want, err := eager.Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for name, e := range engines {
		if n := unfilled(e); n != sets(e) || e.store.embed.pending == nil {
			t.Fatalf("%s: %d of %d sets unfilled at Open (embedding %v), want all", name, n, sets(e), e.store.embed.pending != nil)
		}
		if _, err := e.Generate(ctx, Request{PromptIDs: []int{1, 5, 9}, MaxNewTokens: 3}, nil); err != nil {
			t.Fatal(err)
		}
		if n := unfilled(e); n != sets(e) {
			t.Fatalf("%s: the host kernels' generation filled %d sets' device buffers", name, sets(e)-n)
		}
		got, err := e.Logits(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		if n := unfilled(e); n != 0 {
			t.Fatalf("%s: Logits (graphs) left %d sets unfilled", name, n)
		}
		if d := maxDiff(got, want); d != 0 {
			t.Errorf("%s: logits differ by %g from those of buffers filled at Open", name, d)
		}
	}
}

// TestHandBackLogits: a forward pass's logits stay as they are through later passes unless their caller hands
// them back (runner.handBack), and the next pass's head then writes its own into them, the same values as
// fresh ones.
func TestHandBackLogits(t *testing.T) {
	e := open(t, testutil.SharedPath(t, "models", "stories260K-hf"), Options{Resident: true})
	want := tokenByToken(t, e, testIDs[:4])
	ctx := context.Background()
	kv, err := e.run.kvStore(bucket(4), true)
	if err != nil {
		t.Fatal(err)
	}
	pass := func(id int) []float32 {
		l, err := e.run.pass(ctx, nil, kv, []int{id}, false)
		if err != nil {
			t.Fatal(err)
		}
		return l[0]
	}
	first := pass(testIDs[0])
	kept := slices.Clone(first)
	second := pass(testIDs[1])
	if &second[0] == &first[0] || !slices.Equal(first, kept) {
		t.Fatal("a pass wrote over the logits of one before it that were not handed back")
	}
	e.run.handBack()
	third := pass(testIDs[2])
	if &third[0] != &second[0] {
		t.Fatal("the head did not reuse the logits handed back")
	}
	if d := maxDiff([][]float32{first, third}, [][]float32{want[0], want[2]}); d != 0 {
		t.Fatalf("logits differ from token-by-token passes by %g", d)
	}
}
