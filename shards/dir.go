package shards

import (
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
// path. A split made earlier inside the checkpoint folder, <ckptDir>/layerstream (the default of earlier
// versions), is used when it can still be written.
func DefaultDir(ckptDir string) string {
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
// folder in the layerstream cache: "org--name@commit", then the path inside the snapshot, if any, sanitized.
func snapshotName(abs string) (string, bool) {
	parts := strings.Split(filepath.ToSlash(abs), "/")
	for i := 0; i+2 < len(parts); i++ {
		repo, ok := strings.CutPrefix(parts[i], "models--")
		if ok && repo != "" && parts[i+1] == "snapshots" && parts[i+2] != "" {
			name := repo + "@" + parts[i+2]
			if rest := parts[i+3:]; len(rest) > 0 {
				name += "_" + strings.Join(rest, "_")
			}
			return sanitize(name), true
		}
	}
	return "", false
}

// cacheName names a checkpoint folder outside the Hugging Face cache inside the layerstream cache.
func cacheName(abs string) string {
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
