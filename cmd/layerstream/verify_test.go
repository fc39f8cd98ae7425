package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/synth"
)

func TestVerifyStories260K(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	var out bytes.Buffer
	err := runVerify(context.Background(), verifyOptions{model: model, ids: []int{1, 403, 407, 261, 378}, dtype: "auto", perLayer: true}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"layer.3 ", "streamed vs reference", "resident vs reference", "streamed vs resident", "all comparisons within tolerance"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("report lacks %q", want)
		}
	}
}

var verifyShape = synth.Shape{HiddenSize: 64, IntermediateSize: 128, NumLayers: 3, NumHeads: 4, NumKVHeads: 2, VocabSize: 256}

// TestVerifySyntheticBF16 checks a bf16 checkpoint both ways: computed in f32 (exact widening, so the f32
// tolerance holds) and in bf16 (cosine ≥ 0.99).
func TestVerifySyntheticBF16(t *testing.T) {
	dir := t.TempDir()
	if err := synth.Write(dir, synth.Options{Shape: verifyShape, DType: checkpoint.BF16, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	ids := []int{1, 17, 99, 200, 3, 42}
	for _, dtype := range []string{"auto", "bf16"} {
		var out bytes.Buffer
		err := runVerify(context.Background(), verifyOptions{model: dir, ids: ids, dtype: dtype}, &out)
		t.Logf("--dtype %s\n%s", dtype, out.String())
		if err != nil {
			t.Fatalf("--dtype %s: %v", dtype, err)
		}
	}
}

// TestVerifyCorruptedShard: after a clean run, one flipped byte in a layer's shard (which the engine streams from
// and the reference never reads) makes verify fail.
func TestVerifyCorruptedShard(t *testing.T) {
	dir, shardDir := t.TempDir(), filepath.Join(t.TempDir(), "shards")
	if err := synth.Write(dir, synth.Options{Shape: verifyShape, DType: checkpoint.BF16, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	o := verifyOptions{model: dir, ids: []int{1, 2, 3}, dtype: "auto", shardDir: shardDir}
	var out bytes.Buffer
	if err := runVerify(context.Background(), o, &out); err != nil {
		t.Fatalf("clean run: %v\n%s", err, out.String())
	}
	set, err := shards.Open(shardDir)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := set.Unit("layer.1")
	path := filepath.Join(shardDir, u.File)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = runVerify(context.Background(), o, &out)
	t.Logf("%v\n%s", err, out.String())
	if err == nil {
		t.Fatal("verify passed on a corrupted shard")
	}
}

// TestVerifyCorrupted: a weight overwritten with NaN bytes makes verify fail loudly, naming the NaN; a truncated
// weight file fails before anything runs.
func TestVerifyCorrupted(t *testing.T) {
	dir := t.TempDir()
	if err := synth.Write(dir, synth.Options{Shape: verifyShape, DType: checkpoint.BF16, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ti, _ := ck.Tensor("model.layers.1.mlp.down_proj.weight")
	f, err := os.OpenFile(ti.File, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	nan := binary.LittleEndian.AppendUint16(nil, 0x7fc0)
	for i := range int64(8) {
		if _, err := f.WriteAt(nan, ti.Offset+ti.Length/2+2*i); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = runVerify(context.Background(), verifyOptions{model: dir, ids: []int{1, 2, 3}, dtype: "auto"}, &out)
	t.Log("\n" + out.String())
	if err == nil || !strings.Contains(err.Error(), "verify-reports-a-mismatch") {
		t.Fatalf("want a mismatch error, got %v", err)
	}
	if !strings.Contains(out.String(), "NaN/Inf") || !strings.Contains(out.String(), "MISMATCH") {
		t.Fatalf("report does not show the NaN failure:\n%s", out.String())
	}

	if err := os.Truncate(ti.File, ti.Offset); err != nil {
		t.Fatal(err)
	}
	err = runVerify(context.Background(), verifyOptions{model: dir, ids: []int{1, 2, 3}, dtype: "auto"}, &out)
	if err == nil || !strings.Contains(err.Error(), filepath.Base(ti.File)) {
		t.Fatalf("truncated file: want an error naming it, got %v", err)
	}
}

func TestVerifyUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"verify", "--model", "x"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--prompt or --ids is required") {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	if code := run([]string{"verify", "--model", "x", "--ids", "1,a"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `"a" is not a token id`) {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
}

func TestVerifyPrompt(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	var out, errb bytes.Buffer
	if code := run([]string{"verify", "--model", model, "--prompt", "Once upon a time"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
}

// TestEngineMissingLMHead: the engine refuses a checkpoint without lm_head.weight and without tied embeddings at
// Open, before generating anything (never all-zero logits).
func TestEngineMissingLMHead(t *testing.T) {
	dir := t.TempDir()
	if err := synth.Write(dir, synth.Options{Shape: verifyShape, DropLMHead: true, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(context.Background(), dir, engine.Options{ShardDir: filepath.Join(t.TempDir(), "s")})
	if err == nil {
		e.Close()
		t.Fatal("engine opened a checkpoint with no output projection")
	}
	if !strings.Contains(err.Error(), "lm_head.weight") || !strings.Contains(err.Error(), "tie_word_embeddings") {
		t.Fatalf("error does not name the tensor and the config flag: %v", err)
	}
}

// TestVerifyOverflow: weights scaled up overflow the engine's float32 arithmetic while the float64 reference stays
// finite. With every weight scaled alike, the first float32 value to overflow is RMSNorm's sum of squares (the
// residual stream grows with the square of the scale, the MLP output with its cube, but the norm comes first): it
// becomes +Inf, rsqrt gives 0, every normalised activation is 0 (as in PyTorch) and the logits are all zero, which
// the zero-logits detector reports. verify fails on it. (NaN from overflow is shown through the reference in
// reference.TestOverflowTripsNaNDetector, and through NaN weights in TestVerifyCorrupted.)
func TestVerifyOverflow(t *testing.T) {
	for _, c := range []struct {
		scale float64
		kind  guard.Kind
	}{{1e14, guard.KindZero}} {
		dir := t.TempDir()
		if err := synth.Write(dir, synth.Options{Shape: verifyShape, DType: checkpoint.BF16, Scale: c.scale, Seed: 5}); err != nil {
			t.Fatal(err)
		}
		ids := []int{1, 2, 3}
		e, err := engine.Open(context.Background(), dir, engine.Options{})
		if err != nil {
			t.Fatal(err)
		}
		logits, err := e.Logits(context.Background(), ids)
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		m := guard.NewMonitor(guard.MonitorOptions{Strict: true})
		var p *guard.Problem
		for step, row := range logits {
			if errors.As(m.CheckLogits(step, row), &p) {
				break
			}
		}
		if p == nil || p.Kind != c.kind {
			t.Fatalf("scale %g: want a %s problem on the engine's logits, got %v", c.scale, c.kind, p)
		}
		t.Logf("scale %g: %v", c.scale, p)

		var out bytes.Buffer
		err = runVerify(context.Background(), verifyOptions{model: dir, ids: ids, dtype: "auto"}, &out)
		t.Logf("%v\n%s", err, out.String())
		if err == nil || !strings.Contains(out.String(), "MISMATCH") {
			t.Fatalf("scale %g: verify passed an overflowing model", c.scale)
		}
	}
}

// TestVerifyQuantizedGGUF: on a GGUF of block-quantized matrices verify holds the logits to
// reference.QuantizedLogitTolerance and says why, encodes --prompt with the file's own tokenizer, and passes; on
// a folder that is not a model, generate names what is missing rather than a tokenizer.
func TestVerifyQuantizedGGUF(t *testing.T) {
	t.Setenv("LAYERSTREAM_CACHE", t.TempDir())
	for _, typ := range []string{"Q4_K", "Q8_0"} {
		model := filepath.Join("..", "..", "gguf", "testdata", "tiny", "tiny-llama-"+typ+".gguf")
		var out, errb bytes.Buffer
		if code := run([]string{"verify", "--model", model, "--prompt", "Once upon a time"}, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", typ, code, errb.String())
		}
		out.Reset()
		if err := runVerify(context.Background(), verifyOptions{model: model, ids: []int{1, 403, 407, 261, 378, 300}, dtype: "auto"}, &out); err != nil {
			t.Fatalf("%s: %v\n%s", typ, err, out.String())
		}
		for _, want := range []string{"quantized: the checkpoint holds block-quantized matrices", "cos>=0.995", "all comparisons within tolerance"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("%s: report lacks %q:\n%s", typ, want, out.String())
			}
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"generate", "--model", t.TempDir(), "--prompt", "hi"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "neither a shard folder") {
		t.Fatalf("generate on an empty folder: exit %d, %q (want the missing config.json named)", code, errb.String())
	}
}
