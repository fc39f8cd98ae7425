// Package hub turns a Hugging Face Hub repo id ("HuggingFaceTB/SmolLM2-135M-Instruct") into a local snapshot
// folder, downloading only the files layerstream reads into the standard Hugging Face cache, so that files are
// shared both ways with Python tools (transformers, huggingface_hub):
//
//	$HF_HUB_CACHE/models--org--name/
//	    blobs/<etag>                      file contents, named by the Hub's etag (sha256 for LFS files)
//	    snapshots/<commit>/<file>         relative symlinks to ../../blobs/<etag>
//	    refs/<revision>                   the commit the revision pointed to when last fetched
//
// Downloads resume from blobs/<etag>.incomplete with an HTTP Range request, LFS files are checked against their
// sha256, a blob appears under its final name only once complete and verified, and flocks on blobs/<etag>.lock
// and on huggingface_hub's own .locks/models--org--name/<etag>.lock keep two processes, Go or Python, from
// fetching the same blob at once.
package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/layerstream/layerstream/gguf"
)

// DefaultEndpoint is the Hub used when neither Options.Endpoint nor HF_ENDPOINT is set.
const DefaultEndpoint = "https://huggingface.co"

// DefaultRevision is the branch used when no revision is given.
const DefaultRevision = "main"

// Errors returned by Resolve, to be tested with errors.Is. The returned error's text says what happened, to which
// repo, revision or file, and what to do.
var (
	// ErrGated: the repository is gated or private and the request had no token, an invalid one, or one whose
	// account has not accepted the model's licence.
	ErrGated = errors.New("access denied (gated or private repository)")
	// ErrNotFound: the repository, revision or a needed file does not exist on the Hub.
	ErrNotFound = errors.New("not found on the Hugging Face Hub")
	// ErrOffline: offline mode (Options.Offline, HF_HUB_OFFLINE=1) and the model is not (fully) in the cache.
	ErrOffline = errors.New("offline mode and the model is not in the cache")
	// ErrNoNetwork: the Hub could not be reached (DNS, connection refused, reset, timeout).
	ErrNoNetwork = errors.New("cannot reach the Hugging Face Hub")
	// ErrNoSpace: the cache's disk has too little free space for the download, or filled up during it.
	ErrNoSpace = errors.New("not enough disk space")
	// ErrChecksum: a downloaded file's sha256 differs from the Hub's etag; nothing was placed in the cache.
	ErrChecksum = errors.New("checksum mismatch")
)

// Options configures Resolve. Empty fields take their value from the environment (see OptionsFromEnv), so the
// zero Options behaves like the huggingface_hub Python library.
type Options struct {
	Revision string       // branch, tag or commit sha; "" means "main"
	Token    string       // access token; "" means $HF_TOKEN, then the token file $HF_HOME/token
	Endpoint string       // Hub URL; "" means $HF_ENDPOINT, then https://huggingface.co
	CacheDir string       // hub cache holding models--org--name folders; "" means $HF_HUB_CACHE, then $HF_HOME/hub
	Offline  bool         // use the cache only; also on when HF_HUB_OFFLINE is 1/true/yes/on
	Progress io.Writer    // per-file and overall progress bars (e.g. os.Stderr); nil prints nothing
	Client   *http.Client // nil means a client with connect and response-header timeouts
}

// OptionsFromEnv returns the options the environment asks for: HF_TOKEN (or the token file $HF_TOKEN_PATH,
// default $HF_HOME/token), HF_ENDPOINT, HF_HUB_CACHE (default $HF_HOME/hub, HF_HOME defaulting to
// ~/.cache/huggingface) and HF_HUB_OFFLINE. The legacy names HUGGING_FACE_HUB_TOKEN, HUGGINGFACE_HUB_CACHE and
// TRANSFORMERS_OFFLINE are honoured as the Python library does. Revision is "main".
func OptionsFromEnv() Options {
	return Options{
		Revision: DefaultRevision,
		Token:    envToken(),
		Endpoint: envEndpoint(),
		CacheDir: envCacheDir(),
		Offline:  isTrue(os.Getenv("HF_HUB_OFFLINE")) || isTrue(os.Getenv("TRANSFORMERS_OFFLINE")),
	}
}

