package kernels

import (
	"encoding/binary"
	"unsafe"
)

// Fold reads every byte of b once and returns their XOR folded to 64 bits: a read of memory at its full rate
// (AVX-512 where the CPU has it), for measuring the machine's memory read bandwidth, the bound of a decode step
// that streams every weight.
func Fold(b []byte) uint64 {
	var x uint64
	n := 0
	if useAVX512 && len(b) >= 256 {
		n = len(b) &^ 255
		x = foldAVX512(unsafe.SliceData(b), n)
	}
	for ; n+8 <= len(b); n += 8 {
		x ^= binary.LittleEndian.Uint64(b[n:])
	}
	for i, c := range b[n:] {
		x ^= uint64(c) << (8 * i)
	}
	return x
}
