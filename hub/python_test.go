package hub

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/hub/hubtest"
)

// pythonHub returns a Python interpreter that has huggingface_hub ($LAYERSTREAM_PYTHON, else python3), or skips.
func pythonHub(t *testing.T) string {
	t.Helper()
	py := os.Getenv("LAYERSTREAM_PYTHON")
	if py == "" {
		py = "python3"
	}
	if err := exec.Command(py, "-c", "import huggingface_hub").Run(); err != nil {
		t.Skipf("skipping: %s cannot import huggingface_hub (set LAYERSTREAM_PYTHON to one that can; scripts/test.sh installs it from PyPI into .cache/test-python, so PyPI was unreachable): %v", py, err)
	}
	return py
}

func runPython(t *testing.T, py string, env []string, script string) string {
	t.Helper()
	cmd := exec.Command(py, "-c", script)
	for _, kv := range os.Environ() {
		if !strings.HasSuffix(kv, "=") { // isolateEnv's empty variables mean unset; Python reads "" as a value
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}

// The cache is shared both ways with the Python huggingface_hub library, which also downloads from the
// imitation Hub (a check of hubtest's fidelity).
func TestPythonInterop(t *testing.T) {
	py := pythonHub(t)
	isolateEnv(t)
	h := hubtest.NewServer(t)
	files := modelFiles()
	h.AddRepo("org/tiny", commit1, files)
	allow := `allow_patterns=["*.json", "*.jinja", "*.safetensors"]`

	// Python fills the cache; Resolve uses it offline, and online downloads nothing more.
	pyCache := t.TempDir()
	env := []string{"HF_ENDPOINT=" + h.URL, "HF_HUB_CACHE=" + pyCache, "HF_HUB_DISABLE_TELEMETRY=1",
		"HF_HUB_DISABLE_PROGRESS_BARS=1", "HF_HUB_DISABLE_XET=1"}
	// hf_hub_download uses the endpoints hubtest imitates (snapshot_download also lists the tree API).
	pyDir := runPython(t, py, env, `
import os
from huggingface_hub import hf_hub_download
for f in ['config.json', 'generation_config.json', 'tokenizer.json', 'tokenizer_config.json', 'chat_template.jinja',
          'model.safetensors']:
    p = hf_hub_download('org/tiny', f)
print(os.path.dirname(p))`)
	opts := Options{Endpoint: h.URL, CacheDir: pyCache, Client: h.Client()}
	offline := opts
	offline.Offline = true
	dir, err := Resolve(context.Background(), "org/tiny", offline)
	if err != nil || dir != pyDir {
		t.Fatalf("offline Resolve of Python's cache = %s, %v; Python's snapshot is %s", dir, err, pyDir)
	}
	gets := h.Count("GET", "/resolve/")
	if _, err := Resolve(context.Background(), "org/tiny", opts); err != nil {
		t.Fatal(err)
	}
	if n := h.Count("GET", "/resolve/") - gets; n != 0 {
		t.Errorf("Resolve downloaded %d files Python had already cached", n)
	}

	// Resolve fills the cache; Python uses it offline and its cache scan finds nothing wrong.
	goCache := t.TempDir()
	opts.CacheDir = goCache
	dir, err = Resolve(context.Background(), "org/tiny", opts)
	if err != nil {
		t.Fatal(err)
	}
	env = []string{"HF_ENDPOINT=" + h.URL, "HF_HUB_CACHE=" + goCache, "HF_HUB_OFFLINE=1", "HF_HUB_DISABLE_TELEMETRY=1"}
	got := runPython(t, py, env, `
from huggingface_hub import snapshot_download, hf_hub_download, scan_cache_dir
import hashlib, os
d = snapshot_download('org/tiny', `+allow+`)
p = hf_hub_download('org/tiny', 'model.safetensors')
info = scan_cache_dir(os.environ['HF_HUB_CACHE'])
assert not info.warnings, info.warnings
(repo,) = info.repos
print(d, hashlib.sha256(open(p, 'rb').read()).hexdigest(), repo.nb_files)`)
	want := strings.Join([]string{dir, hubtest.SHA256(files["model.safetensors"]), "6"}, " ")
	if got != want {
		t.Fatalf("Python on layerstream's cache: %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil {
		t.Fatal(err)
	}
}
