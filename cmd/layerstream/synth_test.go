package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSynthRefusesAForeignOut: synth --out into a folder that is neither empty nor an earlier synth output (a
// real checkpoint) is refused before anything is written, naming the flag, the folder and what it holds.
func TestSynthRefusesAForeignOut(t *testing.T) {
	dir := t.TempDir()
	config := []byte(`{"model_type": "llama", "transformers_version": "5.0.0"}`)
	for name, b := range map[string][]byte{"config.json": config, "README.md": []byte("# my model\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, quantize := range []string{"none", "q8"} {
		var out, errb bytes.Buffer
		code := run([]string{"synth", "--shape", "smollm2-135m", "--layers", "1", "--quantize", quantize, "--out", dir}, &out, &errb)
		if code != 1 {
			t.Fatalf("--quantize %s: exit %d, want 1: %s", quantize, code, errb.String())
		}
		for _, want := range []string{"--out", dir, "README.md", "not empty"} {
			if !strings.Contains(errb.String(), want) {
				t.Errorf("--quantize %s: error %q does not say %q", quantize, errb.String(), want)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(dir, "config.json")); !bytes.Equal(b, config) {
			t.Errorf("--quantize %s: config.json was overwritten", quantize)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 2 {
			t.Errorf("--quantize %s: the folder holds %d files, want the 2 it had", quantize, len(ents))
		}
	}
}

// TestClaimSynthOut: synth's output may go into a new or empty folder, or over an earlier output of the same
// kind (a rerun, or an interrupted run resuming), never over one of the other kind.
func TestClaimSynthOut(t *testing.T) {
	tmp := t.TempDir()
	fresh, empty := filepath.Join(tmp, "new", "ck"), filepath.Join(tmp, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{fresh, empty} {
		if err := claimSynthOut(dir, synthCheckpoint); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := claimSynthOut(dir, synthCheckpoint); err != nil {
			t.Errorf("%s again: %v", dir, err)
		}
		err := claimSynthOut(dir, synthShards)
		if err == nil || !strings.Contains(err.Error(), "without --quantize") {
			t.Errorf("%s: --quantize over a checkpoint synth wrote: got %v, want an error", dir, err)
		}
	}
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := claimSynthOut(file, synthCheckpoint); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Errorf("a file: got %v, want an error", err)
	}
}
