package shards

import "unsafe"

// Buffer is a page-aligned host buffer that Load reads a shard into and decodes it in. Reuse one Buffer (or a
// small pool) for every load: fresh memory is slow to touch the first time, warm memory is fast.
//
// Layout during a Load of unit u: bytes [0, u.FileSize) hold the shard file as read; bytes
// [u.FileSize, u.FileSize+u.DecodeSize) are the decode area where encoded tensors are decompressed. So Load
// needs u.BufferSize() bytes; Set.MaxBufferSize gives the maximum over the units, to size buffers once. A Buffer
// that is too small is grown (reallocated) by Load.
type Buffer struct {
	mem []byte // the allocation
	b   []byte // page-aligned view of mem
}

// NewBuffer allocates a page-aligned buffer of the given capacity in bytes.
func NewBuffer(capacity int) *Buffer {
	buf := &Buffer{}
	buf.alloc(capacity)
	return buf
}

func (buf *Buffer) alloc(capacity int) {
	capacity = int(alignUp(int64(max(capacity, 0)), pageSize))
	buf.mem = make([]byte, capacity+pageSize)
	off := 0
	if r := int(uintptr(unsafe.Pointer(unsafe.SliceData(buf.mem))) % pageSize); r != 0 {
		off = pageSize - r
	}
	buf.b = buf.mem[off : off+capacity : off+capacity]
}

// Cap is the buffer's capacity in bytes.
func (buf *Buffer) Cap() int { return len(buf.b) }

// Bytes is the whole page-aligned buffer. Tensors returned by Load alias it.
func (buf *Buffer) Bytes() []byte { return buf.b }

// ensure grows the buffer to hold at least n bytes, keeping its contents. Tensors from earlier loads keep the
// old memory alive.
func (buf *Buffer) ensure(n int64) {
	if int64(len(buf.b)) < n {
		old := buf.b
		buf.alloc(int(n))
		copy(buf.b, old)
	}
}
