package quant

import "math"

// halfTable maps every IEEE 754 binary16 bit pattern to its float32 value (exact: every half is a float32).
var halfTable = func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for h := range t {
		t[h] = halfToFloat32(uint16(h))
	}
	return &t
}()

// HalfToFloat32 decodes one IEEE 754 binary16 value.
func HalfToFloat32(h uint16) float32 { return halfTable[h] }

func halfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		// Zero or subnormal: mant × 2^-24, exact in float32.
		return math.Float32frombits(sign | math.Float32bits(float32(mant)*(1.0/(1<<24))))
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// Float32ToHalf rounds a float32 to the nearest binary16 (ties to even), as numpy's astype(float16) and the
// F16C instruction ggml uses do: overflow gives ±Inf, NaN stays NaN.
func Float32ToHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp > 127+15: // too large: Inf
		return sign | 0x7c00
	case exp >= 127-14: // normal half (may round up into the next binade or to Inf)
		h := uint32(exp-127+15)<<10 | mant>>13
		rest := mant & 0x1fff
		if rest > 0x1000 || (rest == 0x1000 && h&1 != 0) {
			h++
		}
		return sign | uint16(h)
	case exp >= 127-25: // subnormal half: shift the mantissa with its implicit bit
		m := mant | 0x800000
		shift := uint32(126 - exp) // bits dropped: the value is m × 2^(exp-150), a half subnormal h × 2^-24
		h := m >> shift
		rest := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rest > half || (rest == half && h&1 != 0) {
			h++
		}
		return sign | uint16(h)
	}
	return sign // underflow to ±0
}

// WidenHalves sets dst[i] to the float16 src[i] as float32 (exactly: every float16 is a float32) for the
// len(src) elements of src; the inverse of HalvesClamped for values within range.
func WidenHalves(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = HalfToFloat32(h)
	}
}

// HalfMax is the largest finite float16, 65504: HalvesClamped clamps what lies beyond it to it.
const HalfMax = 65504

// HalvesClamped rounds each of src to the nearest float16 (ties to even) into dst (len(src) elements). A value
// that would round to an infinity (|v| ≥ 65520, an infinity included) becomes ±HalfMax and is counted in
// clamped; NaN stays NaN.
func HalvesClamped(dst []uint16, src []float32) (clamped int) {
	dst = dst[:len(src)]
	for i, v := range src {
		h := Float32ToHalf(v)
		if h&0x7fff == 0x7c00 { // ±Inf
			h, clamped = h&0x8000|0x7bff, clamped+1
		}
		dst[i] = h
	}
	return clamped
}

// RoundHalfClamped rounds x in place to float16 precision as HalvesClamped stores it (clamped at ±HalfMax), returning
// the number clamped: the values a float16 cache will give back, for the positions a pass computes and attends
// to before they are read from the cache.
func RoundHalfClamped(x []float32) (clamped int) {
	for i, v := range x {
		h := Float32ToHalf(v)
		if h&0x7fff == 0x7c00 {
			x[i], clamped = float32(math.Copysign(HalfMax, float64(v))), clamped+1
			continue
		}
		x[i] = HalfToFloat32(h)
	}
	return clamped
}
