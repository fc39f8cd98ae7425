package shards

import (
	"errors"
	"os"
	"syscall"
	"unsafe"
)

// errNoMap reports that shard files cannot be mapped here.
var errNoMap = errors.New("mmap not available")

// mapFile maps the first size bytes of f read-only, with the page tables filled (MAP_POPULATE) so that reading
// the mapping does not fault page by page.
func mapFile(f *os.File, size int64) ([]byte, error) {
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

// mincore fills vec (one byte per page of m) with the pages' residency: bit 0 set when in memory.
func mincore(m, vec []byte) error {
	_, _, e := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(m))), uintptr(len(m)), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if e != 0 {
		return e
	}
	return nil
}

// madvPopulateRead is MADV_POPULATE_READ (Linux 5.14), missing from package syscall.
const madvPopulateRead = 22

// faultIn makes sure the pages of m, a kept mapping of a shard file, are in memory before compute reads them:
// if the kernel evicted some since m was last used (a model larger than the page cache), they are read back now,
// by the caller (the prefetch stage), instead of page by page as compute touches them. mincore finds out at
// about 0.05 ms per 88 MB; only then does MADV_POPULATE_READ (about 0.85 ms even when nothing is missing) run.
// Where the kernel lacks it, MADV_WILLNEED starts the reads without waiting for them.
func faultIn(m []byte) {
	var vec [4096]byte // residency of 16 MiB per mincore call
	const span = len(vec) * pageSize
	for off := 0; off < len(m); off += span {
		part := m[off:min(off+span, len(m))]
		pages := (len(part) + pageSize - 1) / pageSize
		if mincore(part, vec[:pages]) != nil {
			return
		}
		for _, v := range vec[:pages] {
			if v&1 == 0 {
				if syscall.Madvise(m, madvPopulateRead) != nil {
					_ = syscall.Madvise(m, syscall.MADV_WILLNEED)
				}
				return
			}
		}
	}
}
