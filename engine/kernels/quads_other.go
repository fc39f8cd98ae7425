//go:build !amd64

package kernels

import "github.com/layerstream/layerstream/quant"

// kQuadsAsm returns no kernels: this architecture has only the portable ones.
func kQuadsAsm() map[quant.Type]func(b []byte, qs []int8, out *[64]int32) { return nil }
