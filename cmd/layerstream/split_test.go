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
	if code := run([]string{"split", ck, "--out", dir, "--quiet"}, &out, &errb); code != 0 {
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
	if code := run([]string{"synth", "--shape", "gpt5", "--out", ck}, &out, &errb); code != 2 {
		t.Fatalf("unknown shape: exit %d", code)
	}
}
