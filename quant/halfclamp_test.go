package quant

import (
	"math"
	"slices"
	"testing"
)

// TestHalvesClamped checks the rounding and the clamping: a value that would become an infinity is stored as the
// largest float16 of its sign and counted; RoundHalfClamped gives back what the cache will.
func TestHalvesClamped(t *testing.T) {
	src := []float32{1, -2.5, 1 + 1.0/2048, 1 + 3.0/2048, 65504, 65519.99, 65520, -1e6, float32(math.Inf(1)), 6e-8, float32(math.NaN())}
	want := []uint16{0x3c00, 0xc100, 0x3c00, 0x3c02, 0x7bff, 0x7bff, 0x7bff, 0xfbff, 0x7bff, 0x0001, 0x7e00}
	dst := make([]uint16, len(src))
	if n := HalvesClamped(dst, src); n != 3 || !slices.Equal(dst, want) {
		t.Fatalf("HalfFromF32 = %#04x, %d clamped; want %#04x, 3", dst, n, want)
	}
	x := slices.Clone(src)
	if n := RoundHalfClamped(x); n != 3 {
		t.Fatalf("RoundHalf clamped %d, want 3", n)
	}
	for i, v := range x {
		if w := HalfToFloat32(want[i]); v != w && !(v != v && w != w) {
			t.Errorf("RoundHalfClamped(%g) = %g, want %g", src[i], v, w)
		}
	}
}

// TestWidenHalves checks WidenHalves against known float16 values, a subnormal, an infinity and a NaN.
func TestWidenHalves(t *testing.T) {
	src := []uint16{0x3c00, 0xc100, 0x3c02, 0x7bff, 0x0001, 0xfc00, 0x7e00}
	want := []float32{1, -2.5, 1 + 2.0/1024, 65504, 0x1p-24, float32(math.Inf(-1)), float32(math.NaN())}
	got := make([]float32, len(src)+1)
	got[len(src)] = 42
	WidenHalves(got, src)
	for i, w := range want {
		if v := got[i]; v != w && !(v != v && w != w) {
			t.Errorf("WidenHalves(%#04x) = %g, want %g", src[i], v, w)
		}
	}
	if got[len(src)] != 42 {
		t.Errorf("WidenHalves wrote past len(src)")
	}
}
