package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/imatrix"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/shards"
)

// TestImatrixSplit: layerstream imatrix collects a matrix for every weight matrix of stories260K over a text,
// split --quantize q8 --imatrix quantizes with it (the folder keeps a copy, and --verify passes), and the flags'
// misuses are refused.
func TestImatrixSplit(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	dir := t.TempDir()
	text := filepath.Join(dir, "calibration.txt")
	story := "Once upon a time, there was a little girl named Lily. She liked to play in the park with her dog. "
	if err := os.WriteFile(text, []byte(strings.Repeat(story, 12)), 0o644); err != nil {
		t.Fatal(err)
	}
	mat := filepath.Join(dir, "m.imatrix")
	var out, errb bytes.Buffer
	if code := run([]string{"imatrix", "--model", model, "--text", text, "--chunk", "64", "--out", mat}, &out, &errb); code != 0 {
		t.Fatalf("imatrix: exit %d: %s", code, errb.String())
	}
	m, err := imatrix.Read(mat)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Columns) != 5*7+1 || len(m.Columns["model.layers.4.mlp.down_proj.weight"]) != 172 {
		t.Errorf("%d matrices (down_proj %d columns), want 36 (172)", len(m.Columns), len(m.Columns["model.layers.4.mlp.down_proj.weight"]))
	}
	if !strings.Contains(errb.String(), "imatrix written") || !strings.Contains(errb.String(), "matrices=36") {
		t.Errorf("imatrix's summary: %q", errb.String())
	}
	// Quiet: no bar, no summary, the same file.
	errb.Reset()
	quiet := filepath.Join(dir, "quiet.imatrix")
	if code := run([]string{"imatrix", "-q", "--model", model, "--text", text, "--chunk", "64", "--out", quiet}, &out, &errb); code != 0 {
		t.Fatalf("imatrix -q: exit %d: %s", code, errb.String())
	}
	if q, err := imatrix.Read(quiet); err != nil || q.Hash() != m.Hash() {
		t.Errorf("imatrix -q: %v, or another matrix than without -q", err)
	}
	shardDir := filepath.Join(dir, "q8")
	if code := run([]string{"split", model, "--quantize", "q8", "--imatrix", mat, "--out", shardDir, "-q"}, &out, &errb); code != 0 {
		t.Fatalf("split --imatrix: exit %d: %s", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(shardDir, shards.ImatrixFile)); err != nil {
		t.Errorf("the split kept no copy of the matrix: %v", err)
	}
	if code := run([]string{"split", "--verify", model, "--out", shardDir}, &out, &errb); code != 0 {
		t.Fatalf("split --verify: exit %d: %s", code, errb.String())
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"split", model, "--imatrix", mat, "--out", filepath.Join(dir, "x")}, 2, "needs --quantize q8 or q4"},
		{[]string{"split", model, "--quantize", "q8", "--imatrix", text, "--out", filepath.Join(dir, "y")}, 1, "--imatrix"},
		{[]string{"imatrix", "--model", model, "--out", mat}, 2, "--text"},
		{[]string{"imatrix", "--model", model, "--text", text, "--out", mat, "--chunk", "1"}, 2, "--chunk 1"},
		{[]string{"imatrix", "--model", model, "--text", filepath.Join(dir, "none.txt"), "--out", mat}, 1, "--text"},
	} {
		errb.Reset()
		if code := run(c.args, &out, &errb); code != c.code || !strings.Contains(errb.String(), c.want) {
			t.Errorf("%q: exit %d (want %d), stderr %q lacks %q", c.args, code, c.code, errb.String(), c.want)
		}
	}
}
