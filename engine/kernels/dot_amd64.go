package kernels

import (
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	"golang.org/x/sys/cpu"
)

// useAVX2 selects the AVX2/FMA dot products (dot_amd64.s). BenchmarkLinear on the 2-core VM, [2048×2048]
// weights, portable Go → AVX2: f32 1 row 4.5 → 9.8 GFLOP/s, 16 rows 3.4 → 32, 128 rows 3.0 → 42; bf16 1 row
// 2.0 → 27. The three-row kernels (a weight row loaded, and widened, once for three input rows) took 16 rows
// to 51 GFLOP/s for f32 (from 32) and 47 for bf16 (from 29). Every host kernel sums each row exactly as the
// one-row dot product does, so a sequence computes the same values alone and in a batch (the sums are ordered
// differently from the portable loops, within float32 rounding of them).
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dotF32AVX2(a, b []float32) float32

//go:noescape
func dotBF16AVX2(a []float32, b []bfloat16.BFloat16) float32

// DotF32 is the dot product of two equally long float32 vectors.
func DotF32(a, b []float32) float32 {
	if useAVX2 {
		return dotF32AVX2(a, b[:len(a)])
	}
	return dotF32Go(a, b)
}

// DotBF16 is the dot product of a float32 vector with a bfloat16 one, widened exactly on the fly.
func DotBF16(a []float32, b []bfloat16.BFloat16) float32 {
	if useAVX2 {
		return dotBF16AVX2(a, b[:len(a)])
	}
	return dotBF16Go(a, b)
}

//go:noescape
func dotBF16x3AVX2(x []float32, n, triples int, b []bfloat16.BFloat16, y []float32, stride int)

// dotBF16x3 sets y[r·stride] = DotBF16(x[r·n:(r+1)·n], b) for the first 3·triples rows of x (n = len(b)), bit
// for bit, loading and widening b once per three rows: the batched decode step's kernel (three sequences per
// pass over a weight row, every triple in one call).
func dotBF16x3(x []float32, b []bfloat16.BFloat16, y []float32, stride, triples int) {
	n := len(b)
	if !rowsFit(len(x), n, len(y), stride, triples) {
		return
	}
	if useAVX2 {
		dotBF16x3AVX2(x, n, triples, b, y, stride)
		return
	}
	dotRowsGo(x, b, y, stride, 3*triples, dotBF16Go)
}

//go:noescape
func dotF32x3AVX2(x []float32, n, triples int, b []float32, y []float32, stride int)

// dotF32x3 sets y[r·stride] = DotF32(x[r·n:(r+1)·n], b) for the first 3·triples rows of x (n = len(b)), bit for
// bit, loading b once per three rows.
func dotF32x3(x, b, y []float32, stride, triples int) {
	n := len(b)
	if !rowsFit(len(x), n, len(y), stride, triples) {
		return
	}
	if useAVX2 {
		dotF32x3AVX2(x, n, triples, b, y, stride)
		return
	}
	dotRowsGo(x, b, y, stride, 3*triples, dotF32Go)
}

//go:noescape
func axpyF32AVX2(y []float32, a float32, x []float32)

// AxpyF32 adds a·x to y (len(x) ≥ len(y)): attention's weighted sum of values.
func AxpyF32(y []float32, a float32, x []float32) {
	if useAVX2 {
		axpyF32AVX2(y, a, x[:len(y)])
		return
	}
	axpyF32Go(y, a, x)
}

// rowsFit reports whether the three-row kernels' arguments have rows to compute (triples ≥ 1), and panics
// when x (3·triples rows of n) or y (a row every stride) is too short for them: the kernels do not check.
func rowsFit(lenX, n, lenY, stride, triples int) bool {
	if triples < 1 {
		return false
	}
	if rows := 3 * triples; lenX < rows*n || lenY <= (rows-1)*stride {
		panic("engine: three-row dot product past the end of its rows")
	}
	return true
}
