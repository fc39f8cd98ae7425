package hub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/hub/hubtest"
	"github.com/layerstream/layerstream/internal/filelock"
	"github.com/layerstream/layerstream/internal/testutil"
)

const (
	commit1 = "1111111111111111111111111111111111111111"
	commit2 = "2222222222222222222222222222222222222222"
)

// isolateEnv points every Hugging Face variable at nothing (and HF_ENDPOINT at a closed port), so a test can
// never read the user's token or cache or reach the internet by falling back to a default.
func isolateEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
		"TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		t.Setenv(k, "")
	}
	t.Setenv("HF_HOME", t.TempDir())
	t.Setenv("HF_ENDPOINT", "http://127.0.0.1:1")
	retryDelay = time.Millisecond
	t.Cleanup(func() { retryDelay = time.Second })
}

func testOptions(t *testing.T, h *hubtest.Server) Options {
	return Options{Endpoint: h.URL, CacheDir: t.TempDir(), Client: h.Client()}
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// modelFiles is a small single-file model plus files that must not be downloaded.
// tinyRepo isolates the environment and starts an imitation Hub serving modelFiles as org/tiny at commit1.
func tinyRepo(t *testing.T) (*hubtest.Server, map[string][]byte) {
	t.Helper()
	isolateEnv(t)
	h := hubtest.NewServer(t)
	files := modelFiles()
	h.AddRepo("org/tiny", commit1, files)
	return h, files
}

func modelFiles() map[string][]byte {
	return map[string][]byte{
		"config.json":            []byte(`{"model_type":"llama"}`),
		"generation_config.json": []byte(`{"eos_token_id":2}`),
		"tokenizer.json":         []byte(`{"model":{"type":"BPE"}}`),
		"tokenizer_config.json":  []byte(`{}`),
		"chat_template.jinja":    []byte(`{% for m in messages %}{{ m.content }}{% endfor %}`),
		"model.safetensors":      randomBytes(1, 300_000),
		"pytorch_model.bin":      []byte("pickle"),
		"onnx/model.onnx":        []byte("onnx"),
		"README.md":              []byte("# tiny"),
	}
}

var wanted = []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
	"chat_template.jinja", "model.safetensors"}

func checkSnapshot(t *testing.T, opts Options, id, commit, dir string, files map[string][]byte, names []string) {
	t.Helper()
	repoDir := filepath.Join(opts.CacheDir, "models--"+strings.ReplaceAll(id, "/", "--"))
	if want := filepath.Join(repoDir, "snapshots", commit); dir != want {
		t.Fatalf("dir = %s, want %s", dir, want)
	}
	for _, name := range names {
		p := filepath.Join(dir, name)
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("snapshot file: %v", err)
		}
		if !bytes.Equal(got, files[name]) {
			t.Fatalf("%s: content differs from the Hub's", name)
		}
		etag := hubtest.GitBlobSHA1(files[name])
		if strings.HasSuffix(name, ".safetensors") {
			etag = hubtest.SHA256(files[name])
		}
		link, err := os.Readlink(p)
		if err != nil {
			t.Fatalf("%s is not a symlink: %v", name, err)
		}
		want := strings.Repeat("../", 2+strings.Count(name, "/")) + "blobs/" + etag
		if link != want {
			t.Fatalf("%s links to %s, want %s", name, link, want)
		}
		if fi, err := os.Lstat(filepath.Join(repoDir, "blobs", etag)); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("blob for %s: %v", name, err)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(repoDir, "blobs", "*.*"))
	if len(leftovers) > 0 {
		t.Fatalf("blobs/ holds leftovers %v", leftovers)
	}
}

func TestResolveDownloadsIntoCacheLayout(t *testing.T) {
	h, files := tinyRepo(t)
	opts := testOptions(t, h)
	var progress bytes.Buffer
	opts.Progress = &progress

	dir, err := Resolve(context.Background(), "org/tiny", opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, opts, "org/tiny", commit1, dir, files, wanted)
	ref, err := os.ReadFile(filepath.Join(opts.CacheDir, "models--org--tiny", "refs", "main"))
	if err != nil || string(ref) != commit1 {
		t.Fatalf("refs/main = %q, %v; want %s", ref, err, commit1)
	}
	for _, skipped := range []string{"pytorch_model.bin", "model.onnx", "README.md"} {
		if n := h.Count("GET", skipped) + h.Count("HEAD", skipped); n > 0 {
			t.Errorf("%s was requested %d times; only the files layerstream reads should be", skipped, n)
		}
	}
	if h.Count("GET", "/cdn/") != 1 {
		t.Errorf("CDN GETs = %d, want 1 (the redirect of model.safetensors)", h.Count("GET", "/cdn/"))
	}
	if out := progress.String(); !strings.Contains(out, "model.safetensors") || !strings.Contains(out, "100%") {
		t.Errorf("progress output lacks the file's bar: %q", out)
	}

	// A second Resolve finds every file in the snapshot: it asks the API for the commit and downloads nothing.
	before := len(h.Requests())
	dir2, err := Resolve(context.Background(), "org/tiny", Options{Endpoint: opts.Endpoint, CacheDir: opts.CacheDir, Client: opts.Client})
	if err != nil || dir2 != dir {
		t.Fatalf("second Resolve = %s, %v", dir2, err)
	}
	for _, r := range h.Requests()[before:] {
		if !strings.HasPrefix(r.Path, "/api/") {
			t.Errorf("second Resolve requested %s %s; the snapshot was complete", r.Method, r.Path)
		}
	}
}

