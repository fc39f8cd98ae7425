package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DType is a tensor element type as spelled in safetensors headers.
type DType string

// The element types layerstream reads.
const (
	F32  DType = "F32"
	BF16 DType = "BF16"
	F16  DType = "F16"
)

// Size is the number of bytes of one element.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case BF16, F16:
		return 2
	}
	return 0
}

// ParseDType validates a safetensors dtype string.
func ParseDType(s string) (DType, error) {
	switch d := DType(s); d {
	case F32, BF16, F16:
		return d, nil
	}
	return "", fmt.Errorf("unsupported dtype %q (supported: F32, BF16, F16)", s)
}

// BF16ToF32 converts little-endian bfloat16 bytes to float32. len(dst) must be len(src)/2.
func BF16ToF32(dst []float32, src []byte) {
	_ = src[2*len(dst)-1]
	for i := range dst {
		dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
	}
}

// F32ToBF16 converts float32 values to little-endian bfloat16 bytes, rounding to nearest even.
func F32ToBF16(dst []byte, src []float32) {
	_ = dst[2*len(src)-1]
	for i, f := range src {
		binary.LittleEndian.PutUint16(dst[2*i:], Float32ToBF16Bits(f))
	}
}

// Float32ToBF16Bits rounds a float32 to the nearest bfloat16 (ties to even); NaN stays NaN.
func Float32ToBF16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet and non-zero.
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToF32 converts little-endian IEEE half-precision bytes to float32. len(dst) must be len(src)/2.
func F16ToF32(dst []float32, src []byte) {
	_ = src[2*len(dst)-1]
	for i := range dst {
		dst[i] = HalfToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
	}
}

// HalfToFloat32 decodes one IEEE 754 binary16 value.
func HalfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: value = mant * 2^-24.
		f := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// ToF32 converts raw little-endian tensor bytes of dtype d into float32 values.
func ToF32(dst []float32, src []byte, d DType) error {
	if len(src) != len(dst)*d.Size() {
		return fmt.Errorf("convert %s: %d bytes for %d elements", d, len(src), len(dst))
	}
	switch d {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case BF16:
		BF16ToF32(dst, src)
	case F16:
		F16ToF32(dst, src)
	default:
		return fmt.Errorf("convert: unsupported dtype %q", d)
	}
	return nil
}
