package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
)

// TestDotKernels: the dot products the host kernels use agree with a float64 sum at every length, tails
// included, and bf16 elements are widened exactly.
func TestDotKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 3, 7, 8, 9, 31, 32, 33, 40, 63, 64, 100, 2048, 2051} {
		a := make([]float32, n)
		b := make([]float32, n+5) // longer than a: only len(a) elements count
		bb := make([]bfloat16.BFloat16, n+5)
		for i := range b {
			b[i] = rng.Float32()*2 - 1
			bb[i] = bfloat16.FromFloat32(b[i])
		}
		for i := range a {
			a[i] = rng.Float32()*2 - 1
		}
		var want, wantBF, mag float64
		for i := range a {
			want += float64(a[i]) * float64(b[i])
			wantBF += float64(a[i]) * float64(bb[i].Float32())
			mag += math.Abs(float64(a[i]) * float64(b[i]))
		}
		tol := 1e-6 * (mag + 1)
		for _, k := range []struct {
			name      string
			got, want float64
		}{
			{"dotF32", float64(DotF32(a, b)), want},
			{"dotF32Go", float64(dotF32Go(a, b)), want},
			{"dotBF16", float64(DotBF16(a, bb)), wantBF},
			{"dotBF16Go", float64(dotBF16Go(a, bb)), wantBF},
		} {
			if math.Abs(k.got-k.want) > tol {
				t.Errorf("%s, length %d: %g, want %g (±%g)", k.name, n, k.got, k.want, tol)
			}
		}
		checkThreeRowKernels(t, rng, a, b[:n], bb[:n])
	}
}

// checkThreeRowKernels: the three-row kernels give each row exactly what dotBF16 and dotF32 give it alone (a
// sequence decodes the same alone and in a batch), for one triple and several, into strided outputs; b and bb
// are the weight row (len(a) elements) as f32 and bf16.
func checkThreeRowKernels(t *testing.T, rng *rand.Rand, a, b []float32, bb []bfloat16.BFloat16) {
	t.Helper()
	n := len(a)
	for _, triples := range []int{1, 2} {
		rows, stride := 3*triples, 3
		x := make([]float32, rows*n+3) // longer than the rows: only rows·n elements count
		for i := range x {
			x[i] = rng.Float32()*200 - 100
		}
		y, yf := make([]float32, rows*stride), make([]float32, rows*stride)
		for i := range y {
			y[i], yf[i] = -1, -1 // the kernels must write only every stride-th element
		}
		dotBF16x3(x, bb, y, stride, triples)
		dotF32x3(x, b, yf, stride, triples)
		for i := range y {
			r, written := i/stride, i%stride == 0
			if !written {
				if y[i] != -1 || yf[i] != -1 {
					t.Fatalf("%d triples, length %d: element %d between rows written", triples, n, i)
				}
				continue
			}
			xr := x[r*n : (r+1)*n]
			if want := DotBF16(xr, bb); math.Float32bits(y[i]) != math.Float32bits(want) {
				t.Errorf("dotBF16x3 (%d triples) row %d, length %d: %g, dotBF16 gives %g", triples, r, n, y[i], want)
			}
			if want := DotF32(xr, b); math.Float32bits(yf[i]) != math.Float32bits(want) {
				t.Errorf("dotF32x3 (%d triples) row %d, length %d: %g, dotF32 gives %g", triples, r, n, yf[i], want)
			}
		}
	}
}

// TestAxpy: y += a·x agrees with a float64 computation at every length, tails included, in the assembly and
// the portable kernel.
func TestAxpy(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 64, 100} {
		x := make([]float32, n+3) // longer than y: only len(y) elements count
		y0 := make([]float32, n)
		for i := range x {
			x[i] = rng.Float32()*2 - 1
		}
		for i := range y0 {
			y0[i] = rng.Float32()*2 - 1
		}
		a := rng.Float32()*4 - 2
		for name, f := range map[string]func([]float32, float32, []float32){"AxpyF32": AxpyF32, "axpyF32Go": axpyF32Go} {
			y := slices.Clone(y0)
			f(y, a, x)
			for i := range y {
				want := float64(y0[i]) + float64(a)*float64(x[i])
				if math.Abs(float64(y[i])-want) > 1e-6*(math.Abs(want)+1) {
					t.Fatalf("%s, length %d, element %d: %g, want %g", name, n, i, y[i], want)
				}
			}
		}
	}
}

// TestSiLUChunks: SiLU covers every element, whatever the split over workers (lengths around the 256-element
// chunks and the parallel threshold), within a few ulps of the float64 formula on every kernel path.
func TestSiLUChunks(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		for _, n := range []int{0, 1, 255, 256, 300, 32767, 32768, 40001} {
			x, y := make([]float32, n), make([]float32, n)
			for i := range x {
				x[i] = float32(i%197)/5 - 20
			}
			SiLU(y, x)
			for i, v := range x {
				want := float64(v) / (1 + math.Exp(-float64(v)))
				if math.Abs(float64(y[i])-want) > 4e-7*math.Abs(want)+1e-30 {
					t.Fatalf("length %d, element %d (%g): %g, want %g", n, i, v, y[i], want)
				}
			}
		}
	})
}

// TestGELUTanh: GELUTanh is within a few ulps of the float64 formula on every kernel path (the AVX-512 one
// computes it as x·sigmoid(2u)), from large negative to large positive inputs.
func TestGELUTanh(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		n := 5003
		x, y := make([]float32, n), make([]float32, n)
		for i := range x {
			x[i] = float32(i-n/2) / 200
		}
		GELUTanh(y, x)
		for i, v := range x {
			f := float64(v)
			want := 0.5 * f * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(f+0.044715*f*f*f)))
			if math.Abs(float64(y[i])-want) > 1e-6*math.Abs(want)+1e-12 {
				t.Fatalf("element %d (%g): %g, want %g", i, v, y[i], want)
			}
		}
	})
}

// TestFold: Fold is the XOR of a buffer's 8-byte words (the last partial one zero-padded), on every path,
// whatever its length.
func TestFold(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(31, 32))
		for _, n := range []int{0, 1, 7, 8, 255, 256, 257, 1000, 4096} {
			b := make([]byte, n)
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			var want uint64
			for i, c := range b {
				want ^= uint64(c) << (8 * (i % 8))
			}
			if got := Fold(b); got != want {
				t.Fatalf("length %d: %#x, want %#x", n, got, want)
			}
		}
	})
}
