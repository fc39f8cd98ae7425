//go:build !amd64

package kernels

// tileK and tileQ8 are nil: this architecture has no tiled kernels, and LinearQuantPrompt is LinearQuant.
var (
	tileK  func(codes, meta, qs, ameta []byte, nsb, nsub int, acc *[tileIn * tileRows]float32)
	tileQ8 quantTile
)
