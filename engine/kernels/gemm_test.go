package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
)

// kernelPaths runs f once per kernel path this CPU has (AVX-512, AVX2, portable), with the others turned off.
func kernelPaths(t *testing.T, f func(t *testing.T)) {
	defer func(a, b, c bool) { useAVX512, useAVX512BF16, useAVX2 = a, b, c }(useAVX512, useAVX512BF16, useAVX2)
	if useAVX512 {
		t.Run("avx512", f)
	}
	useAVX512, useAVX512BF16 = false, false
	if useAVX2 {
		t.Run("avx2", f)
	}
	useAVX2 = false
	t.Run("portable", f)
}

// TestLinear: on every kernel path, Linear (f32 and bf16 weights) and LinearBF16 agree with a float64 product
// (LinearBF16: of the input rounded to bf16), add the bias, and gives every input row bit for bit what it gives that row alone, at shapes around
// the chunk, tile and group sizes (tails of each).
func TestLinear(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(9, 10))
		for _, in := range []int{1, 7, 16, 31, 32, 33, 40, 64, 100, 576} {
			for _, out := range []int{1, 7, 8, 9, 17, 24} {
				for _, rows := range []int{1, 2, 3, 4, 5, 7, 16} {
					checkLinear(t, rng, rows, in, out)
				}
			}
		}
		checkLinear(t, rng, 50, 2048, 40)
	})
}

func checkLinear(t *testing.T, rng *rand.Rand, rows, in, out int) {
	t.Helper()
	wf, wb := randomWeights(rng, in*out)
	x := make([]float32, rows*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	bias := make([]float32, out)
	for i := range bias {
		bias[i] = rng.Float32() - 0.5
	}
	xr := make([]float32, len(x))
	roundBF16(xr, x)
	for _, mode := range []string{"f32", "bf16", "bf16 inputs"} {
		name := fmt.Sprintf("%d rows, in %d, out %d, %s", rows, in, out, mode)
		linear := func(y, x []float32) {
			switch mode {
			case "f32":
				Linear(y, x, wf, bias, in)
			case "bf16":
				Linear(y, x, wb, bias, in)
			default:
				LinearBF16(y, x, wb, bias, in)
			}
		}
		y := make([]float32, rows*out)
		linear(y, x)
		for r := range rows {
			xs := x
			if mode == "bf16 inputs" {
				xs = xr
			}
			for o := range out {
				want, mag := float64(bias[o]), math.Abs(float64(bias[o]))
				for k := range in {
					p := float64(xs[r*in+k]) * float64(wf[o*in+k])
					if mode != "f32" {
						p = float64(xs[r*in+k]) * float64(wb[o*in+k].Float32())
					}
					want += p
					mag += math.Abs(p)
				}
				if got := float64(y[r*out+o]); math.Abs(got-want) > 1e-6*mag+1e-7 {
					t.Fatalf("%s: row %d output %d: %g, want %g", name, r, o, got, want)
				}
			}
			// The row alone (and starting elsewhere in memory) gives the same bits.
			one := make([]float32, out+1)
			linear(one[1:], append([]float32{0}, x[r*in:(r+1)*in]...)[1:])
			for o := range out {
				if math.Float32bits(one[1+o]) != math.Float32bits(y[r*out+o]) {
					t.Fatalf("%s: row %d output %d: %g in the batch, %g alone", name, r, o, y[r*out+o], one[1+o])
				}
			}
		}
	}
}

// TestGemmAVX512Exact: the AVX-512 tiles compute exactly the sums tileSum and tileSumBF16 describe (the order every output is
// summed in, whatever the rows beside it), VDPBF16PS included.
func TestGemmAVX512Exact(t *testing.T) {
	if !useAVX512 {
		t.Skip("no AVX-512 on this CPU")
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, in := range []int{5, 32, 33, 576, 1000} {
		rows, out := 7, 13
		wf, wb := randomWeights(rng, in*out)
		x := make([]float32, rows*in)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()*3))
		}
		y := make([]float32, rows*out)
		check := func(name string, want func(x []float32, o int) float32) {
			for r := range rows {
				for o := range out {
					if w := want(x[r*in:(r+1)*in], o); math.Float32bits(y[r*out+o]) != math.Float32bits(w) {
						t.Fatalf("%s, in %d, row %d output %d: %g, want %g", name, in, r, o, y[r*out+o], w)
					}
				}
			}
		}
		widened := make([]float32, len(wb))
		for i, v := range wb {
			widened[i] = v.Float32()
		}
		Linear(y, x, wf, nil, in)
		check("f32", func(x []float32, o int) float32 { return tileSum(x, wf[o*in:(o+1)*in]) })
		Linear(y, x, wb, nil, in)
		check("bf16", func(x []float32, o int) float32 { return tileSum(x, widened[o*in:(o+1)*in]) })
		if useAVX512BF16 {
			LinearBF16(y, x, wb, nil, in)
			check("bf16 inputs", func(x []float32, o int) float32 { return tileSumBF16(x, wb[o*in:(o+1)*in]) })
		}
	}
}

