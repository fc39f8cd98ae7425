package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	"github.com/layerstream/layerstream/quant"
)

// DType is a tensor element type as spelled in safetensors headers, or a quantized block type as ggml names it.
type DType string

// The element types layerstream reads.
const (
	F32  DType = "F32"
	BF16 DType = "BF16"
	F16  DType = "F16"
	// U8 are raw bytes: only the halves of an MXFP4 pair (FusedExperts.Scales), which Open pairs into MXFP4
	// tensors; Open refuses any other. It has no quant type.
	U8 DType = "U8"
	// MXFP4 is ggml's MXFP4 block type (quant.MXFP4): gpt-oss's experts.
	MXFP4 DType = "MXFP4"
)

// The quantized block types (ggml's formats, see package quant): a tensor of one of these is stored row by row,
// each row (the last dimension) a whole number of blocks. Shards and GGUF files hold them; safetensors do not.
const (
	Q8_0 DType = "Q8_0"
	Q4_0 DType = "Q4_0"
	Q4_1 DType = "Q4_1"
	Q5_0 DType = "Q5_0"
	Q5_1 DType = "Q5_1"
	Q2_K DType = "Q2_K"
	Q3_K DType = "Q3_K"
	Q4_K DType = "Q4_K"
	Q5_K DType = "Q5_K"
	Q6_K DType = "Q6_K"
	// IQ4_NL and IQ4_XS index a 16-value non-linear grid (quant.IQ4Values).
	IQ4_NL DType = "IQ4_NL"
	IQ4_XS DType = "IQ4_XS"
	// The codebook i-quants index lattice codebooks of 8 (IQ3: 4) weights, with signs and small scales
	// (quant.GridInts).
	IQ3_S   DType = "IQ3_S"
	IQ3_XXS DType = "IQ3_XXS"
	IQ2_S   DType = "IQ2_S"
	IQ2_XS  DType = "IQ2_XS"
	IQ2_XXS DType = "IQ2_XXS"
	IQ1_M   DType = "IQ1_M"
	IQ1_S   DType = "IQ1_S"
)

// Size is the number of bytes of one element; 0 for a quantized block type (see TensorBytes).
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case BF16, F16:
		return 2
	case U8:
		return 1
	}
	return 0
}

// Quant returns the quant package's type of d (every DType but U8 has one).
func (d DType) Quant() (quant.Type, bool) {
	t, err := quant.Parse(string(d))
	return t, err == nil
}

// Quantized reports whether d is a block type.
func (d DType) Quantized() bool {
	t, ok := d.Quant()
	return ok && t.Quantized()
}

// torchNames are torch's names of the float dtypes, as config.json's dtype (torch_dtype) spells them.
var torchNames = map[DType]string{F32: "float32", BF16: "bfloat16", F16: "float16"}

// ParseTorchDType reads a torch dtype name as config.json's dtype (torch_dtype) holds it: float32 (float),
// bfloat16 or float16 (half), in any case, with or without "torch."; ok is false for any other.
func ParseTorchDType(s string) (DType, bool) {
	switch strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "torch.") {
	case "float32", "float":
		return F32, true
	case "bfloat16":
		return BF16, true
	case "float16", "half":
		return F16, true
	}
	return "", false
}

// DTypeOf is the DType of a quant type.
func DTypeOf(t quant.Type) DType { return DType(t.String()) }

// TensorBytes is the byte length of a tensor of dtype d and the given shape, with the checks a header from an
// untrusted file needs: non-negative dimensions, no overflow, and for block types a last dimension that is a
// whole number of blocks.
func (d DType) TensorBytes(shape []int64) (int64, error) {
	t, ok := d.Quant()
	if !ok {
		return 0, fmt.Errorf("unsupported dtype %q", d)
	}
	f, _ := t.Format()
	elems := int64(1)
	for _, n := range shape {
		if n < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if n != 0 && elems > math.MaxInt64/8/n {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		elems *= n
	}
	if f.BlockElems == 1 {
		return elems * int64(f.BlockBytes), nil
	}
	if len(shape) == 0 || shape[len(shape)-1]%int64(f.BlockElems) != 0 {
		return 0, fmt.Errorf("shape %v of %s: the last dimension must be a whole number of %d-element blocks", shape, d, f.BlockElems)
	}
	return elems / int64(f.BlockElems) * int64(f.BlockBytes), nil
}

// ParseDType validates a dtype string: F32, BF16, F16 or a quantized block type.
func ParseDType(s string) (DType, error) {
	if _, err := quant.Parse(s); err != nil {
		return "", fmt.Errorf("unsupported dtype %q (supported: %s)", s, quant.SupportedNames())
	}
	return DType(s), nil
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
func HalfToFloat32(h uint16) float32 { return quant.HalfToFloat32(h) }

// ToF32 converts raw little-endian tensor bytes of dtype d into float32 values (a block type is dequantized).
func ToF32(dst []float32, src []byte, d DType) error {
	if d.Quantized() {
		t, _ := d.Quant()
		return quant.Dequantize(t, dst, src)
	}
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

// ShiftValues adds s to every value of b, little-endian values of dtype d (float32, bfloat16 or float16; the
// narrow ones through float32, rounded to nearest even).
func ShiftValues(b []byte, d DType, s float32) error {
	switch d {
	case F32:
		for i := 0; i+4 <= len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))+s))
		}
	case BF16:
		for i := 0; i+2 <= len(b); i += 2 {
			v := math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[i:]))<<16) + s
			binary.LittleEndian.PutUint16(b[i:], Float32ToBF16Bits(v))
		}
	case F16:
		for i := 0; i+2 <= len(b); i += 2 {
			binary.LittleEndian.PutUint16(b[i:], quant.Float32ToHalf(HalfToFloat32(binary.LittleEndian.Uint16(b[i:]))+s))
		}
	default:
		return fmt.Errorf("cannot add %g to values of dtype %s (float32, bfloat16 and float16 only)", s, d)
	}
	return nil
}
