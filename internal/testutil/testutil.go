// Package testutil holds helpers shared by the project's tests.
package testutil

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
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

// ChatModel returns a copy of the shared stories260K checkpoint in a temporary folder, with a simple chat
// template (chat_template.jinja) rendering "role: content" lines and "assistant:" as the generation prompt. It
// skips the test when the shared folder is absent.
func ChatModel(t testing.TB) string {
	t.Helper()
	src := SharedPath(t, "models", "stories260K-hf")
	dir := t.TempDir()
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	WriteChatTemplate(t, dir)
	return dir
}

// WriteChatTemplate writes ChatModel's chat template into the checkpoint folder dir.
func WriteChatTemplate(t testing.TB, dir string) {
	t.Helper()
	tpl := "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
	if err := os.WriteFile(filepath.Join(dir, "chat_template.jinja"), []byte(tpl), 0o644); err != nil {
		t.Fatal(err)
	}
}

// SyncBuffer is a bytes.Buffer that goroutines (a logger, the engine's loop, a server) write while the test
// reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
