// Package memavail reports how much memory the process can use without pushing out other pages: the kernel's
// MemAvailable (free memory plus the page cache and other memory it can reclaim), bounded by the memory limit of
// the process's cgroup (v1 or v2, and their ancestors) where one is set, as in a container. The engine uses it
// to decide whether a model's shards can stay in the page cache while they stream.
package memavail

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
)

// Available is memory the process can still use, and what bounds it.
type Available struct {
	Bytes int64
	// Source names the bound: "MemAvailable" (/proc/meminfo) or a cgroup's limit file.
	Source string
}

// Get reports the memory available to the calling process. It fails where /proc/meminfo is missing (not Linux).
func Get() (Available, error) { return fromFS(os.DirFS("/")) }

// unlimited is the limit at or above which a cgroup v1 limit means none (v1 writes the largest page multiple
// of int64, 9223372036854771712).
const unlimited = 1 << 60

// fromFS reads the files Get reads, from fsys standing for the root of the file system.
func fromFS(fsys fs.FS) (Available, error) {
	mi, err := fs.ReadFile(fsys, "proc/meminfo")
	if err != nil {
		return Available{}, fmt.Errorf("memavail: %w", err)
	}
	kb, ok := field(mi, "MemAvailable:")
	if !ok {
		return Available{}, errors.New("memavail: /proc/meminfo has no MemAvailable line")
	}
	avail := Available{Bytes: kb * 1024, Source: "MemAvailable"}
	cg, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if err != nil {
		return avail, nil // no cgroups: the machine's memory is the bound
	}
	for _, a := range cgroupBounds(fsys, cg) {
		if a.Bytes < avail.Bytes {
			avail = a
		}
	}
	return avail, nil
}

// cgroupBounds returns, for each cgroup level with a memory limit, the memory still available under it: the
// limit less the usage, plus the usage that is reclaimable page cache (active and inactive file pages).
func cgroupBounds(fsys fs.FS, procCgroup []byte) []Available {
	var out []Available
	for line := range strings.Lines(string(procCgroup)) {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			out = append(out, v2Bounds(fsys, parts[2])...)
		case hasController(parts[1], "memory"):
			if a, ok := v1Bound(fsys, parts[2]); ok {
				out = append(out, a)
			}
		}
	}
	return out
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// v2Bounds walks a cgroup v2 path from the process's group up to the root of the mount, where a limit may sit
// at any level (memory.max). In a container the group's path may not exist under the container's own mount:
// its root then is the group.
func v2Bounds(fsys fs.FS, group string) []Available {
	root := "sys/fs/cgroup"
	dir := path.Join(root, group)
	if _, err := fs.Stat(fsys, dir); err != nil {
		dir = root
	}
	var out []Available
	for {
		if a, ok := v2Level(fsys, dir); ok {
			out = append(out, a)
		}
		if dir == root {
			return out
		}
		dir = path.Dir(dir)
	}
}

func v2Level(fsys fs.FS, dir string) (Available, bool) {
	limit, ok := readInt(fsys, path.Join(dir, "memory.max")) // "max" fails to parse: no limit
	if !ok {
		return Available{}, false
	}
	usage, ok := readInt(fsys, path.Join(dir, "memory.current"))
	if !ok {
		return Available{}, false
	}
	st, _ := fs.ReadFile(fsys, path.Join(dir, "memory.stat"))
	active, _ := field(st, "active_file")
	inactive, _ := field(st, "inactive_file")
	return bound(limit, usage, active+inactive, "/"+path.Join(dir, "memory.max")), true
}

// v1Bound reads a cgroup v1 memory group; its memory.stat gives the limit in effect over all its ancestors.
func v1Bound(fsys fs.FS, group string) (Available, bool) {
	root := "sys/fs/cgroup/memory"
	dir := path.Join(root, group)
	if _, err := fs.Stat(fsys, dir); err != nil {
		dir = root
	}
	st, err := fs.ReadFile(fsys, path.Join(dir, "memory.stat"))
	if err != nil {
		return Available{}, false
	}
	limit, ok := field(st, "hierarchical_memory_limit")
	if !ok || limit >= unlimited {
		return Available{}, false
	}
	usage, ok := readInt(fsys, path.Join(dir, "memory.usage_in_bytes"))
	if !ok {
		return Available{}, false
	}
	active, _ := field(st, "total_active_file")
	inactive, _ := field(st, "total_inactive_file")
	return bound(limit, usage, active+inactive, "/"+path.Join(dir, "memory.stat")+" hierarchical_memory_limit"), true
}

func bound(limit, usage, reclaimable int64, source string) Available {
	return Available{Bytes: max(0, limit-usage+min(reclaimable, usage)), Source: source}
}

// readInt reads a file holding one decimal integer.
func readInt(fsys fs.FS, name string) (int64, bool) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	return n, err == nil
}

// field finds the line "key value..." in b (meminfo and memory.stat lines) and returns its first number.
func field(b []byte, key string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == key {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
