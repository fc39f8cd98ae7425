package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: a write replaces the file whole, readable by all; a failing one leaves the old file and no
// temporary behind.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.json")
	if err := WriteBytes(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := Write(path, func(w io.Writer) error {
		w.Write([]byte("half"))
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failed write returned %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatalf("after a failed write the file holds %q", b)
	}
	if err := WriteBytes(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if b, _ := os.ReadFile(path); string(b) != "new" || err != nil || st.Mode().Perm() != 0o644 {
		t.Fatalf("file holds %q, mode %v (%v)", b, st.Mode(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("folder holds %d entries, want the file alone", len(ents))
	}
}
