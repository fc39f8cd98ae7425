//go:build !amd64

package kernels

// tileK, tileQ8 and tileQ81 are nil: this architecture has no tiled kernels, and LinearQuantPrompt is LinearQuant.
var (
	tileK           func(codes, meta, qs, ameta []byte, nsb, nsub int, acc *[tileIn * tileRows]float32)
	tileQ8, tileQ81 quantTile
)