// withDefaults fills empty fields from the environment.
func (o Options) withDefaults() Options {
	env := OptionsFromEnv()
	if o.Revision == "" {
		o.Revision = env.Revision
	}
	if o.Token == "" {
		o.Token = env.Token
	}
	if o.Endpoint == "" {
		o.Endpoint = env.Endpoint
	}
	o.Endpoint = strings.TrimRight(o.Endpoint, "/")
	if o.CacheDir == "" {
		o.CacheDir = env.CacheDir
	}
	o.Offline = o.Offline || env.Offline
	if o.Client == nil {
		o.Client = defaultClient
	}
	return o
}

func hfHome() string {
	if h := os.Getenv("HF_HOME"); h != "" {
		return h
	}
	if x := os.Getenv("XDG_CACHE_HOME"); x != "" {
		return filepath.Join(x, "huggingface")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		home = os.TempDir()
	}
	return filepath.Join(home, ".cache", "huggingface")
}

func envCacheDir() string {
	for _, k := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return filepath.Join(hfHome(), "hub")
}

func envEndpoint() string {
	if v := os.Getenv("HF_ENDPOINT"); v != "" {
		return strings.TrimRight(v, "/")
	}
	return DefaultEndpoint
}

func envToken() string {
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if v := strings.TrimSpace(os.Getenv(k)); v != "" {
			return v
		}
	}
	path := os.Getenv("HF_TOKEN_PATH")
	if path == "" {
		path = filepath.Join(hfHome(), "token")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func isTrue(v string) bool {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// IsRepoID reports whether s names a Hub model repository ("name" or "namespace/name", the characters
// huggingface_hub accepts) rather than a local path. An existing local file or folder is never a repo id.
func IsRepoID(s string) bool {
	if _, err := os.Stat(s); err == nil {
		return false
	}
	return validRepoID(s)
}

func validRepoID(s string) bool {
	if s == "" || len(s) > 96 || strings.Contains(s, "--") || strings.Contains(s, "..") {
		return false
	}
	parts := strings.Split(s, "/")
	if len(parts) > 2 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.IndexAny(p[:1], "-.") == 0 || strings.IndexAny(p[len(p)-1:], "-.") == 0 {
			return false
		}
		for _, r := range p {
			ok := r == '-' || r == '_' || r == '.' || ('0' <= r && r <= '9') || ('a' <= r && r <= 'z') ||
				('A' <= r && r <= 'Z')
			if !ok {
				return false
			}
		}
	}
	return true
}

// Resolve returns the local folder for ref: an existing local path is returned as it is; a repo id is resolved
// to its snapshot folder in the cache, downloading what is missing (config.json, generation_config.json,
// tokenizer.json, tokenizer_config.json, chat_template.jinja and the safetensors weights, sharded or not) unless
// offline. A GGUF file in a repository, "org/name/path/file.gguf", resolves to that one file in the snapshot,
// downloaded alone; a part of a model split over several files (PREFIX-00001-of-00003.gguf) brings the other
// parts with it.
func Resolve(ctx context.Context, ref string, opts Options) (string, error) {
	if _, err := os.Stat(ref); err == nil {
		return ref, nil
	}
	id, file, isFile := splitFileRef(ref)
	if !isFile && !validRepoID(ref) {
		return "", fmt.Errorf("model %q: no such file or folder, and not a Hugging Face repo id (org/name) or a GGUF file in one (org/name/file.gguf)", ref)
	}
	o := opts.withDefaults()
	if !validRevision(o.Revision) {
		return "", fmt.Errorf("model %s: invalid revision %q", ref, o.Revision)
	}
	if isFile {
		return resolveFile(ctx, id, file, o)
	}
	repo := newCacheRepo(o.CacheDir, ref)
	if o.Offline {
		return repo.cachedSnapshot(o.Revision)
	}
	d := &downloader{opts: o, repo: repo, id: ref}
	return d.run(ctx)
}

// splitFileRef splits "org/name/path/file.gguf" into the repo id and the file's path in the repository.
func splitFileRef(ref string) (id, file string, ok bool) {
	parts := strings.SplitN(ref, "/", 3)
	if len(parts) != 3 || !strings.HasSuffix(parts[2], ".gguf") || !safeRepoPath(parts[2]) {
		return "", "", false
	}
	id = parts[0] + "/" + parts[1]
	return id, parts[2], validRepoID(id)
}

// ggufModelFiles lists the files of the GGUF model whose file (a path in the repository) is named: the file alone,
// or every part of a model split over several files (gguf.SplitParts), in order.
func ggufModelFiles(file string) []string {
	if parts, no, ok := gguf.SplitParts(file); ok && no >= 1 && no <= len(parts) {
		return parts
	}
	return []string{file} // not a part of a split model: the file alone, which must exist
}

// resolveFile returns the path of one file of repository id in the cache, downloading it (alone, or with the
// other parts of a split model) unless it is there or the options say offline.
func resolveFile(ctx context.Context, id, file string, o Options) (string, error) {
	repo := newCacheRepo(o.CacheDir, id)
	want := ggufModelFiles(file)
	if o.Offline {
		commit := o.Revision
		if !isCommit(commit) {
			b, err := os.ReadFile(repo.refPath(o.Revision))
			if err != nil {
				return "", fmt.Errorf("%w: %s (revision %s) is no local file or folder and has never been downloaded into %s: check the "+
					"spelling, or run `layerstream download %s/%s` with network access first, or unset HF_HUB_OFFLINE", ErrOffline, id, o.Revision, o.CacheDir, id, file)
			}
			commit = strings.TrimSpace(string(b))
		}
		for _, f := range want {
			if !fileExists(filepath.Join(repo.snapshotDir(commit), filepath.FromSlash(f))) {
				return "", fmt.Errorf("%w: %s (revision %s) is in the cache without %s", ErrOffline, id, o.Revision, f)
			}
		}
		return filepath.Join(repo.snapshotDir(commit), filepath.FromSlash(file)), nil
	}
	d := &downloader{opts: o, repo: repo, id: id}
	info, err := d.repoInfo(ctx)
	if err != nil {
		return "", err
	}
	var gguf []string
	has := map[string]bool{}
	for _, s := range info.Siblings {
		has[s.RFilename] = true
		if strings.HasSuffix(s.RFilename, ".gguf") {
			gguf = append(gguf, s.RFilename)
		}
	}
	for _, f := range want {
		if !has[f] {
			what := "no file " + f
			if len(want) > 1 && f != file {
				what = fmt.Sprintf("no file %s, a part of the split model %s", f, file)
			}
			return "", fmt.Errorf("%w: %s (revision %s, commit %s) has %s (its GGUF files: %s)", ErrNotFound, id,
				o.Revision, info.SHA, what, strings.Join(gguf, ", "))
		}
	}
	d.buf = make([]byte, 1<<20)
	d.prog = newProgress(o.Progress)
	if err := d.fetch(ctx, info.SHA, want); err != nil {
		return "", err
	}
	if err := repo.writeRef(o.Revision, info.SHA); err != nil {
		return "", fmt.Errorf("%s: recording revision %s: %w", id, o.Revision, err)
	}
	return filepath.Join(repo.snapshotDir(info.SHA), filepath.FromSlash(file)), nil
}

// validRevision rejects revisions that could escape refs/ when used as a path.
func validRevision(rev string) bool {
	if rev == "" || strings.HasPrefix(rev, "/") || strings.Contains(rev, "\\") {
		return false
	}
	for _, p := range strings.Split(rev, "/") {
		if p == "" || p == "." || p == ".." {
			return false
		}
	}
	return true
}
