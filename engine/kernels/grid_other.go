//go:build !amd64

package kernels

import "github.com/layerstream/layerstream/quant"

// gridIntsAVX2 is never called here (useAVX2 is false).
func gridIntsAVX2(q *[quant.QKK]int8, x *int8, sc *[16]int32) int32 {
	panic("kernels: no AVX2 here")
}
