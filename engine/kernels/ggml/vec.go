package ggml

import "math"

// FMA32 is a·b + c rounded once to float32, as a fused multiply-add instruction computes it. The product is
// exact in float64; the sum is rounded to float64 with its last bit forced odd when inexact ("round to odd"),
// which makes the final rounding to float32 the correct one.
func FMA32(a, b, c float32) float32 {
	p, q := float64(a)*float64(b), float64(c)
	s := p + q
	v := s - p
	e := (p - (s - v)) + (q - v) // the rounding error of s (TwoSum)
	if e != 0 && s-s == 0 {      // inexact and finite
		bits := math.Float64bits(s)
		if bits&1 == 0 {
			if (e > 0) == (s > 0) {
				bits++
			} else {
				bits--
			}
			s = math.Float64frombits(bits)
		}
	}
	return float32(s)
}

// reduce16 sums 16 lanes in the order of GCC's _mm512_reduce_add_ps: the halves, then their halves, then the
// pairs (0+2, 1+3), then those two.
func reduce16(v *[16]float32) float32 {
	var t8 [8]float32
	for i := range t8 {
		t8[i] = v[i] + v[i+8]
	}
	var t4 [4]float32
	for i := range t4 {
		t4[i] = t8[i] + t8[i+4]
	}
	return (t4[0] + t4[2]) + (t4[1] + t4[3])
}

// Expf is one lane of ggml's vectorised exponential (ggml_v_expf, AVX-512): a degree-5 polynomial after a
// reduction by ln 2, within 1.5 ulp; below -103.97 it is 0, above 88.38 +Inf.
func Expf(x float32) float32 {
	const r = 0x1.8p23
	z := FMA32(x, 0x1.715476p+0, r)
	n := z - r
	b := FMA32(-n, 0x1.7f7d1cp-20, FMA32(-n, 0x1.62e4p-1, x))
	u := b * b
	j := FMA32(FMA32(FMA32(0x1.0e4020p-7, b, 0x1.573e2ep-5), u, FMA32(0x1.555e66p-3, b, 0x1.fffdb6p-2)), u,
		FMA32(0x1.ffffecp-1, b, 1))
	if !(float32(math.Abs(float64(n))) > 192) { // ordered: a NaN n takes the scaled branch, as VCMPPS _CMP_GT_OQ
		return scalef(j, n)
	}
	if n <= 0 {
		return 0
	}
	return float32(math.Inf(1))
}

// scalef is VSCALEFPS for an integral n: j·2ⁿ rounded once.
func scalef(j, n float32) float32 {
	if j != j || n != n {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(float64(j), int(n)))
}

// LibcExpf is the C library's expf, which ggml calls outside its vector loops: e^x rounded to float32. glibc's
// rounds a double-precision approximation (within 0.502 ulp), so it can differ from the correctly rounded value
// only for arguments next to a halfway point between two floats; it equals it on every router score of the MoE
// fixtures (TestLlamaCppArithmeticMoE).
func LibcExpf(x float32) float32 { return float32(math.Exp(float64(x))) }

// Silu is one lane of ggml_v_silu: x / (1 + Expf(-x)).
func Silu(x float32) float32 { return x / (1 + Expf(0-x)) }

// Silus sets dst[i] = Silu(src[i]).
func Silus(dst, src []float32) { lanewise(dst, src, siluAVX512, Silu) }

// expfs sets dst[i] = Expf(src[i]).
func expfs(dst, src []float32) { lanewise(dst, src, expfAVX512, Expf) }

// lanewise sets dst[i] = f(src[i]): the whole groups of 16 with asm, f's AVX-512 twin, where the CPU has it; the
// rest with f.
func lanewise(dst, src []float32, asm func(dst, src *float32, n int), f func(float32) float32) {
	n := 0
	if useAVX512 {
		n = len(src) &^ 15
		if n > 0 {
			asm(&dst[0], &src[0], n)
		}
	}
	for i := n; i < len(src); i++ {
		dst[i] = f(src[i])
	}
}

// SwiGLUWidth reports whether Silus then a product give ggml_vec_swiglu_f32's results for rows of n values: its
// AVX-512 loop covers whole groups of 16, and it computes a shorter tail with the C library's expf, which is not
// reproduced here.
func SwiGLUWidth(n int) bool { return n%16 == 0 }

