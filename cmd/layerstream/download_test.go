package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/hub/hubtest"
)

func TestDownloadCommand(t *testing.T) {
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"} {
		t.Setenv(k, "")
	}
	const commit = "0123456789abcdef0123456789abcdef01234567"
	h := hubtest.NewServer(t)
	h.AddRepo("org/tiny", commit, map[string][]byte{
		"config.json":       []byte(`{}`),
		"model.safetensors": []byte("weights"),
	})
	h.AddRepo("org/gated", commit, map[string][]byte{"config.json": []byte(`{}`), "model.safetensors": []byte("w")}).Token = "hf_ok"
	cache := t.TempDir()
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_CACHE", cache)
	t.Setenv("HF_ENDPOINT", h.URL)

	// The command prints the snapshot folder on stdout.
	stdout, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = stdout
	t.Cleanup(func() { os.Stdout = saved })
	var errb bytes.Buffer
	if code := run([]string{"download", "org/tiny"}, &bytes.Buffer{}, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	out, _ := os.ReadFile(stdout.Name())
	want := filepath.Join(cache, "models--org--tiny", "snapshots", commit)
	if strings.TrimSpace(string(out)) != want {
		t.Fatalf("printed %q, want %q", out, want)
	}
	if b, err := os.ReadFile(filepath.Join(want, "model.safetensors")); err != nil || string(b) != "weights" {
		t.Fatalf("model.safetensors: %q, %v", b, err)
	}

	errb.Reset()
	if code := run([]string{"download", "org/gated"}, &bytes.Buffer{}, &errb); code != 1 ||
		!strings.Contains(errb.String(), "Gated or private repository") {
		t.Fatalf("gated without token: exit %d, stderr %s", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"download", "--token", "hf_ok", "org/gated"}, &bytes.Buffer{}, &errb); code != 0 {
		t.Fatalf("gated with --token: exit %d, stderr %s", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"download", "--revision", "nope", "org/tiny"}, &bytes.Buffer{}, &errb); code != 1 ||
		!strings.Contains(errb.String(), `revision "nope"`) {
		t.Fatalf("bad revision: exit %d, stderr %s", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"download", t.TempDir()}, &bytes.Buffer{}, &errb); code != 2 ||
		!strings.Contains(errb.String(), "not a Hugging Face repo id") {
		t.Fatalf("local path: exit %d, stderr %s", code, errb.String())
	}
}
