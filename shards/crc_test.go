package shards

import (
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// TestCRC32C: crc32c agrees with hash/crc32's Castagnoli CRC at every length around the fold's 256-byte blocks
// and its 1 KiB threshold, from any alignment.
func TestCRC32C(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	buf := make([]byte, 70000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, n := range []int{0, 1, 255, 256, 1023, 1024, 1025, 1279, 1280, 4096, 65536, 69999} {
		for _, off := range []int{0, 1, 7} {
			b := buf[off : off+min(n, len(buf)-off)]
			if got, want := crc32c(b), crc32.Checksum(b, castagnoli); got != want {
				t.Fatalf("length %d at offset %d: %08x, want %08x", len(b), off, got, want)
			}
		}
	}
}

// TestCRCFoldConstants: the fold constants of crc_amd64.s are x^(D+32) and x^(D-32) mod the Castagnoli
// polynomial, bit-reflected and shifted by one, for folds by D = 2048, 512 and 128 bits.
func TestCRCFoldConstants(t *testing.T) {
	want := map[int][2]uint64{2048: {0xdcb17aa4, 0xb9e02b86}, 512: {0x740eef02, 0x9e4addf8}, 128: {0xf20c0dfe, 0x14cd00bd6}}
	for d, k := range want {
		if lo, hi := crcFoldConst(d+32), crcFoldConst(d-32); lo != k[0] || hi != k[1] {
			t.Errorf("fold by %d bits: constants %#x %#x, the assembly has %#x %#x", d, lo, hi, k[0], k[1])
		}
	}
}

// crcFoldConst is x^n mod the Castagnoli polynomial (0x1EDC6F41), bit-reflected and shifted left by one.
func crcFoldConst(n int) uint64 {
	r := uint32(1)
	for range n {
		hi := r & 0x80000000
		r <<= 1
		if hi != 0 {
			r ^= 0x1EDC6F41
		}
	}
	return uint64(bits.Reverse32(r)) << 1
}
