package hub

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/layerstream/layerstream/internal/atomicfile"
)

// Files layerstream reads from a model repository. Weights are model.safetensors, or the index plus the shards
// it names; other formats (.bin, .pt, .onnx, .gguf) are never fetched.
const (
	configFile    = "config.json"
	singleWeights = "model.safetensors"
	weightsIndex  = "model.safetensors.index.json"
)

// optionalFiles are fetched when the repository has them. Recent transformers versions save the chat template
// as chat_template.jinja instead of inside tokenizer_config.json, and vision-language processors in
// chat_template.json; package tokenizer reads each.
var optionalFiles = []string{"generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "chat_template.json"}

// cacheRepo is one repository's folder in the hub cache.
type cacheRepo struct {
	id  string
	dir string // <cache>/models--org--name
}

func newCacheRepo(cacheDir, id string) cacheRepo {
	return cacheRepo{id: id, dir: filepath.Join(cacheDir, "models--"+strings.ReplaceAll(id, "/", "--"))}
}

func (c cacheRepo) blobPath(etag string) string { return filepath.Join(c.dir, "blobs", etag) }

func (c cacheRepo) snapshotDir(commit string) string {
	return filepath.Join(c.dir, "snapshots", commit)
}

func (c cacheRepo) refPath(rev string) string {
	return filepath.Join(c.dir, "refs", filepath.FromSlash(rev))
}

// isCommit reports whether rev is a full commit sha.
func isCommit(rev string) bool { return len(rev) == 40 && isHex(rev) }

func isHex(s string) bool {
	for _, r := range s {
		if !('0' <= r && r <= '9' || 'a' <= r && r <= 'f') {
			return false
		}
	}
	return true
}

// cachedSnapshot resolves rev from the cache alone (refs/<rev> → snapshots/<commit>) and checks that the snapshot
// holds config.json and complete weights.
func (c cacheRepo) cachedSnapshot(rev string) (string, error) {
	commit := rev
	if !isCommit(rev) {
		b, err := os.ReadFile(c.refPath(rev))
		if err != nil {
			return "", fmt.Errorf("%w: %s (revision %s) is no local file or folder and has never been downloaded into %s: check the "+
				"spelling, or run `layerstream download %s` with network access first, or unset HF_HUB_OFFLINE (see TROUBLESHOOTING.md, \"No network or offline\")",
				ErrOffline, c.id, rev, filepath.Dir(c.dir), c.id)
		}
		commit = strings.TrimSpace(string(b))
		if !isCommit(commit) {
			return "", fmt.Errorf("%w: %s holds %q, expected a 40-hex-digit commit sha", ErrOffline, c.refPath(rev), commit)
		}
	}
	dir := c.snapshotDir(commit)
	if missing := missingFiles(dir); len(missing) > 0 {
		return "", fmt.Errorf("%w: %s (revision %s) is only partly in the cache: %s lacks %s; run `layerstream download %s` "+
			"with network access, or unset HF_HUB_OFFLINE (see TROUBLESHOOTING.md, \"No network or offline\")",
			ErrOffline, c.id, rev, dir, strings.Join(missing, ", "), c.id)
	}
	return dir, nil
}

// missingFiles lists what a snapshot folder lacks to be loadable: config.json and the weights.
func missingFiles(dir string) []string {
	var missing []string
	if !fileExists(filepath.Join(dir, configFile)) {
		missing = append(missing, configFile)
	}
	if fileExists(filepath.Join(dir, singleWeights)) {
		return missing
	}
	b, err := os.ReadFile(filepath.Join(dir, weightsIndex))
	if err != nil {
		return append(missing, singleWeights+" (or "+weightsIndex+")")
	}
	shards, err := parseIndex(b)
	if err != nil {
		return append(missing, "a valid "+weightsIndex+" ("+err.Error()+")")
	}
	for _, s := range shards {
		if !fileExists(filepath.Join(dir, filepath.FromSlash(s))) {
			missing = append(missing, s)
		}
	}
	return missing
}

// fileExists reports whether p exists, following symlinks (a dangling snapshot link does not count).
func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// parseIndex returns the shard files named by a model.safetensors.index.json, sorted and deduplicated. Names
// must be relative paths inside the snapshot.
func parseIndex(b []byte) ([]string, error) {
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s: %w", weightsIndex, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: empty or missing weight_map", weightsIndex)
	}
	var shards []string
	for tensor, file := range idx.WeightMap {
		if !safeRepoPath(file) {
			return nil, fmt.Errorf("%s: tensor %s maps to %q, expected a file name inside the repository",
				weightsIndex, tensor, file)
		}
		if !strings.HasSuffix(file, ".safetensors") {
			return nil, fmt.Errorf("%s: tensor %s maps to %q, expected a .safetensors file", weightsIndex, tensor, file)
		}
		shards = append(shards, file)
	}
	slices.Sort(shards)
	return slices.Compact(shards), nil
}

// safeRepoPath reports whether name (a slash-separated repository path) stays inside the snapshot folder.
func safeRepoPath(name string) bool {
	return name != "" && !strings.Contains(name, "\\") && path.Clean(name) == name && filepath.IsLocal(name)
}

// link points snapshots/<commit>/<name> at blobs/<etag> with a relative symlink, replacing any previous link
// atomically.
func (c cacheRepo) link(commit, name, etag string) error {
	dst := filepath.Join(c.snapshotDir(commit), filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	target, err := filepath.Rel(filepath.Dir(dst), c.blobPath(etag))
	if err != nil {
		return err
	}
	// A name of its own, so that two processes linking the same file do not trip over each other's temporary.
	tmp := fmt.Sprintf("%s.tmp-%d-%x", dst, os.Getpid(), rand.Uint64())
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// writeRef records that rev pointed to commit (refs/<rev>, no trailing newline, as huggingface_hub writes it).
func (c cacheRepo) writeRef(rev, commit string) error {
	if rev == commit {
		return nil
	}
	p := c.refPath(rev)
	if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return atomicfile.WriteBytes(p, []byte(commit))
}
