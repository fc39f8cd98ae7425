//go:build !amd64

package kernels

// tileK is nil: this architecture has no tiled kernel, and LinearQuantPrompt is LinearQuant.
var tileK func(codes, meta, qs, ameta []byte, nsb, nsub int, acc *[tileIn * tileRows]float32)