func TestResolveRevisionSharesBlobs(t *testing.T) {
	isolateEnv(t)
	h := hubtest.NewServer(t)
	files := modelFiles()
	repo := h.AddRepo("org/tiny", commit1, files)
	v2 := modelFiles()
	v2["config.json"] = []byte(`{"model_type":"llama","v":2}`)
	repo.Files[commit2] = v2
	repo.Revs["v2"] = commit2
	opts := testOptions(t, h)
	if _, err := Resolve(context.Background(), "org/tiny", opts); err != nil {
		t.Fatal(err)
	}
	opts.Revision = "v2"
	dir, err := Resolve(context.Background(), "org/tiny", opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, opts, "org/tiny", commit2, dir, v2, wanted)
	if n := h.Count("GET", "/cdn/"); n != 1 {
		t.Errorf("the unchanged model.safetensors was fetched %d times, want once (its blob is shared)", n)
	}
	ref, _ := os.ReadFile(filepath.Join(opts.CacheDir, "models--org--tiny", "refs", "v2"))
	if string(ref) != commit2 {
		t.Errorf("refs/v2 = %q, want %s", ref, commit2)
	}
	// A revision with slashes travels as one escaped path segment and is recorded under refs/ as a path.
	repo.Revs["refs/pr/1"] = commit2
	opts.Revision = "refs/pr/1"
	if dir, err := Resolve(context.Background(), "org/tiny", opts); err != nil || filepath.Base(dir) != commit2 {
		t.Fatalf("Resolve at refs/pr/1 = %s, %v", dir, err)
	}
	if h.Count("GET", "/api/models/org/tiny/revision/refs%2Fpr%2F1") != 1 {
		t.Error("the revision refs/pr/1 was not sent as one escaped path segment")
	}
	ref, _ = os.ReadFile(filepath.Join(opts.CacheDir, "models--org--tiny", "refs", "refs", "pr", "1"))
	if string(ref) != commit2 {
		t.Errorf("refs/refs/pr/1 = %q, want %s", ref, commit2)
	}
	// A commit sha as revision resolves to its snapshot and writes no ref.
	opts.Revision = commit1
	if dir, err := Resolve(context.Background(), "org/tiny", opts); err != nil || filepath.Base(dir) != commit1 {
		t.Fatalf("Resolve at commit = %s, %v", dir, err)
	}
	if _, err := os.Stat(filepath.Join(opts.CacheDir, "models--org--tiny", "refs", commit1)); err == nil {
		t.Error("a ref was written for a commit sha")
	}
}

