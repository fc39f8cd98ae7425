package shards

import (
	"log/slog"
	"unsafe"
)

// hugePageSize is the size of a transparent huge page on x86-64 and arm64 (4 KiB base pages).
const hugePageSize = 2 << 20

// Buffer is a page-aligned host buffer that Load reads a shard into and decodes it in. Reuse one Buffer (or a
// small pool) for every load: fresh memory is slow to touch the first time, warm memory is fast.
//
// Layout during a Load of unit u: bytes [0, u.FileSize) hold the shard file as read; bytes
// [u.FileSize, u.FileSize+u.DecodeSize) are the decode area where encoded tensors are decompressed. So Load
// needs u.BufferSize() bytes; Set.MaxBufferSize gives the maximum over the units, to size buffers once. A Buffer
// that is too small is grown (reallocated) by Load.
//
// Map leaves the shard file mapped instead (see Set.Map): the Buffer then holds the mapping, and its own bytes
// serve only as the decode area. The mapping is removed by the next Load or Map into the Buffer, or by Release.
type Buffer struct {
	mem    []byte // the allocation
	b      []byte // page-aligned view of mem
	mapped []byte // a shard file mapped by Map, or nil
}

// NewBuffer allocates a page-aligned buffer of the given capacity in bytes. A buffer of 2 MiB or more is aligned
// to 2 MiB and, on Linux, asks for transparent huge pages (madvise MADV_HUGEPAGE, then MADV_COLLAPSE for memory
// the Go heap had already touched): an O_DIRECT read into it then moves the disk's bytes in a few large
// physically contiguous pieces instead of 4 KiB pages scattered over memory. On the 2-core VM, reading the
// TinyLlama layer shards with O_DIRECT ran at 1.7-1.9 GB/s into such buffers against 0.9-1.4 GB/s into plain
// Go buffers (which one depended on how fragmented its memory happened to be); see docs/performance-log.md.
func NewBuffer(capacity int) *Buffer {
	buf := &Buffer{}
	buf.alloc(capacity)
	return buf
}

func (buf *Buffer) alloc(capacity int) {
	align := pageSize
	if capacity >= hugePageSize {
		align = hugePageSize
	}
	capacity = int(alignUp(int64(max(capacity, 0)), int64(align)))
	buf.mem = make([]byte, capacity+align)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf.mem))) % uintptr(align)); r != 0 {
		off = align - r
	}
	buf.b = buf.mem[off : off+capacity : off+capacity]
	if align == hugePageSize {
		adviseHugePages(buf.b)
	}
}

// Cap is the buffer's capacity in bytes.
func (buf *Buffer) Cap() int { return len(buf.b) }

// Bytes is the whole page-aligned buffer. Tensors returned by Load alias it.
func (buf *Buffer) Bytes() []byte { return buf.b }

// Release removes the file mapping that Map left in the buffer, if any; tensors from that Map must not be
// used afterwards (their memory is gone: reading it faults). The Buffer stays usable. Call it when done with a
// Buffer that Map used: the garbage collector frees a Buffer's memory, not its mapping.
func (buf *Buffer) Release() error {
	if buf.mapped == nil {
		return nil
	}
	m := buf.mapped
	buf.mapped = nil
	return unmapFile(m)
}

// release is Release for Load and Map, which reuse the buffer: a failed munmap (only possible with a bad
// address, which would be a bug) is logged, not returned.
func (buf *Buffer) release() {
	if err := buf.Release(); err != nil {
		slog.Error("shards: munmap of a shard mapping failed", "err", err)
	}
}

// ensure grows the buffer to hold at least n bytes, keeping its contents. Tensors from earlier loads keep the
// old memory alive.
func (buf *Buffer) ensure(n int64) {
	if int64(len(buf.b)) < n {
		old := buf.b
		buf.alloc(int(n))
		copy(buf.b, old)
	}
}
