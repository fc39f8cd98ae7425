package shards

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
)

// DefaultDir is where Split writes when no output folder is given: the layerstream cache, $LAYERSTREAM_CACHE
// (or os.UserCacheDir()/layerstream), so that a user's model folder is never written into unasked (it may be
// shared, read-only, or under version control).
//
// A checkpoint in a Hugging Face cache snapshot (…/models--org--name/snapshots/<commit>, or a folder inside one)
// gets a folder named "org--name@<commit>"; any other checkpoint a folder named after its sanitized absolute
// path and a short hash of it (sanitizing alone would give /x/a_b/model and /x/a/b_model one folder). A split
// made earlier inside the checkpoint folder, <ckptDir>/layerstream (the default of earlier versions), is used
// when it can still be written.
func DefaultDir(ckptDir string) string { return DefaultDirFor(ckptDir, None) }

// DefaultDirFor is DefaultDir for a split quantized by q: the same folder with "-q8" or "-q4" appended, so
// that differently quantized splits of one checkpoint keep folders of their own.
func DefaultDirFor(ckptDir string, q Quantization) string {
	d := defaultDir(ckptDir)
	if q != None {
		d += "-" + string(q)
	}
	return d
}

func defaultDir(ckptDir string) string {
	abs, err := filepath.Abs(ckptDir)
	if err != nil {
		abs = filepath.Clean(ckptDir)
	}
	if name, ok := snapshotName(abs); ok {
		return filepath.Join(cacheRoot(), name)
	}
	inside := filepath.Join(abs, "layerstream")
	if st, err := os.Stat(inside); err == nil && st.IsDir() && writable(inside) {
		return inside
	}
	return filepath.Join(cacheRoot(), cacheName(abs))
}

func cacheRoot() string {
	if d := os.Getenv("LAYERSTREAM_CACHE"); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		d = os.TempDir()
	}
	return filepath.Join(d, "layerstream")
}

// snapshotName reports whether abs is a Hugging Face cache snapshot or a folder inside one, and names its
// folder in the layerstream cache: "org--name@commit", then for a folder inside it the path inside the snapshot,
// sanitized, and a short hash of that path.
func snapshotName(abs string) (string, bool) {
	parts := strings.Split(filepath.ToSlash(abs), "/")
	for i := 0; i+2 < len(parts); i++ {
		repo, ok := strings.CutPrefix(parts[i], "models--")
		if ok && repo != "" && parts[i+1] == "snapshots" && parts[i+2] != "" {
			name := repo + "@" + parts[i+2]
			if rest := parts[i+3:]; len(rest) > 0 {
				return withHash(sanitize(name+"_"+strings.Join(rest, "_")), strings.Join(rest, "/")), true
			}
			return sanitize(name), true
		}
	}
	return "", false
}

// cacheName names a checkpoint folder outside the Hugging Face cache inside the layerstream cache.
func cacheName(abs string) string {
	return withHash(sanitize(strings.Trim(filepath.ToSlash(abs), "/")), abs)
}

// maxReadable bounds the readable part of a cache folder name (file names are limited to 255 bytes).
const maxReadable = 100

// withHash appends to a sanitized name the first 12 hex digits of the SHA-256 of the path it was made from, so
// that two paths that sanitize alike get different names; a long name keeps its end, the most telling part.
func withHash(name, path string) string {
	if len(name) > maxReadable {
		name = name[len(name)-maxReadable:]
	}
	sum := sha256.Sum256([]byte(path))
	return name + "-" + hex.EncodeToString(sum[:6])
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '@'
		if !ok {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}

// writable reports whether a file can be created in dir, by creating and removing one. A folder with no write
// permission bit counts as read-only even when the probe would succeed (as root does).
func writable(dir string) bool {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() || st.Mode().Perm()&0o222 == 0 {
		return false
	}
	f, err := os.CreateTemp(dir, ".layerstream-probe*")
	if err != nil {
		return false
	}
	f.Close()
	os.Remove(f.Name())
	return true
}