func TestResolveShardedCheckpoint(t *testing.T) {
	isolateEnv(t)
	h := hubtest.NewServer(t)
	files := map[string][]byte{
		"config.json":                      []byte(`{}`),
		"model-00001-of-00002.safetensors": randomBytes(2, 5000),
		"model-00002-of-00002.safetensors": randomBytes(3, 7000),
		"model.safetensors.index.json": []byte(`{"metadata":{"total_size":12000},"weight_map":{
			"model.embed_tokens.weight":"model-00001-of-00002.safetensors",
			"model.layers.0.mlp.up_proj.weight":"model-00001-of-00002.safetensors",
			"lm_head.weight":"model-00002-of-00002.safetensors"}}`),
		"pytorch_model-00001-of-00002.bin": []byte("pickle"),
	}
	h.AddRepo("org/sharded", commit1, files)
	opts := testOptions(t, h)
	dir, err := Resolve(context.Background(), "org/sharded", opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, opts, "org/sharded", commit1, dir, files, []string{"config.json", "model.safetensors.index.json",
		"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
	if h.Count("HEAD", ".bin") > 0 {
		t.Error("a .bin file was requested")
	}
}

func TestResumeWithinOneResolve(t *testing.T) {
	h, files := tinyRepo(t)
	sha := hubtest.SHA256(files["model.safetensors"])
	h.CutOnce(sha, 123_457)
	opts := testOptions(t, h)
	dir, err := Resolve(context.Background(), "org/tiny", opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, opts, "org/tiny", commit1, dir, files, wanted)
	var ranges []string
	for _, r := range h.Requests() {
		if r.Method == "GET" && strings.Contains(r.Path, "/resolve/") && strings.HasSuffix(r.Path, "model.safetensors") {
			ranges = append(ranges, r.Range)
		}
	}
	if len(ranges) != 2 || ranges[0] != "" || ranges[1] != "bytes=123457-" {
		t.Fatalf("Range headers of the model.safetensors GETs = %q, want [\"\" \"bytes=123457-\"]", ranges)
	}
}

// A body that stops arriving (stall timer) and a 503 are retried, resuming where the bytes stopped.
func TestStallAndServerErrorAreRetried(t *testing.T) {
	isolateEnv(t)
	stallTimeout = 100 * time.Millisecond
	t.Cleanup(func() { stallTimeout = 60 * time.Second })
	h := hubtest.NewServer(t)
	files := modelFiles()
	h.AddRepo("org/tiny", commit1, files)
	sha := hubtest.SHA256(files["model.safetensors"])
	h.StallOnce(sha, 50_000)
	h.FailOnce(sha, http.StatusServiceUnavailable)
	opts := testOptions(t, h)
	dir, err := Resolve(context.Background(), "org/tiny", opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, opts, "org/tiny", commit1, dir, files, wanted)
	var ranges []string
	for _, r := range h.Requests() {
		if r.Method == "GET" && strings.HasPrefix(r.Path, "/cdn/") {
			ranges = append(ranges, r.Range)
		}
	}
	if want := []string{"", "bytes=50000-", "bytes=50000-"}; fmt.Sprint(ranges) != fmt.Sprint(want) {
		t.Fatalf("CDN GET ranges = %q, want %q", ranges, want)
	}
}

func TestResumeAcrossRuns(t *testing.T) {
	h, files := tinyRepo(t)
	sha := hubtest.SHA256(files["model.safetensors"])
	h.CutOnce(sha, 100_000)
	maxAttempts = 1
	t.Cleanup(func() { maxAttempts = 5 })
	opts := testOptions(t, h)

	_, err := Resolve(context.Background(), "org/tiny", opts)
	if !errors.Is(err, ErrNoNetwork) {
		t.Fatalf("interrupted download: err = %v, want ErrNoNetwork", err)
	}
	blobs := filepath.Join(opts.CacheDir, "models--org--tiny", "blobs")
	if _, err := os.Stat(filepath.Join(blobs, sha)); err == nil {
		t.Fatal("a blob was placed for an interrupted download")
	}
	fi, err := os.Stat(filepath.Join(blobs, sha+".incomplete"))
	if err != nil {
		t.Fatalf("no partial download kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(blobs, sha+".lock")); err == nil {
		t.Error("the lock file outlived the download")
	}
	partial := fi.Size()
	if partial == 0 || partial >= int64(len(files["model.safetensors"])) {
		t.Fatalf("partial file has %d bytes", partial)
	}

	before := len(h.Requests())
	dir, err := Resolve(context.Background(), "org/tiny", opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, opts, "org/tiny", commit1, dir, files, wanted)
	var got []string
	for _, r := range h.Requests()[before:] {
		if r.Method == "GET" && (strings.Contains(r.Path, "/cdn/") || strings.HasSuffix(r.Path, ".safetensors")) {
			got = append(got, r.Range)
		}
	}
	want := fmt.Sprintf("bytes=%d-", partial)
	if len(got) == 0 || got[0] != want {
		t.Fatalf("resumed GET Range headers = %q, want %q", got, want)
	}
}

func TestGatedRepo(t *testing.T) {
	isolateEnv(t)
	h := hubtest.NewServer(t)
	files := modelFiles()
	h.AddRepo("org/gated", commit1, files).Token = "hf_good"
	opts := testOptions(t, h)

	_, err := Resolve(context.Background(), "org/gated", opts)
	if !errors.Is(err, ErrGated) {
		t.Fatalf("without token: err = %v, want ErrGated", err)
	}
	for _, s := range []string{h.URL + "/org/gated", "HF_TOKEN", "Gated or private repository", "licence"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}

	opts.Token = "hf_wrong"
	if _, err := Resolve(context.Background(), "org/gated", opts); !errors.Is(err, ErrGated) ||
		!strings.Contains(err.Error(), "token") {
		t.Fatalf("wrong token: err = %v, want ErrGated about the token", err)
	}

	opts.Token = "hf_good"
	before := len(h.Requests())
	dir, err := Resolve(context.Background(), "org/gated", opts)
	if err != nil {
		t.Fatal(err)
	}
	checkSnapshot(t, opts, "org/gated", commit1, dir, files, wanted)
	for _, r := range h.Requests()[before:] {
		want := "Bearer hf_good"
		if strings.HasPrefix(r.Path, "/cdn/") {
			want = "" // the token must not leave the Hub for the CDN's origin
		}
		if r.Authorization != want {
			t.Errorf("%s %s sent Authorization %q, want %q", r.Method, r.Path, r.Authorization, want)
		}
	}
}

func TestTokenFromEnvironment(t *testing.T) {
	isolateEnv(t)
	h := hubtest.NewServer(t)
	h.AddRepo("org/gated", commit1, modelFiles()).Token = "hf_file"
	if err := os.WriteFile(filepath.Join(os.Getenv("HF_HOME"), "token"), []byte("hf_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(context.Background(), "org/gated", testOptions(t, h)); err != nil {
		t.Fatalf("token from $HF_HOME/token: %v", err)
	}
	h.Repos["org/gated"].Token = "hf_env"
	t.Setenv("HF_TOKEN", "hf_env")
	if _, err := Resolve(context.Background(), "org/gated", testOptions(t, h)); err != nil {
		t.Fatalf("token from HF_TOKEN: %v", err)
	}
}

func TestOffline(t *testing.T) {
	h, _ := tinyRepo(t)
	opts := testOptions(t, h)
	dir, err := Resolve(context.Background(), "org/tiny", opts)
	if err != nil {
		t.Fatal(err)
	}
	before := len(h.Requests())

	offline := opts
	offline.Offline = true
	if got, err := Resolve(context.Background(), "org/tiny", offline); err != nil || got != dir {
		t.Fatalf("offline, warm cache: %s, %v; want %s", got, err, dir)
	}
	t.Setenv("HF_HUB_OFFLINE", "1")
	if got, err := Resolve(context.Background(), "org/tiny", opts); err != nil || got != dir {
		t.Fatalf("HF_HUB_OFFLINE=1, warm cache: %s, %v; want %s", got, err, dir)
	}

	_, err = Resolve(context.Background(), "org/other", opts)
	if !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "org/other") ||
		!strings.Contains(err.Error(), "layerstream download org/other") || !strings.Contains(err.Error(), "no local file or folder") {
		t.Fatalf("offline, cold cache: err = %v, want ErrOffline naming the repo, that no local path has that name, and the fix", err)
	}
	// A GGUF file of a repo never downloaded: the same.
	if _, err := Resolve(context.Background(), "org/other/m.gguf", opts); !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "no local file or folder") {
		t.Fatalf("offline, cold cache, a GGUF file: err = %v", err)
	}
	opts.Revision = "v9"
	if _, err := Resolve(context.Background(), "org/tiny", opts); !errors.Is(err, ErrOffline) {
		t.Fatalf("offline, uncached revision: err = %v, want ErrOffline", err)
	}
	opts.Revision = ""
	// A snapshot missing its weights is not good enough offline.
	os.Remove(filepath.Join(dir, "model.safetensors"))
	if _, err := Resolve(context.Background(), "org/tiny", opts); !errors.Is(err, ErrOffline) ||
		!strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("offline, partial snapshot: err = %v, want ErrOffline naming model.safetensors", err)
	}
	if n := len(h.Requests()) - before; n != 0 {
		t.Fatalf("offline mode made %d requests", n)
	}
}

func TestNoNetwork(t *testing.T) {
	h, _ := tinyRepo(t)
	opts := testOptions(t, h)
	if _, err := Resolve(context.Background(), "org/tiny", opts); err != nil {
		t.Fatal(err)
	}
	dead := httptest.NewServer(nil)
	dead.Close()
	opts.Endpoint = dead.URL
	opts.Client = nil

	_, err := Resolve(context.Background(), "org/tiny", opts)
	if !errors.Is(err, ErrNoNetwork) || !strings.Contains(err.Error(), "HF_HUB_OFFLINE=1") ||
		!strings.Contains(err.Error(), "No network") {
		t.Fatalf("warm cache, no network: err = %v, want ErrNoNetwork with the HF_HUB_OFFLINE hint", err)
	}
	opts.CacheDir = t.TempDir()
	_, err = Resolve(context.Background(), "org/tiny", opts)
	if !errors.Is(err, ErrNoNetwork) || strings.Contains(err.Error(), "HF_HUB_OFFLINE") {
		t.Fatalf("cold cache, no network: err = %v, want ErrNoNetwork without the offline hint", err)
	}
}

func TestCorruptDownloadIsRejected(t *testing.T) {
	h, files := tinyRepo(t)
	sha := hubtest.SHA256(files["model.safetensors"])
	h.Corrupt(sha)
	opts := testOptions(t, h)
	_, err := Resolve(context.Background(), "org/tiny", opts)
	if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("err = %v, want ErrChecksum naming model.safetensors", err)
	}
	repoDir := filepath.Join(opts.CacheDir, "models--org--tiny")
	for _, p := range []string{"blobs/" + sha, "blobs/" + sha + ".incomplete", "snapshots/" + commit1 + "/model.safetensors", "refs/main"} {
		if _, err := os.Lstat(filepath.Join(repoDir, p)); err == nil {
			t.Errorf("%s exists after a corrupted download", p)
		}
	}
}

