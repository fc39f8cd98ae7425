//go:build !amd64

package kernels

import "github.com/layerstream/layerstream/quant"

// kQuadsAsm reports false: this architecture has only the Go quad sums.
func kQuadsAsm(t quant.Type) bool { return false }

// quadsAsm is never called here (kQuadsAsm is false).
func quadsAsm(t quant.Type, b []byte, qs []int8, out *[64]int32) {
	panic("kernels: no assembly quad sums for " + t.String())
}
