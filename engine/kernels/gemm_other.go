//go:build !amd64

package kernels

import "github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"

var useAVX512, useAVX512BF16 = false, false

func gemmF32(y, x, w []float32, rows, in, out, workers int) { panic("no AVX-512") }
func gemmF32BF16(y, x []float32, w []bfloat16.BFloat16, rows, in, out, workers int) {
	panic("no AVX-512")
}
func gemmBF16(y, x []float32, w []bfloat16.BFloat16, rows, in, out, workers int) { panic("no AVX-512") }

func cvtBF16AVX512(dst *uint16, step int, src *float32, chunks int) { panic("no AVX-512") }

func foldAVX512(p *byte, n int) uint64 { panic("no AVX-512") }
