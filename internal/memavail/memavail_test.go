package memavail

import (
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
)

const gib = 1 << 30

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }

func meminfo(availKB int64) *fstest.MapFile {
	return file("MemTotal:       24000000 kB\nMemFree:         1000000 kB\nMemAvailable:   " + strconv.FormatInt(availKB, 10) + " kB\n")
}

func TestFromFS(t *testing.T) {
	const avail20 = 20 * gib / 1024 // kB
	cases := []struct {
		name   string
		fs     fstest.MapFS
		want   int64
		source string // a substring of Source
	}{
		{"no cgroups", fstest.MapFS{"proc/meminfo": meminfo(avail20)}, 20 * gib, "MemAvailable"},
		{"v1 unlimited", fstest.MapFS{
			"proc/meminfo":                                   meminfo(avail20),
			"proc/self/cgroup":                               file("9:name=systemd:/\n4:memory:/job\n"),
			"sys/fs/cgroup/memory/job/memory.stat":           file("cache 5\nhierarchical_memory_limit 9223372036854771712\ntotal_active_file 1\n"),
			"sys/fs/cgroup/memory/job/memory.usage_in_bytes": file("100\n"),
		}, 20 * gib, "MemAvailable"},
		{"v1 limit: limit - usage + reclaimable file pages", fstest.MapFS{
			"proc/meminfo":     meminfo(avail20),
			"proc/self/cgroup": file("4:cpu,memory:/job\n"),
			"sys/fs/cgroup/memory/job/memory.stat": file("cache 999\nhierarchical_memory_limit 2147483648\n" +
				"total_inactive_file 268435456\ntotal_active_file 268435456\n"),
			"sys/fs/cgroup/memory/job/memory.usage_in_bytes": file("1610612736\n"),
		}, 1 * gib, "hierarchical_memory_limit"},
		{"v1 in a container (group path not under the mount)", fstest.MapFS{
			"proc/meminfo":                               meminfo(avail20),
			"proc/self/cgroup":                           file("4:memory:/docker/abc\n"),
			"sys/fs/cgroup/memory/memory.stat":           file("hierarchical_memory_limit 4294967296\n"),
			"sys/fs/cgroup/memory/memory.usage_in_bytes": file("1073741824\n"),
		}, 3 * gib, "/sys/fs/cgroup/memory/memory.stat"},
		{"v2: the tightest level wins", fstest.MapFS{
			"proc/meminfo":                     meminfo(avail20),
			"proc/self/cgroup":                 file("0::/a/b\n"),
			"sys/fs/cgroup/a/b/memory.max":     file("max\n"),
			"sys/fs/cgroup/a/b/memory.current": file("1073741824\n"),
			"sys/fs/cgroup/a/memory.max":       file("3221225472\n"),
			"sys/fs/cgroup/a/memory.current":   file("2147483648\n"),
			"sys/fs/cgroup/a/memory.stat":      file("anon 1\nfile 999\nactive_file 536870912\ninactive_file 536870912\n"),
			"sys/fs/cgroup/memory.stat":        file("active_file 1\n"), // the root has no memory.max
			"sys/fs/cgroup/a/b/memory.stat":    file("active_file 0\n"),
		}, 2 * gib, "/sys/fs/cgroup/a/memory.max"},
		{"v2 limit above MemAvailable", fstest.MapFS{
			"proc/meminfo":                 meminfo(avail20),
			"proc/self/cgroup":             file("0::/\n"),
			"sys/fs/cgroup/memory.max":     file("64424509440\n"),
			"sys/fs/cgroup/memory.current": file("0\n"),
		}, 20 * gib, "MemAvailable"},
		{"usage above the limit", fstest.MapFS{
			"proc/meminfo":                 meminfo(avail20),
			"proc/self/cgroup":             file("0::/\n"),
			"sys/fs/cgroup/memory.max":     file("1073741824\n"),
			"sys/fs/cgroup/memory.current": file("2147483648\n"),
		}, 0, "/sys/fs/cgroup/memory.max"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := fromFS(c.fs)
			if err != nil {
				t.Fatal(err)
			}
			if got.Bytes != c.want || !strings.Contains(got.Source, c.source) {
				t.Errorf("got %d bytes from %q, want %d from %q", got.Bytes, got.Source, c.want, c.source)
			}
		})
	}
}

func TestFromFSErrors(t *testing.T) {
	for name, fsys := range map[string]fstest.MapFS{
		"no meminfo":      {},
		"no MemAvailable": {"proc/meminfo": file("MemTotal: 1 kB\n")},
		"bad number":      {"proc/meminfo": file("MemAvailable: lots kB\n")},
	} {
		if got, err := fromFS(fsys); err == nil {
			t.Errorf("%s: got %+v, want an error", name, got)
		}
	}
}

// TestGet reads this machine's figures: on Linux they exist and are positive.
func TestGet(t *testing.T) {
	a, err := Get()
	if err != nil {
		t.Skipf("no memory figures here: %v", err)
	}
	if a.Bytes <= 0 || a.Source == "" {
		t.Fatalf("Get() = %+v", a)
	}
	t.Logf("%d MiB available (%s)", a.Bytes>>20, a.Source)
}
