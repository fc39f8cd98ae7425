//go:build !amd64

package kernels

import "github.com/layerstream/layerstream/quant"

// The tiled kernels and unpackers are nil: this architecture has no tiled kernels, and LinearQuantPrompt is LinearQuant.
var (
	codes16, scales16 map[quant.Type]unpack16

	tileK           func(codes, meta, qs, ameta []byte, nsb, nsub int, acc *[tileIn * tileRows]float32)
	tileQ8, tileQ81 quantTile
)
