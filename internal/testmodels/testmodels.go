// Package testmodels finds the large model files that some tests use, which live outside the repository
// (fetched by scripts into testdata/models, or found at $LAYERSTREAM_TESTDATA_MODELS), and skips a test with a
// message saying how to get them when they are absent.
package testmodels

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// SmolLM2Q4_1 is the file name of SmolLM2-135M-Instruct as a Q4_1 GGUF (scripts/fetch-smollm2.sh).
const SmolLM2Q4_1 = "smollm2-135m-instruct-q4_1.gguf"

// Dir is the folder holding the test models: $LAYERSTREAM_TESTDATA_MODELS, else testdata/models at the
// repository root.
func Dir() string {
	if d := os.Getenv("LAYERSTREAM_TESTDATA_MODELS"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "models")
}

// Path returns the path of the named test model, or skips t saying which script fetches it.
func Path(t testing.TB, name, script string) string {
	t.Helper()
	p := filepath.Join(Dir(), name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is absent (%v); run %s to fetch it (or set LAYERSTREAM_TESTDATA_MODELS)", name, err, script)
	}
	return p
}

// SmolLM2 returns the path of the SmolLM2-135M-Instruct Q4_1 GGUF, or skips t.
func SmolLM2(t testing.TB) string { return Path(t, SmolLM2Q4_1, "scripts/fetch-smollm2.sh") }