func TestConcurrentResolve(t *testing.T) {
	h, files := tinyRepo(t)
	h.SetCDNDelay(50 * time.Millisecond)
	opts := testOptions(t, h)
	var wg sync.WaitGroup
	dirs := make([]string, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { dirs[i], errs[i] = Resolve(context.Background(), "org/tiny", opts) })
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		checkSnapshot(t, opts, "org/tiny", commit1, dirs[i], files, wanted)
	}
	if n := h.Count("GET", "/cdn/"); n != 1 {
		t.Errorf("model.safetensors was downloaded %d times, want once", n)
	}
	if n := h.Count("GET", "/config.json"); n != 1 {
		t.Errorf("config.json was downloaded %d times, want once", n)
	}

	// With the blobs cached and the snapshot gone, several Resolves link the same files at once.
	if err := os.RemoveAll(dirs[0]); err != nil {
		t.Fatal(err)
	}
	dirs, errs = make([]string, 8), make([]error, 8)
	for i := range dirs {
		wg.Go(func() { dirs[i], errs[i] = Resolve(context.Background(), "org/tiny", opts) })
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		checkSnapshot(t, opts, "org/tiny", commit1, dirs[i], files, wanted)
	}
	if n := h.Count("GET", "/cdn/"); n != 1 {
		t.Errorf("model.safetensors was downloaded %d times, want once", n)
	}
}

