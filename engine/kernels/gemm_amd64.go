package kernels

import (
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"golang.org/x/sys/cpu"
)

//go:generate go run gen_asm.go

// useAVX512 selects the AVX-512 float32 tile kernel (gemm_amd64.s), useAVX512BF16 the bf16 one (VDPBF16PS).
var (
	useAVX512     = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL
	useAVX512BF16 = useAVX512 && cpu.X86.HasAVX512BF16
)

// permIdx gathers a tile row's eight sums (lanes 0 and 2 of each 128-bit lane after the reduction) in order.
var permIdx = [16]int32{0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15}

//go:noescape
func gemmF32AVX512(x *float32, xs, xc, xt, rows int, w *float32, ws, wc, chunks int, tail uint64, y *float32, ldy int)

//go:noescape
func gemmF32RowsAVX512(x *float32, xs, xc, rows int, w *float32, ws, wc, n, chunks int, tail uint64, y *float32, ldy int)

//go:noescape
func gemmF32BF16AVX512(x *float32, xs, xc, xt, rows int, w *uint16, ws, wc, chunks int, tail uint64, y *float32, ldy int)

//go:noescape
func gemmF32BF16RowsAVX512(x *float32, xs, xc, rows int, w *uint16, ws, wc, n, chunks int, tail uint64, y *float32, ldy int)

//go:noescape
func gemmF32F16AVX512(x *float32, xs, xc, xt, rows int, w *uint16, ws, wc, chunks int, tail uint64, y *float32, ldy int)

//go:noescape
func gemmBF16AVX512(x *uint16, xs, xc, xt, rows int, w *uint16, ws, wc, chunks int, tail uint64, y *float32, ldy int)

//go:noescape
func gemmBF16RowsAVX512(x *uint16, xs, xc, rows int, w *uint16, ws, wc, n, chunks int, tail uint64, y *float32, ldy int)

//go:noescape
func foldAVX512(p *byte, n int) uint64

//go:noescape
func cvtBF16AVX512(dst *uint16, step int, src *float32, chunks int)

// gemmF32 is y [rows, out] = x [rows, in] · w [out, in]ᵀ on the AVX-512 tiles (16 elements per chunk).
func gemmF32(y, x, w []float32, rows, in, out, workers int) {
	gemmTiles(y, x, w, rows, in, out, workers, 16, gemmF32AVX512, gemmF32RowsAVX512, putF32)
}

// gemmF32BF16 is y [rows, out] = x [rows, in] · w [out, in]ᵀ with bf16 weights widened exactly, on the
// AVX-512 tiles (16 elements per chunk).
func gemmF32BF16(y, x []float32, w []bfloat16.BFloat16, rows, in, out, workers int) {
	gemmTiles(y, x, bf16Bits16(w), rows, in, out, workers, 16, gemmF32BF16AVX512, gemmF32BF16RowsAVX512, putF32)
}

// bf16Bits16 is w's elements as their bits.
func bf16Bits16(w []bfloat16.BFloat16) []uint16 {
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(w))), len(w))
}

// gemmBF16 is y [rows, out] = bf16(x) [rows, in] · w [out, in]ᵀ on the VDPBF16PS tiles (32 elements per
// chunk): x is rounded to bf16 as it is packed.
func gemmBF16(y, x []float32, w []bfloat16.BFloat16, rows, in, out, workers int) {
	gemmTiles(y, x, bf16Bits16(w), rows, in, out, workers, 32, gemmBF16AVX512, gemmBF16RowsAVX512, func(dst []uint16, step int, src []float32, chunks int) {
		if chunks > 0 {
			_, _ = dst[(chunks-1)*step+31], src[chunks*32-1]
			cvtBF16AVX512(&dst[0], step*2, &src[0], chunks)
		}
	})
}
