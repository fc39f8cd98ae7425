//go:build !amd64

package kernels

import "github.com/layerstream/layerstream/quant"

// gridRowAsm is never called here (useAVX2 is false).
func gridRowAsm(t quant.Type, w []byte, x qActRow) float32 {
	panic("kernels: no AVX2 here")
}

// gridUnpackAsm is never called here (useAVX2 is false).
func gridUnpackAsm(t quant.Type, b []byte, c codeDst, scv *gridScales) {
	panic("kernels: no AVX2 here")
}

// gridDecodeAsm is never called here (useAVX2 is false).
func gridDecodeAsm(t quant.Type, b []byte, q *[quant.QKK]int8, scv *gridScales) {
	panic("kernels: no AVX2 here")
}

// gridIntsAVX2 is never called here (useAVX2 is false).
func gridIntsAVX2(q *[quant.QKK]int8, x *int8, scv *gridScales) int32 {
	panic("kernels: no AVX2 here")
}

// gridInts4AVX2 is never called here (useAVX2 is false).
func gridInts4AVX2(q *[quant.QKK]int8, x *int8, stride int, scv *gridScales, out *[4]int32) {
	panic("kernels: no AVX2 here")
}

// gridQuadsAVX2 is never called here (useAVX2 is false).
func gridQuadsAVX2(q *[quant.QKK]int8, x *int8, out *[64]int32) {
	panic("kernels: no AVX2 here")
}

// gridIntsRows reports false: no AVX-512 VNNI here.
func gridIntsRows(q *[quant.QKK]int8, scv *gridScales, x *int8, xstride int, bsums *int16, n int, out *[rowsMost]int32) bool {
	return false
}