func TestNotFound(t *testing.T) {
	h, _ := tinyRepo(t)
	h.AddRepo("org/pickle", commit1, map[string][]byte{"config.json": []byte(`{}`), "pytorch_model.bin": []byte("x")})
	h.AddRepo("org/dataset-like", commit1, map[string][]byte{"data.csv": []byte("a,b")})
	opts := testOptions(t, h)
	cases := []struct {
		repo, rev string
		mention   []string
	}{
		{"org/missing", "", []string{"repository org/missing", "spelling"}},
		{"org/tiny", "nope", []string{`revision "nope"`, "org/tiny"}},
		{"org/pickle", "", []string{"pytorch_model.bin", "safetensors"}},
		{"org/dataset-like", "", []string{"config.json"}},
	}
	for _, c := range cases {
		o := opts
		o.Revision = c.rev
		_, err := Resolve(context.Background(), c.repo, o)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s@%s: err = %v, want ErrNotFound", c.repo, c.rev, err)
			continue
		}
		for _, m := range c.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s@%s: error %q does not mention %q", c.repo, c.rev, err, m)
			}
		}
	}
}

func TestNoSpaceBeforeDownload(t *testing.T) {
	h, _ := tinyRepo(t)
	freeSpace = func(string) (int64, error) { return 1000, nil }
	t.Cleanup(func() { freeSpace = statfsFree })
	_, err := Resolve(context.Background(), "org/tiny", testOptions(t, h))
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "HF_HUB_CACHE") {
		t.Fatalf("err = %v, want ErrNoSpace suggesting HF_HUB_CACHE", err)
	}
	if n := h.Count("GET", ""); n != 1 {
		t.Errorf("%d GETs before failing on space, want only the metadata call", n)
	}
}

