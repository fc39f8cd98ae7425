//go:build !amd64

package shards

import "hash/crc32"

// crc32c is the CRC-32C (Castagnoli) of b.
func crc32c(b []byte) uint32 { return crc32.Update(0, castagnoli, b) }
