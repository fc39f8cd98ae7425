package gguf

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// TestOpenModelParts: parts of a split model are read, in order, with each tensor pointing into its part; a part
// whose numbering, count or metadata disagrees with the first, a tensor in two parts, or a tensor count other
// than split.tensors.count is refused naming the part and the key or tensor.
func TestOpenModelParts(t *testing.T) {
	part := func(no, count uint16, total int32, extra func(f *testFile), tensors ...string) []byte {
		f := &testFile{}
		if no == 0 {
			f.kv("general.architecture", "llama").kv("general.name", "m")
		}
		f.kv("split.no", no).kv("split.count", count).kv("split.tensors.count", total)
		if extra != nil {
			extra(f)
		}
		for _, n := range tensors {
			f.tensor(n, quant.F32, make([]byte, 16), 4)
		}
		return f.bytes()
	}
	write := func(dir string, files map[string][]byte) {
		for n, b := range files {
			if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	dir := t.TempDir()
	write(dir, map[string][]byte{
		"m-00001-of-00002.gguf": part(0, 2, 3, nil, "a", "b"),
		"m-00002-of-00002.gguf": part(1, 2, 3, nil, "c"),
	})
	g, err := OpenModel(filepath.Join(dir, "m-00001-of-00002.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Parts) != 2 || len(g.Tensors) != 3 {
		t.Fatalf("%d parts, %d tensors; want 2, 3", len(g.Parts), len(g.Tensors))
	}
	if c, _ := g.Tensor("c"); c.Path != filepath.Join(dir, "m-00002-of-00002.gguf") {
		t.Fatalf("tensor c points into %s", c.Path)
	}
	if _, err := Open(filepath.Join(dir, "m-00001-of-00002.gguf")); err != nil {
		t.Fatal(err) // one part alone still parses (its config is refused: metaConfig)
	}
	for name, c := range map[string]struct {
		second []byte
		want   string
	}{
		"wrong number":    {part(0, 2, 3, nil, "c"), "split.no is 0"},
		"wrong count":     {part(1, 3, 3, nil, "c"), "split.count is 3"},
		"other metadata":  {part(1, 2, 3, func(f *testFile) { f.kv("general.name", "other") }, "c"), "metadata general.name differs"},
		"repeated tensor": {part(1, 2, 3, nil, "b"), `tensor "b" is in an earlier part too`},
		"tensor count":    {part(1, 2, 3, nil, "c", "d"), "split.tensors.count is 3, the 2 parts hold 4 tensors"},
		"extra metadata":  {part(1, 2, 3, func(f *testFile) { f.kv("llama.block_count", uint32(2)) }, "c"), "metadata llama.block_count differs"},
		"another split":   {part(1, 2, 4, nil, "c"), "split.tensors.count is 4, the first part's 3: a part of another split model"},
	} {
		dir := t.TempDir()
		write(dir, map[string][]byte{"m-00001-of-00002.gguf": part(0, 2, 3, nil, "a", "b"), "m-00002-of-00002.gguf": c.second})
		_, err := OpenModel(filepath.Join(dir, "m-00001-of-00002.gguf"))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "m-0000") {
			t.Errorf("%s: %v, want an error naming a part and saying %q", name, err, c.want)
		}
	}
	// The name and the metadata must agree on which part this is.
	dir = t.TempDir()
	write(dir, map[string][]byte{"m-00002-of-00002.gguf": part(0, 2, 3, nil, "a")})
	if _, err := OpenModel(filepath.Join(dir, "m-00002-of-00002.gguf")); err == nil || !strings.Contains(err.Error(), "the file name says part 00002 of 00002, its metadata part 1 of 2") {
		t.Errorf("a misnamed part: %v", err)
	}
}
