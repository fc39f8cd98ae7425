package ggml

import "math"

// The C library's float sine and cosine, which ggml's rotary embeddings call (cosf, sinf): glibc ≥ 2.28 on
// x86-64 computes them with the algorithm of Arm's optimized-routines (a polynomial in double precision after a
// reduction by π/2), in the variant built for CPUs with fused multiply-add, which its loader picks on any x86-64
// CPU with FMA and AVX2. The results are within 0.56 ulp of the true values but not always the nearest float:
// rounding math.Cos to float32 gives another value for about 2% of a rotary table's angles, which is enough to
// part from llama.cpp's tokens. Sinf and Cosf give glibc's results bit for bit (checked against libm on 2.2
// million angles by TestSinCosMatchGlibc).

// sincosPoly is one set of the reduction and polynomial constants; the second negates the cosine polynomial.
type sincosPoly struct {
	sign           [4]float64 // sign of the sine per quadrant
	hpiInv, hpi    float64    // 2/π·2²⁴ (the quadrant lands in bits 24..31) and π/2
	c0, c1, c2, c3 float64
	c4, s1, s2, s3 float64
}

var sincosPolys = [2]sincosPoly{
	{
		sign: [4]float64{1, -1, -1, 1}, hpiInv: 0x1.45F306DC9C883p+23, hpi: 0x1.921FB54442D18p0,
		c0: 0x1p0, c1: -0x1.ffffffd0c621cp-2, c2: 0x1.55553e1068f19p-5, c3: -0x1.6c087e89a359dp-10,
		c4: 0x1.99343027bf8c3p-16, s1: -0x1.555545995a603p-3, s2: 0x1.1107605230bc4p-7, s3: -0x1.994eb3774cf24p-13,
	},
	{
		sign: [4]float64{1, -1, -1, 1}, hpiInv: 0x1.45F306DC9C883p+23, hpi: 0x1.921FB54442D18p0,
		c0: -0x1p0, c1: 0x1.ffffffd0c621cp-2, c2: -0x1.55553e1068f19p-5, c3: 0x1.6c087e89a359dp-10,
		c4: -0x1.99343027bf8c3p-16, s1: -0x1.555545995a603p-3, s2: 0x1.1107605230bc4p-7, s3: -0x1.994eb3774cf24p-13,
	},
}

// invPiO4 holds 4/π (2/π's hexadecimal digits A2F9836E…) in overlapping 32-bit windows 8 bits apart, for the
// exact reduction of large arguments.
var invPiO4 = [24]uint32{
	0xa2, 0xa2f9, 0xa2f983, 0xa2f9836e, 0xf9836e4e, 0x836e4e44, 0x6e4e4415, 0x4e441529, 0x441529fc, 0x1529fc27,
	0x29fc2757, 0xfc2757d1, 0x2757d1f5, 0x57d1f534, 0xd1f534dd, 0xf534ddc0, 0x34ddc0db, 0xddc0db62, 0xc0db6295,
	0xdb629599, 0x6295993c, 0x95993c43, 0x993c4390, 0x3c439041,
}

// top12 is the exponent field of |x| with the top 3 bits of its mantissa: the thresholds below compare by it.
func top12(x float32) uint32 { return math.Float32bits(x) >> 20 & 0x7ff }

var (
	top12PiO4  = top12(float32(0x1.921FB54442D18p-1))
	top12Tiny  = top12(0x1p-12)
	top12Large = top12(120)
	top12Inf   = top12(float32(math.Inf(1)))
)

// poly evaluates the sine (even quadrant) or cosine (odd) polynomial at the reduced x (x2 = x·x), each
// a + b·c fused as the FMA build of the C code is.
func (p *sincosPoly) poly(x, x2 float64, quadrant int) float32 {
	if quadrant&1 == 0 {
		x3 := x * x2
		s1 := math.FMA(x2, p.s3, p.s2)
		x7 := x3 * x2
		s := math.FMA(x3, p.s1, x)
		return float32(math.FMA(x7, s1, s))
	}
	x4 := x2 * x2
	c2 := math.FMA(x2, p.c4, p.c3)
	c1 := math.FMA(x2, p.c1, p.c0)
	x6 := x4 * x2
	c := math.FMA(x4, p.c2, c1)
	return float32(math.FMA(x6, c2, c))
}

// reduceMedium reduces x (|x| < 120) to [-π/4, π/4] and its quadrant with one fused multiply-subtract.
func reduceMedium(x float64) (float64, int) {
	r := x * sincosPolys[0].hpiInv
	n := (int32(r) + 0x800000) >> 24
	return math.FMA(-float64(n), sincosPolys[0].hpi, x), int(n)
}

// reduceLarge reduces |x| ≥ 120 (given as its bits) exactly, in 2.62 fixed point from a 32×96-bit product with
// 4/π, to [-π/4, π/4] and its quadrant.
func reduceLarge(xi uint32) (float64, int) {
	arr := invPiO4[xi>>26&15:]
	shift := xi >> 23 & 7
	xi = (xi&0xffffff | 0x800000) << shift
	lo := uint64(xi * arr[0]) // a 32-bit product: only its low word counts
	mid := uint64(xi) * uint64(arr[4])
	hi := uint64(xi) * uint64(arr[8])
	res := (hi>>32 | lo<<32) + mid
	n := (res + 1<<61) >> 62
	res -= n << 62
	return float64(int64(res)) * 0x1.921FB54442D18p-62, int(n)
}

// sincos is Sinf (cos false) or Cosf (cos true).
func sincos(y float32, cos bool) float32 {
	x := float64(y)
	odd := 0
	if cos {
		odd = 1
	}
	switch t := top12(y); {
	case t < top12PiO4:
		if t < top12Tiny {
			if cos {
				return 1
			}
			return y
		}
		return sincosPolys[0].poly(x, x*x, odd)
	case t < top12Large:
		r, n := reduceMedium(x)
		p := &sincosPolys[n>>1&1]
		r *= p.sign[n&3]
		return p.poly(r, r*r, n^odd)
	case t < top12Inf:
		xi := math.Float32bits(y)
		r, n := reduceLarge(xi)
		q := n + int(xi>>31)
		p := &sincosPolys[q>>1&1]
		r *= p.sign[q&3]
		return p.poly(r, r*r, n^odd)
	}
	return float32(math.NaN())
}

// Sinf is glibc's sinf (x86-64, FMA build) bit for bit.
func Sinf(x float32) float32 { return sincos(x, false) }

// Cosf is glibc's cosf (x86-64, FMA build) bit for bit.
func Cosf(x float32) float32 { return sincos(x, true) }