func TestResolveLocalPathAndIsRepoID(t *testing.T) {
	isolateEnv(t)
	t.Chdir(t.TempDir())
	if err := os.MkdirAll("org/local", 0o755); err != nil {
		t.Fatal(err)
	}
	if dir, err := Resolve(context.Background(), "org/local", Options{}); err != nil || dir != "org/local" {
		t.Fatalf("existing folder: %s, %v", dir, err)
	}
	if _, err := Resolve(context.Background(), "./no/such/folder", Options{}); err == nil ||
		!strings.Contains(err.Error(), "./no/such/folder") {
		t.Fatalf("missing local path: err = %v", err)
	}
	for s, want := range map[string]bool{
		"HuggingFaceTB/SmolLM2-135M-Instruct": true,
		"gpt2":                                true,
		"meta-llama/Llama-3.2-1B":             true,
		"org/local":                           false, // exists here
		"./models/x":                          false,
		"/abs/path":                           false,
		"a/b/c":                               false,
		"org/-bad":                            false,
		"org/bad.":                            false,
		"org--x/y":                            false,
		"org/a..b":                            false,
		"org/with space":                      false,
		"":                                    false,
		strings.Repeat("a", 97):               false,
	} {
		if got := IsRepoID(s); got != want {
			t.Errorf("IsRepoID(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestOptionsFromEnv(t *testing.T) {
	isolateEnv(t)
	home := os.Getenv("HF_HOME")
	t.Setenv("HF_ENDPOINT", "https://mirror.example/")
	t.Setenv("HF_HUB_OFFLINE", "true")
	os.WriteFile(filepath.Join(home, "token"), []byte(" hf_from_file \n"), 0o600)
	o := OptionsFromEnv()
	want := Options{Revision: "main", Token: "hf_from_file", Endpoint: "https://mirror.example",
		CacheDir: filepath.Join(home, "hub"), Offline: true}
	if o != want {
		t.Fatalf("OptionsFromEnv = %+v, want %+v", o, want)
	}
	t.Setenv("HF_TOKEN", "hf_env")
	t.Setenv("HF_HUB_CACHE", "/elsewhere")
	t.Setenv("HF_HUB_OFFLINE", "0")
	o = OptionsFromEnv()
	if o.Token != "hf_env" || o.CacheDir != "/elsewhere" || o.Offline {
		t.Fatalf("OptionsFromEnv = %+v", o)
	}
}

func TestInvalidRevision(t *testing.T) {
	isolateEnv(t)
	for _, rev := range []string{"../x", "a//b", "/abs", `a\b`} {
		if _, err := Resolve(context.Background(), "org/tiny", Options{Revision: rev, Offline: true}); err == nil ||
			!strings.Contains(err.Error(), "invalid revision") {
			t.Errorf("revision %q: err = %v", rev, err)
		}
	}
}

func FuzzParseIndex(f *testing.F) {
	f.Add([]byte(`{"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"../../etc/passwd.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		shards, err := parseIndex(b)
		if err != nil {
			return
		}
		if len(shards) == 0 {
			t.Fatal("no shards and no error")
		}
		for _, s := range shards {
			if !safeRepoPath(s) || !strings.HasSuffix(s, ".safetensors") {
				t.Fatalf("unsafe shard name %q accepted", s)
			}
		}
	})
}

// A Python process downloading the same blob holds .locks/models--org--name/<etag>.lock (filelock uses flock):
// Resolve must wait for it rather than write the same .incomplete file.
func TestPythonLockIsHonoured(t *testing.T) {
	h, files := tinyRepo(t)
	opts := testOptions(t, h)
	sha := hubtest.SHA256(files["model.safetensors"])
	pyLock := filepath.Join(opts.CacheDir, ".locks", "models--org--tiny", sha+".lock")
	os.MkdirAll(filepath.Dir(pyLock), 0o755)
	unlock, err := filelock.Lock(context.Background(), pyLock, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := Resolve(context.Background(), "org/tiny", opts)
		done <- err
	}()
	// Wait until Resolve is blocked on the lock: it has asked for the file's metadata.
	for h.Count("HEAD", "model.safetensors") == 0 {
		select {
		case err := <-done:
			t.Fatalf("Resolve returned before reaching the lock: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := h.Count("GET", "/cdn/"); n != 0 {
		t.Fatalf("the blob was downloaded %d times while Python's lock was held", n)
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(pyLock); err != nil {
		t.Errorf("Python's lock file was removed: %v", err)
	}
}

// A file a Python tool already placed in the snapshot (here a plain file, as with local_dir copies) is used as is.
func TestExistingSnapshotFileIsKept(t *testing.T) {
	h, files := tinyRepo(t)
	opts := testOptions(t, h)
	snap := filepath.Join(opts.CacheDir, "models--org--tiny", "snapshots", commit1)
	os.MkdirAll(snap, 0o755)
	if err := os.WriteFile(filepath.Join(snap, "model.safetensors"), files["model.safetensors"], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Resolve(context.Background(), "org/tiny", opts); err != nil {
		t.Fatal(err)
	}
	if n := h.Count("HEAD", "model.safetensors") + h.Count("GET", "/cdn/"); n != 0 {
		t.Errorf("model.safetensors was requested %d times though the snapshot had it", n)
	}
}

// A real checkpoint served by the imitation Hub comes out byte-identical and opens with package checkpoint.
func TestSharedModelRoundTrip(t *testing.T) {
	isolateEnv(t)
	src := testutil.SharedPath(t, "models", "stories260K-hf")
	files, err := hubtest.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	h := hubtest.NewServer(t)
	h.AddRepo("karpathy/stories260K", commit1, files)
	dir, err := Resolve(context.Background(), "karpathy/stories260K", testOptions(t, h))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s differs from %s/%s (%v)", name, src, name, err)
		}
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatalf("checkpoint.Open(%s): %v", dir, err)
	}
	if len(ck.Tensors) == 0 {
		t.Fatal("no tensors")
	}
}

func TestHeadFileMetadata(t *testing.T) {
	h, files := tinyRepo(t)
	opts := testOptions(t, h).withDefaults()
	d := &downloader{opts: opts, repo: newCacheRepo(opts.CacheDir, "org/tiny"), id: "org/tiny"}
	for _, c := range []struct {
		name, etag string
	}{
		{"config.json", hubtest.GitBlobSHA1(files["config.json"])},
		{"model.safetensors", hubtest.SHA256(files["model.safetensors"])},
	} {
		m, err := d.headFile(context.Background(), commit1, c.name)
		if err != nil {
			t.Fatal(err)
		}
		want := fileMeta{name: c.name, etag: c.etag, size: int64(len(files[c.name])), commit: commit1}
		if m != want {
			t.Errorf("headFile(%s) = %+v, want %+v", c.name, m, want)
		}
	}
}

// A disk filling up mid-write is reported as ErrNoSpace naming the file; /dev/full stands in for the full disk.
func TestDiskFullWhileWriting(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	h, files := tinyRepo(t)
	opts := testOptions(t, h)
	sha := hubtest.SHA256(files["model.safetensors"])
	blobs := filepath.Join(opts.CacheDir, "models--org--tiny", "blobs")
	os.MkdirAll(blobs, 0o755)
	if err := os.Symlink("/dev/full", filepath.Join(blobs, sha+".incomplete")); err != nil {
		t.Fatal(err)
	}
	_, err := Resolve(context.Background(), "org/tiny", opts)
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "disk full while writing") ||
		!strings.Contains(err.Error(), sha+".incomplete") {
		t.Fatalf("err = %v, want ErrNoSpace naming the file being written", err)
	}
	if _, err := os.Stat(filepath.Join(blobs, sha)); err == nil {
		t.Fatal("a blob was placed")
	}
}

// Cancelling mid-body returns the context's error and keeps the bytes received for the next run.
func TestCancelKeepsPartialDownload(t *testing.T) {
	h, files := tinyRepo(t)
	sha := hubtest.SHA256(files["model.safetensors"])
	h.StallOnce(sha, 40_000)
	opts := testOptions(t, h)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() {
		_, err := Resolve(ctx, "org/tiny", opts)
		done <- err
	}()
	blobs := filepath.Join(opts.CacheDir, "models--org--tiny", "blobs")
	for fileSize(filepath.Join(blobs, sha+".incomplete")) < 40_000 {
		select {
		case err := <-done:
			t.Fatalf("Resolve returned before the stall: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := fileSize(filepath.Join(blobs, sha+".incomplete")); n != 40_000 {
		t.Errorf("partial file has %d bytes, want 40000", n)
	}
	if locks, _ := filepath.Glob(filepath.Join(blobs, "*.lock")); len(locks) > 0 {
		t.Errorf("lock files left: %v", locks)
	}
}

// BenchmarkDownload measures the download path (HTTP from a local server, sha256, write, rename) for one
// 256 MB LFS file: the ceiling the code itself puts on download speed.
func BenchmarkDownload(b *testing.B) {
	for _, k := range []string{"HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE"} {
		b.Setenv(k, "")
	}
	h := hubtest.NewServer(b)
	data := randomBytes(7, 256<<20)
	h.AddRepo("org/big", commit1, map[string][]byte{"config.json": []byte(`{}`), "model.safetensors": data})
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		opts := Options{Endpoint: h.URL, CacheDir: b.TempDir(), Client: h.Client()}
		if _, err := Resolve(context.Background(), "org/big", opts); err != nil {
			b.Fatal(err)
		}
	}
}

// TestResolveGGUFFile fetches one GGUF file of a repository ("org/name/file.gguf"), alone, and finds it again
// offline; a split model's first part brings its other parts, and a missing part is named.
func TestResolveGGUFFile(t *testing.T) {
	isolateEnv(t)
	h := hubtest.NewServer(t)
	files := map[string][]byte{
		"README.md":                 []byte("# quantized"),
		"model-Q4_K_M.gguf":         randomBytes(2, 200_000),
		"model-Q8_0.gguf":           randomBytes(3, 300_000),
		"sub/model-F16.gguf":        randomBytes(4, 1000),
		"big/m-00001-of-00002.gguf": randomBytes(5, 1000),
		"big/m-00002-of-00002.gguf": randomBytes(6, 2000),
		"cut/m-00001-of-00003.gguf": randomBytes(7, 100),
		"cut/m-00003-of-00003.gguf": randomBytes(8, 100),
		"config.json":               []byte(`{}`),
		"generation_config.json":    []byte(`{}`),
	}
	h.AddRepo("org/quants", commit1, files)
	opts := testOptions(t, h)
	for _, name := range []string{"model-Q4_K_M.gguf", "sub/model-F16.gguf"} {
		p, err := Resolve(context.Background(), "org/quants/"+name, opts)
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(opts.CacheDir, "models--org--quants", "snapshots", commit1, name); p != want {
			t.Fatalf("path %s, want %s", p, want)
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, files[name]) {
			t.Fatalf("%s: content differs (%v)", name, err)
		}
	}
	for _, other := range []string{"model-Q8_0.gguf", "config.json", "README.md"} {
		if n := h.Count("GET", other); n > 0 {
			t.Errorf("%s was downloaded; only the asked GGUF file should be", other)
		}
	}
	_, err := Resolve(context.Background(), "org/quants/model-Q2_K.gguf", opts)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "model-Q4_K_M.gguf") {
		t.Fatalf("missing file: %v, want ErrNotFound listing the repository's GGUF files", err)
	}
	// A model split over several files: its first part brings the others.
	p, err := Resolve(context.Background(), "org/quants/big/m-00001-of-00002.gguf", opts)
	if err != nil || !strings.HasSuffix(p, filepath.FromSlash("big/m-00001-of-00002.gguf")) {
		t.Fatalf("split model: %s, %v", p, err)
	}
	if got, err := os.ReadFile(filepath.Join(filepath.Dir(p), "m-00002-of-00002.gguf")); err != nil || !bytes.Equal(got, files["big/m-00002-of-00002.gguf"]) {
		t.Fatalf("split model: the second part was not fetched beside the first (%v)", err)
	}
	for _, bad := range []string{"big/m-00005-of-00002.gguf", "big/m-00000-of-00002.gguf"} { // no such part
		if _, err := Resolve(context.Background(), "org/quants/"+bad, opts); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: %v, want ErrNotFound", bad, err)
		}
	}
	if _, err := Resolve(context.Background(), "org/quants/cut/m-00001-of-00003.gguf", opts); !errors.Is(err, ErrNotFound) ||
		!strings.Contains(err.Error(), "cut/m-00002-of-00003.gguf, a part of the split model") {
		t.Fatalf("split model missing a part: %v, want ErrNotFound naming the part", err)
	}
	offline := opts
	offline.Offline = true
	if p, err := Resolve(context.Background(), "org/quants/model-Q4_K_M.gguf", offline); err != nil || !strings.HasSuffix(p, "model-Q4_K_M.gguf") {
		t.Fatalf("offline, cached: %s, %v", p, err)
	}
	if _, err := Resolve(context.Background(), "org/quants/model-Q8_0.gguf", offline); !errors.Is(err, ErrOffline) {
		t.Fatalf("offline, not cached: %v, want ErrOffline", err)
	}
	if _, err := Resolve(context.Background(), "org/quants/big/m-00001-of-00002.gguf", offline); err != nil {
		t.Fatalf("offline, a cached split model: %v", err)
	}
	os.Remove(filepath.Join(filepath.Dir(p), "m-00002-of-00002.gguf"))
	if _, err := Resolve(context.Background(), "org/quants/big/m-00001-of-00002.gguf", offline); !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "m-00002-of-00002.gguf") {
		t.Fatalf("offline, a split model missing a part: %v, want ErrOffline naming it", err)
	}
	if _, err := Resolve(context.Background(), "org/quants/../x.gguf", opts); err == nil {
		t.Fatal("a path escaping the repository resolved")
	}
}
