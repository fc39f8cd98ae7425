//go:build !amd64

package kernels

// The tiled kernels and unpackers are nil: this architecture has no tiled kernels, and LinearQuantPrompt is LinearQuant.
var (
	codes16Q4_K, codes16Q6_K, codes16Q8_0 func(src *byte, stride int, dst *byte, nb int)

	tileK           func(codes, meta, qs, ameta []byte, nsb, nsub int, acc *[tileIn * tileRows]float32)
	tileQ8, tileQ81 quantTile
)
