// Package testutil holds helpers shared by the project's tests.
package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// RepoRoot is the folder holding go.mod.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// SharedDir returns the shared test-data folder: $LAYERSTREAM_SHARED, or ../shared beside the repository.
// It skips the test with a message when the folder is absent (a user's fresh clone).
func SharedDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("LAYERSTREAM_SHARED")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "..", "shared")
	}
	if _, err := os.Stat(filepath.Join(dir, "models")); err != nil {
		t.Skipf("skipping: shared test data not found at %s (set LAYERSTREAM_SHARED; present in CI)", dir)
	}
	return dir
}

// SharedPath returns a path under the shared folder, skipping the test when it is absent.
func SharedPath(t testing.TB, elem ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{SharedDir(t)}, elem...)...)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("skipping: %s not found", p)
	}
	return p
}

// RunWithCache runs a package's tests (from TestMain) with the layerstream cache, where checkpoints are split
// on first use, pointed at a temporary folder removed afterwards: tests never write into the user's cache.
func RunWithCache(m *testing.M) int {
	dir, err := os.MkdirTemp("", "layerstream-test-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	os.Setenv("LAYERSTREAM_CACHE", dir)
	return m.Run()
}
