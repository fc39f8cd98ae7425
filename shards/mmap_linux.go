package shards

import (
	"errors"
	"os"
	"syscall"
)

// errNoMap reports that shard files cannot be mapped here.
var errNoMap = errors.New("mmap not available")

// mapFile maps the first size bytes of f read-only, with the page tables filled (MAP_POPULATE) so that reading
// the mapping does not fault page by page.
func mapFile(f *os.File, size int64) ([]byte, error) {
	if size == 0 {
		return nil, errors.New("empty file")
	}
	return syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED|syscall.MAP_POPULATE)
}

// unmapFile removes a mapping made by mapFile.
func unmapFile(m []byte) error { return syscall.Munmap(m) }

// madvCollapse is MADV_COLLAPSE (Linux 6.1), missing from package syscall.
const madvCollapse = 25

// adviseHugePages asks the kernel to back b (2 MiB-aligned, a multiple of 2 MiB) with transparent huge pages:
// MADV_HUGEPAGE makes later page faults allocate huge pages (where THP is "madvise" or "always"), and
// MADV_COLLAPSE turns pages already faulted in (memory the Go heap reused) into huge pages now. Both are
// hints: a kernel without THP, or without memory to spare, refuses them, and b works as before.
func adviseHugePages(b []byte) {
	if syscall.Madvise(b, syscall.MADV_HUGEPAGE) == nil {
		_ = syscall.Madvise(b, madvCollapse)
	}
}
