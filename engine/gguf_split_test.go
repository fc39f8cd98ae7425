package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/gguf"
)

// splitDir is where llama_cpp_refs.py --only split wrote the tiny Q4_0 file split over several files.
var splitDir = filepath.Join("..", "gguf", "testdata", "tiny", "split")

// copyParts copies the named parts of a split model into a new folder and returns it.
func copyParts(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(splitDir, n))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestGGUFSplitModel: the tiny Q4_0 file split over three files (four tensors a part), and over four with a
// first part holding the metadata alone, as llama.cpp's gguf-split writes them (scripts/fixtures/
// llama_cpp_refs.py --only split: llama.cpp gives the single file's tokens and logits on both), opened by the
// first part, give the single file's logits bit for bit, in the engine's arithmetic and in llama.cpp's (which
// equals llama.cpp's own logits: TestLlamaCppArithmeticTiny). Opening another part names the first; a missing
// part, or a part that changes after the split, is noticed.
func TestGGUFSplitModel(t *testing.T) {
	ctx := context.Background()
	single := filepath.Join("..", "gguf", "testdata", "tiny", "tiny-llama-Q4_0.gguf")
	ids := []int{1, 403, 407, 261, 378, 1}
	for _, arith := range []Arithmetic{ArithmeticEngine, ArithmeticLlamaCpp} {
		want, err := open(t, single, Options{Arithmetic: arith, ShardDir: filepath.Join(t.TempDir(), "s")}).Logits(ctx, ids)
		if err != nil {
			t.Fatal(err)
		}
		for _, first := range []string{"tiny-llama-Q4_0-00001-of-00003.gguf", "tiny-llama-Q4_0-meta-00001-of-00004.gguf"} {
			e := open(t, filepath.Join(splitDir, first), Options{Arithmetic: arith, ShardDir: filepath.Join(t.TempDir(), "s")})
			got, err := e.Logits(ctx, ids)
			if err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(got, want); d != 0 {
				t.Errorf("%s (%s arithmetic): logits differ from the single file's by %g", first, arith, d)
			}
		}
	}

	g, err := gguf.OpenModel(filepath.Join(splitDir, "tiny-llama-Q4_0-00001-of-00003.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Parts) != 3 || len(g.Tensors) != 12 {
		t.Fatalf("OpenModel: %d parts, %d tensors; want 3 and 12", len(g.Parts), len(g.Tensors))
	}

	for name, c := range map[string]struct {
		parts []string
		open  string
		want  string
	}{
		"another part": {[]string{"tiny-llama-Q4_0-00001-of-00003.gguf", "tiny-llama-Q4_0-00002-of-00003.gguf", "tiny-llama-Q4_0-00003-of-00003.gguf"},
			"tiny-llama-Q4_0-00002-of-00003.gguf", "part 2 of 3 of a split model: open the first part, tiny-llama-Q4_0-00001-of-00003.gguf"},
		"a missing part": {[]string{"tiny-llama-Q4_0-00001-of-00003.gguf", "tiny-llama-Q4_0-00002-of-00003.gguf"},
			"tiny-llama-Q4_0-00001-of-00003.gguf", "part 3 of 3 of"},
	} {
		dir := copyParts(t, c.parts...)
		_, err := OpenCheckpoint(filepath.Join(dir, c.open))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
	// A renamed first part no longer says where the others are.
	dir := copyParts(t, "tiny-llama-Q4_0-00001-of-00003.gguf")
	renamed := filepath.Join(dir, "model.gguf")
	os.Rename(filepath.Join(dir, "tiny-llama-Q4_0-00001-of-00003.gguf"), renamed)
	if _, err := OpenCheckpoint(renamed); err == nil || !strings.Contains(err.Error(), "its name is not PREFIX-00001-of-00003.gguf") {
		t.Errorf("a renamed first part: %v, want the naming explained", err)
	}

	// A part changed after the split: the split notices and follows it.
	parts := []string{"tiny-llama-Q4_0-00001-of-00003.gguf", "tiny-llama-Q4_0-00002-of-00003.gguf", "tiny-llama-Q4_0-00003-of-00003.gguf"}
	dir = copyParts(t, parts...)
	shardDir := filepath.Join(t.TempDir(), "s")
	before, err := open(t, filepath.Join(dir, parts[0]), Options{ShardDir: shardDir}).Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	last := filepath.Join(dir, parts[2])
	b, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	lg, err := gguf.Open(last)
	if err != nil {
		t.Fatal(err)
	}
	down, ok := lg.Tensor("blk.0.ffn_down.weight")
	if !ok || down.Type.String() != "Q4_0" {
		t.Fatalf("the last part holds no Q4_0 blk.0.ffn_down.weight (%v)", down)
	}
	b[down.Offset+down.Size-1] ^= 0x44 // two weights of the down projection's last row
	if err := os.WriteFile(last, b, 0o644); err != nil {
		t.Fatal(err)
	}
	after, err := open(t, filepath.Join(dir, parts[0]), Options{ShardDir: shardDir}).Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if maxDiff(before, after) == 0 {
		t.Error("a changed byte in the last part: the same logits (the old split ran)")
	}
}
