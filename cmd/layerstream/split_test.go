package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSynthSplitVerify(t *testing.T) {
	ck := filepath.Join(t.TempDir(), "ck")
	var out, errb bytes.Buffer
	if code := run([]string{"synth", "--shape", "smollm2-135m", "--layers", "1", "--seed", "5", "--out", ck}, &out, &errb); code != 0 {
		t.Fatalf("synth: exit %d: %s", code, errb.String())
	}
	dir := filepath.Join(t.TempDir(), "shards")
	if code := run([]string{"split", ck, "--out", dir, "-q"}, &out, &errb); code != 0 {
		t.Fatalf("split: exit %d: %s", code, errb.String())
	}
	for _, f := range []string{"manifest.parquet", "embed.shard", "layer.0.shard", "norm.shard", "config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	if code := run([]string{"split", "--verify", ck, "--out", dir}, &out, &errb); code != 0 {
		t.Fatalf("split --verify: exit %d: %s", code, errb.String())
	}
	// A corrupted shard makes --verify fail and name the tensor.
	path := filepath.Join(dir, "norm.shard")
	b, _ := os.ReadFile(path)
	b[64] ^= 1
	os.WriteFile(path, b, 0o644)
	errb.Reset()
	if code := run([]string{"split", "--verify", ck, "--out", dir}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "1 problems") {
		t.Fatalf("split --verify of a corrupted shard: exit %d: %s", code, errb.String())
	}
	if code := run([]string{"split", ck, "--encoding", "lz4"}, &out, &errb); code != 2 {
		t.Fatalf("bad encoding: exit %d", code)
	}
	// planes at a given disk rate: split, logged, verified.
	planes := filepath.Join(t.TempDir(), "planes")
	errb.Reset()
	if code := run([]string{"split", ck, "--out", planes, "--encoding", "planes", "--disk-rate", "1MB/s"}, &out, &errb); code != 0 ||
		!strings.Contains(errb.String(), "split encoding") || !strings.Contains(errb.String(), "encoding=planes") {
		t.Fatalf("split --encoding planes: exit %d: %s", code, errb.String())
	}
	if code := run([]string{"split", "--verify", ck, "--out", planes}, &out, &errb); code != 0 {
		t.Fatalf("split --verify of planes shards: exit %d: %s", code, errb.String())
	}
	if code := run([]string{"split", ck, "--encoding", "planes", "--disk-rate", "fast"}, &out, &errb); code != 2 {
		t.Fatalf("bad --disk-rate: exit %d", code)
	}
	if code := run([]string{"synth", "--shape", "gpt5", "--out", ck}, &out, &errb); code != 2 {
		t.Fatalf("unknown shape: exit %d", code)
	}
}

// Issue #13 case 4: weights of the same shapes saved over the checkpoint. split --verify reports it and advises
// running split again; doing so must re-split them (it used to keep the old shards, so verify kept failing).
func TestSplitVerifyAdviceWorks(t *testing.T) {
	tmp := t.TempDir()
	ck, other := filepath.Join(tmp, "ck"), filepath.Join(tmp, "other")
	var out, errb bytes.Buffer
	for i, dir := range []string{ck, other} {
		if code := run([]string{"synth", "--shape", "smollm2-135m", "--layers", "1", "--seed", []string{"5", "6"}[i], "--out", dir}, &out, &errb); code != 0 {
			t.Fatalf("synth: exit %d: %s", code, errb.String())
		}
	}
	dir := filepath.Join(tmp, "shards")
	if code := run([]string{"split", ck, "--out", dir, "-q"}, &out, &errb); code != 0 {
		t.Fatalf("split: exit %d: %s", code, errb.String())
	}
	// A fine-tune saved over its base: same shapes, other weights.
	files, _ := filepath.Glob(filepath.Join(other, "*.safetensors"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ck, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	errb.Reset()
	if code := run([]string{"split", "--verify", ck, "--out", dir}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "run layerstream split again") {
		t.Fatalf("split --verify of a stale split: exit %d: %s", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"split", ck, "--out", dir}, &out, &errb); code != 0 {
		t.Fatalf("split again: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "changed since it was split") {
		t.Errorf("split again did not say the checkpoint changed: %s", errb.String())
	}
	errb.Reset()
	if code := run([]string{"split", "--verify", ck, "--out", dir}, &out, &errb); code != 0 {
		t.Fatalf("split --verify after following the advice: exit %d: %s", code, errb.String())
	}
}

// TestSplitQuantizeKeepsQuantizedBlocks: --quantize over a checkpoint whose matrices are already block-quantized
// (a GGUF file's) keeps those blocks as they are, and says so rather than leave a "-q4" folder of Q8_0 blocks
// unexplained.
func TestSplitQuantizeKeepsQuantizedBlocks(t *testing.T) {
	model := filepath.Join("..", "..", "gguf", "testdata", "tiny", "tiny-llama-Q8_0.gguf")
	var out, errb bytes.Buffer
	if code := run([]string{"split", model, "--quantize", "q4", "--out", filepath.Join(t.TempDir(), "q4"), "-q"}, &out, &errb); code != 0 {
		t.Fatalf("split: exit %d: %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "already block-quantized") || !strings.Contains(errb.String(), "Q8_0") {
		t.Errorf("no warning that the Q8_0 matrices were kept: %q", errb.String())
	}
	errb.Reset()
	if code := run([]string{"split", model, "--out", filepath.Join(t.TempDir(), "as-is"), "-q"}, &out, &errb); code != 0 || errb.Len() != 0 {
		t.Errorf("split without --quantize: exit %d, stderr %q", code, errb.String())
	}
}
