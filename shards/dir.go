package shards

import (
	"os"
	"path/filepath"
	"strings"
)

// DefaultDir is where Split writes when no output folder is given: <ckptDir>/layerstream when that can be
// written, else a folder in the layerstream cache, $LAYERSTREAM_CACHE (or os.UserCacheDir()/layerstream), named
// after the checkpoint: "<org>--<name>@<revision>" for a Hugging Face cache snapshot, else the sanitized absolute
// path.
func DefaultDir(ckptDir string) string {
	abs, err := filepath.Abs(ckptDir)
	if err != nil {
		abs = filepath.Clean(ckptDir)
	}
	inside := filepath.Join(abs, "layerstream")
	if st, err := os.Stat(inside); err == nil && st.IsDir() {
		if writable(inside) {
			return inside
		}
	} else if writable(abs) {
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

// cacheName names a checkpoint folder inside the cache.
func cacheName(abs string) string {
	parts := strings.Split(filepath.ToSlash(abs), "/")
	for i := 0; i+2 < len(parts); i++ {
		if repo, ok := strings.CutPrefix(parts[i], "models--"); ok && parts[i+1] == "snapshots" {
			return sanitize(repo + "@" + parts[i+2])
		}
	}
	return sanitize(strings.Trim(filepath.ToSlash(abs), "/"))
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
