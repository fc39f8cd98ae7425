package hffixture

import (
	"os"
	"path/filepath"
	"testing"
)

// ModelPath returns the path of a test model under ModelsDir (the gitignored testdata/models, or
// $LAYERSTREAM_TESTDATA_MODELS), or skips the test saying which script makes it.
func ModelPath(t testing.TB, name, script string) string {
	t.Helper()
	dir, err := ModelsDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("skipping: %s not found; run %s (or set LAYERSTREAM_TESTDATA_MODELS)", p, script)
	}
	return p
}

// SmolLM2GGUF is SmolLM2-135M-Instruct as a Q4_1 GGUF (94 MB), or skips the test.
func SmolLM2GGUF(t testing.TB) string {
	t.Helper()
	return ModelPath(t, "smollm2-135m-instruct-q4_1.gguf", "scripts/fetch-smollm2.sh")
}
