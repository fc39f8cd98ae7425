package engine

import (
	"fmt"
	"os"
	"testing"
)

// TestMain points the layerstream cache (where read-only checkpoints such as ../shared/models are split on
// first use) at a temporary folder.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "layerstream-engine-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("LAYERSTREAM_CACHE", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