// VecDot is ggml_vec_dot_f32 (AVX-512): four accumulators of 16 lanes over steps of 64 elements (fused
// multiply-adds), summed 0+2, 1+3, then together, then across lanes (reduce16). The C loop over the last n%64
// elements adds x[i]·y[i] to the sum one by one, which GCC compiles as products of 16, then 8, elements at a time,
// each product rounded before its addition, and fused multiply-adds for the last n%8.
func VecDot(x, y []float32) float32 {
	n := len(x)
	np := n &^ 63
	var s float32
	if useAVX512 && np > 0 {
		s = vecDot64AVX512(&x[0], &y[0], np)
	} else {
		s = vecDot64(x[:np], y[:np])
	}
	i := np
	for ; i+16 <= n; i += 16 {
		for l := range 16 {
			s += float32(x[i+l] * y[i+l]) // rounded: never fused
		}
	}
	if i+8 <= n {
		for l := range 8 {
			s += float32(x[i+l] * y[i+l]) // rounded: never fused
		}
		i += 8
	}
	for ; i < n; i++ {
		s = FMA32(x[i], y[i], s)
	}
	return s
}

// vecDot64 is VecDot's steps of 64 and their reduction (len(x) a multiple of 64), in Go.
func vecDot64(x, y []float32) float32 {
	np := len(x)
	var acc [4][16]float32
	for i := 0; i < np; i += 64 {
		for j := range 4 {
			xs, ys := x[i+16*j:i+16*j+16], y[i+16*j:i+16*j+16]
			for l := range 16 {
				acc[j][l] = FMA32(xs[l], ys[l], acc[j][l])
			}
		}
	}
	for l := range 16 {
		acc[0][l] += acc[2][l]
		acc[1][l] += acc[3][l]
	}
	for l := range 16 {
		acc[0][l] += acc[1][l]
	}
	return reduce16(&acc[0])
}

// VecDotF16 is ggml_vec_dot_f16 (AVX-512 without AVX512-FP16) of two rows of float16 values, given widened to
// float32: the steps of 64 as VecDot's, whose lane sum and the products of the last n%64 elements (exact: two
// float16 values) are added in double precision.
func VecDotF16(x, y []float32) float32 {
	n := len(x)
	np := n &^ 63
	s := float64(VecDot(x[:np], y[:np]))
	for i := np; i < n; i++ {
		s += float64(float32(x[i] * y[i]))
	}
	return float32(s)
}

// Dot16 is one element of llamafile's tinyBLAS product (AVX-512, float32): 16 lanes, each a chain of fused
// multiply-adds over the elements l, l+16, l+32, …, summed across lanes (reduce16). len(x) must be a multiple of
// 16 (tinyBLAS declines other lengths).
func Dot16(x, y []float32) float32 {
	if useAVX512 && len(x) > 0 {
		return dot16AVX512(&x[0], &y[0], len(x))
	}
	return dot16(x, y)
}

// dot16 is Dot16 in Go.
func dot16(x, y []float32) float32 {
	var acc [16]float32
	for i := 0; i < len(x); i += 16 {
		for l := range 16 {
			acc[l] = FMA32(x[i+l], y[i+l], acc[l])
		}
	}
	return reduce16(&acc)
}

// RMSNorm is ggml's rms_norm followed by the multiplication by w (fused or not, the same operations): the
// squares summed in double precision one after the other, mean and scale in float32, then x·scale·w.
func RMSNorm(y, x, w []float32, eps float32) {
	h := len(w)
	for r := 0; r < len(x)/h; r++ {
		xr, yr := x[r*h:(r+1)*h], y[r*h:(r+1)*h]
		sum := 0.0
		for _, v := range xr {
			sum += float64(v * v)
		}
		mean := float32(sum / float64(h))
		scale := 1 / float32(math.Sqrt(float64(mean+eps)))
		for i, v := range xr {
			yr[i] = v * scale * w[i]
		}
	}
}

// SoftMax is ggml's soft_max_ext for one row without ALiBi or sinks: w = x·scale, or -Inf where masked(i)
// (masked nil: nowhere), the maximum, Expf(w - max) in groups of 16 whose lane sums (reduce16) are added in double
// precision, the values past the last group (ggml_vec_soft_max_f32's scalar tail: a router's few experts) with the
// C library's expf (LibcExpf) added one by one, then every value times float32(1/sum). dst and w may be x.
func SoftMax(dst, x []float32, scale float32, masked func(i int) bool) {
	m := float32(math.Inf(-1))
	for i, v := range x {
		v *= scale
		if masked != nil && masked(i) {
			v = float32(math.Inf(-1))
		}
		dst[i] = v
		m = max(m, v)
	}
	for i := range dst {
		dst[i] -= m
	}
	n := len(dst) &^ 15
	expfs(dst[:n], dst[:n])
	sum := 0.0
	for i := 0; i < n; i += 16 {
		sum += float64(reduce16((*[16]float32)(dst[i : i+16])))
	}
	for i := n; i < len(dst); i++ {
		dst[i] = LibcExpf(dst[i])
		sum += float64(dst[i])
	}
	inv := float32(1 / sum)
	for i := range dst {
		dst[i] *= inv
	}
}
