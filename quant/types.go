// Package quant holds the block formats of quantized weights, as llama.cpp's ggml defines them: the layout of
// each format's blocks, decoding (dequantization) bit-exact with ggml's reference code and gguf-py's
// gguf.quants, and encoding for the formats layerstream writes (Q8_0, Q4_0, Q4_1, Q4_K). A quantized matrix is
// stored row by row, each row a sequence of whole blocks.
package quant

import (
	"fmt"
	"strings"
)

// Type is a ggml tensor type (ggml_type), the numbering GGUF files use.
type Type uint32

// The ggml types (the numbers are fixed by the GGUF format; the gaps were types since removed).
const (
	F32     Type = 0
	F16     Type = 1
	Q4_0    Type = 2
	Q4_1    Type = 3
	Q5_0    Type = 6
	Q5_1    Type = 7
	Q8_0    Type = 8
	Q8_1    Type = 9
	Q2_K    Type = 10
	Q3_K    Type = 11
	Q4_K    Type = 12
	Q5_K    Type = 13
	Q6_K    Type = 14
	Q8_K    Type = 15
	IQ2_XXS Type = 16
	IQ2_XS  Type = 17
	IQ3_XXS Type = 18
	IQ1_S   Type = 19
	IQ4_NL  Type = 20
	IQ3_S   Type = 21
	IQ2_S   Type = 22
	IQ4_XS  Type = 23
	I8      Type = 24
	I16     Type = 25
	I32     Type = 26
	I64     Type = 27
	F64     Type = 28
	IQ1_M   Type = 29
	BF16    Type = 30
	TQ1_0   Type = 34
	TQ2_0   Type = 35
	MXFP4   Type = 39
)

var typeNames = map[Type]string{
	F32: "F32", F16: "F16", Q4_0: "Q4_0", Q4_1: "Q4_1", Q5_0: "Q5_0", Q5_1: "Q5_1", Q8_0: "Q8_0", Q8_1: "Q8_1",
	Q2_K: "Q2_K", Q3_K: "Q3_K", Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K", Q8_K: "Q8_K", IQ2_XXS: "IQ2_XXS",
	IQ2_XS: "IQ2_XS", IQ3_XXS: "IQ3_XXS", IQ1_S: "IQ1_S", IQ4_NL: "IQ4_NL", IQ3_S: "IQ3_S", IQ2_S: "IQ2_S",
	IQ4_XS: "IQ4_XS", I8: "I8", I16: "I16", I32: "I32", I64: "I64", F64: "F64", IQ1_M: "IQ1_M", BF16: "BF16",
	TQ1_0: "TQ1_0", TQ2_0: "TQ2_0", MXFP4: "MXFP4",
}

// String is the type's ggml name ("Q4_K"), or "type(N)" for a number ggml does not define.
func (t Type) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// QK is the block length of the 32-element formats; QKK that of the K-quants' super-blocks.
const (
	QK  = 32
	QKK = 256
)

// Format is the layout of a supported type: BlockElems elements are stored in BlockBytes bytes.
type Format struct {
	Type       Type
	BlockElems int
	BlockBytes int
}

// The supported formats, in the order SupportedNames lists them.
var formats = []Format{
	{F32, 1, 4}, {F16, 1, 2}, {BF16, 1, 2},
	{Q8_0, QK, 2 + QK},
	{Q4_0, QK, 2 + QK/2}, {Q4_1, QK, 4 + QK/2},
	{Q5_0, QK, 2 + 4 + QK/2}, {Q5_1, QK, 4 + 4 + QK/2},
	{Q2_K, QKK, QKK/16 + QKK/4 + 4},
	{Q3_K, QKK, QKK/8 + QKK/4 + 12 + 2},
	{Q4_K, QKK, 4 + 12 + QKK/2},
	{Q5_K, QKK, 4 + 12 + QKK/8 + QKK/2},
	{Q6_K, QKK, QKK/2 + QKK/4 + QKK/16 + 2},
	{IQ4_NL, QK, 2 + QK/2},
	{IQ4_XS, QKK, 2 + 2 + QKK/64 + QKK/2},
	{IQ3_S, QKK, 2 + QKK/4 + QKK/32 + QKK/8 + QKK/64},
	{IQ3_XXS, QKK, 2 + 3*QKK/8},
	{IQ2_S, QKK, 2 + QKK/4 + QKK/32 + QKK/32},
	{IQ2_XS, QKK, 2 + QKK/4 + QKK/32},
	{IQ2_XXS, QKK, 2 + QKK/4},
	{IQ1_M, QKK, QKK/8 + QKK/16 + QKK/32},
	{IQ1_S, QKK, 2 + QKK/8 + QKK/16},
	{MXFP4, QK, 1 + QK/2},
}

// formatOf indexes formats by type number (the kernels look a format up per block).
var formatOf = func() (m [64]Format) {
	for _, f := range formats {
		m[f.Type] = f
	}
	return m
}()

// Format returns the layout of t, or false when this package cannot decode t.
func (t Type) Format() (Format, bool) {
	if t >= Type(len(formatOf)) || formatOf[t].BlockElems == 0 {
		return Format{}, false
	}
	return formatOf[t], true
}

// Quantized reports whether t is a block format (not a plain float type).
func (t Type) Quantized() bool {
	f, ok := t.Format()
	return ok && f.BlockElems > 1
}

// SupportedNames lists the supported types' names, comma-separated.
func SupportedNames() string {
	names := make([]string, len(formats))
	for i, f := range formats {
		names[i] = f.Type.String()
	}
	return strings.Join(names, ", ")
}

// Parse returns the supported type named s ("Q4_K").
func Parse(s string) (Type, error) {
	for _, f := range formats {
		if f.Type.String() == s {
			return f.Type, nil
		}
	}
	return 0, fmt.Errorf("unsupported tensor type %q (supported: %s)", s, SupportedNames())
}

// RowBytes is the byte size of a row of n elements, or an error when n is not a whole number of blocks.
func (f Format) RowBytes(n int64) (int64, error) {
	if n < 0 || n%int64(f.BlockElems) != 0 {
		return 0, fmt.Errorf("%s: a row of %d elements is not a whole number of %d-element blocks", f.Type, n, f.BlockElems)
	}
	return n / int64(f.BlockElems) * int64(f.BlockBytes), nil
}
