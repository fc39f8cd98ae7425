package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/hub/hubtest"
	"github.com/layerstream/layerstream/internal/testutil"
)

// captureStdout sends os.Stdout to a file for the rest of the test and returns a function reading it.
func captureStdout(t *testing.T) func() string { return capture(t, &os.Stdout) }

// capture sends *std (os.Stdout or os.Stderr) to a file for the rest of the test and returns a function reading it.
func capture(t *testing.T, std **os.File) func() string {
	f, err := os.CreateTemp(t.TempDir(), "std")
	if err != nil {
		t.Fatal(err)
	}
	saved := *std
	*std = f
	t.Cleanup(func() { *std = saved })
	return func() string {
		b, _ := os.ReadFile(f.Name())
		return string(b)
	}
}

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
	stdout := captureStdout(t)
	var errb bytes.Buffer
	if code := run([]string{"download", "org/tiny"}, &bytes.Buffer{}, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	out := stdout()
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

// The promise: generate --model <repo-id> downloads the model and runs it, then works offline.
func TestGenerateFromRepoID(t *testing.T) {
	files, err := hubtest.ReadDir(testutil.SharedPath(t, "models", "stories260K-hf"))
	if err != nil {
		t.Fatal(err)
	}
	h := hubtest.NewServer(t)
	h.AddRepo("karpathy/stories260K", "0123456789abcdef0123456789abcdef01234567", files)
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"} {
		t.Setenv(k, "")
	}
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_HUB_CACHE", t.TempDir())
	t.Setenv("HF_ENDPOINT", h.URL)
	t.Setenv("LAYERSTREAM_CACHE", t.TempDir())
	stdout := captureStdout(t)
	args := []string{"generate", "--model", "karpathy/stories260K", "--prompt", "Once upon a time", "--max-new-tokens", "8"}
	var errb bytes.Buffer
	if code := run(args, &bytes.Buffer{}, &errb); code != 0 {
		t.Fatalf("generate --model <repo-id>: exit %d: %s", code, errb.String())
	}
	if out := stdout(); !strings.HasPrefix(out, "Once upon a time") || len(out) <= len("Once upon a time\n") {
		t.Fatalf("generate printed %q", out)
	}
	before := len(h.Requests())
	if code := run(append(args, "--offline"), &bytes.Buffer{}, &errb); code != 0 {
		t.Fatalf("generate --offline from the warm cache: exit %d: %s", code, errb.String())
	}
	if n := len(h.Requests()) - before; n != 0 {
		t.Fatalf("--offline made %d requests", n)
	}
}
