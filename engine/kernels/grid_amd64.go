package kernels

import "github.com/layerstream/layerstream/quant"

// gridIntsAVX2 is gridIntsGo with AVX2 (grid_amd64.s): x points at the 256 activations.
//
//go:noescape
func gridIntsAVX2(q *[quant.QKK]int8, x *int8, sc *[16]int32) int32