// tileSum is the AVX-512 f32 tiles' sum of x·w: lane l (of 16) accumulates x[k]·w[k] for k ≡ l (mod 16) in
// order, with fused multiply-adds; then lanes l and l+8 are added, l and l+4, l and l+2, l and l+1.
func tileSum(x, w []float32) float32 {
	var lanes [16]float32
	for k := range x {
		l := k % 16
		lanes[l] = float32(math.FMA(float64(x[k]), float64(w[k]), float64(lanes[l])))
	}
	return reduceLanes(lanes)
}

// tileSumBF16 is the VDPBF16PS tiles' sum of bf16(x)·w: lane l accumulates, per chunk of 32 elements, the
// product of elements 2l+1 and then that of 2l (each product exact, each addition rounded), then the lanes are
// reduced as in tileSum.
func tileSumBF16(x []float32, w []bfloat16.BFloat16) float32 {
	var lanes [16]float32
	p := func(k int) float32 {
		if k >= len(x) {
			return 0
		}
		return math.Float32frombits(uint32(bf16Bits(x[k]))<<16) * w[k].Float32()
	}
	for c := 0; c < len(x); c += 32 {
		for l := range 16 {
			lanes[l] += p(c + 2*l + 1)
			lanes[l] += p(c + 2*l)
		}
	}
	return reduceLanes(lanes)
}

func reduceLanes(s [16]float32) float32 {
	for h := 8; h >= 1; h /= 2 {
		for l := range h {
			s[l] += s[l+h]
		}
	}
	return s[0]
}

// TestBF16Rounding: the AVX-512 conversion and bf16Bits round alike (to nearest even, NaN kept), at ties,
// extremes and random values.
func TestBF16Rounding(t *testing.T) {
	vals := []float32{0, -0, 1, -1, 1.00390625, 1.01171875, 1.0078125, float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-39, 3.0000002}
	rng := rand.New(rand.NewPCG(1, 1))
	for len(vals) < 32*4 {
		vals = append(vals, math.Float32frombits(rng.Uint32()))
	}
	for _, v := range vals {
		b := bf16Bits(v)
		f := math.Float32frombits(uint32(b) << 16)
		if math.IsNaN(float64(v)) != math.IsNaN(float64(f)) {
			t.Fatalf("%g → %g", v, f)
		}
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			continue
		}
		// The nearest bf16 (ties to the even one), from the truncation and the next value up in magnitude.
		lo := math.Float32bits(v) &^ 0xffff
		hi := lo + 0x10000
		dlo := math.Abs(float64(v) - float64(math.Float32frombits(lo)))
		vhi := float64(math.Float32frombits(hi))
		if math.IsInf(vhi, 0) { // rounding up overflows: compare with 2¹²⁸, where the next value would be
			vhi = math.Copysign(math.Ldexp(1, 128), vhi)
		}
		dhi := math.Abs(float64(v) - vhi)
		want := uint16(lo >> 16)
		if dhi < dlo || dhi == dlo && want&1 == 1 {
			want = uint16(hi >> 16)
		}
		if math.Float32bits(v)&0x7f800000 == 0 { // denormal: flushed to a signed zero
			want = uint16(math.Float32bits(v)>>16) & 0x8000
		}
		if b != want {
			t.Errorf("%g (%#08x): %#04x, want %#04x", v, math.Float32bits(v), b, want)
		}
	}
	if !useAVX512BF16 {
		return
	}
	got := make([]uint16, len(vals))
	cvtBF16AVX512(&got[0], 64, &vals[0], len(vals)/32)
	for i, v := range vals {
		if want := bf16Bits(v); got[i] != want && !(math.IsNaN(float64(v)) && got[i]&0x7f80 == 0x7f80) {
			t.Errorf("%g (%#08x): VCVTNEPS2BF16 %#04x, bf16Bits %#04x", v, math.Float32bits(v), got[i], want)
		}
	}
}
