package checkpoint

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// TestShiftValues: subtracting 1 from a norm weight stored as 1 + w (Gemma's in GGUF files) is exact in every
// float dtype for stored values in [0.5, 2], so adding 1 back gives the stored value; quantized blocks are refused.
func TestShiftValues(t *testing.T) {
	var vals []float32
	for v := float32(0.5); v <= 2; v += 0.0009765625 / 3 {
		vals = append(vals, v)
	}
	for _, d := range []DType{F32, BF16, F16} {
		b := make([]byte, len(vals)*4)
		size := 4
		enc := func(i int, v float32) {
			switch d {
			case F32:
				binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
			case BF16:
				binary.LittleEndian.PutUint16(b[2*i:], Float32ToBF16Bits(v))
			case F16:
				binary.LittleEndian.PutUint16(b[2*i:], quant.Float32ToHalf(v))
			}
		}
		if d != F32 {
			size = 2
		}
		b = b[:len(vals)*size]
		for i, v := range vals {
			enc(i, v)
		}
		stored := make([]float32, len(vals))
		if err := ToF32(stored, b, d); err != nil {
			t.Fatal(err)
		}
		if err := (TensorInfo{DType: d, Shift: -1}).Transform(b); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, len(vals))
		if err := ToF32(got, b, d); err != nil {
			t.Fatal(err)
		}
		for i := range got {
			if got[i]+1 != stored[i] || got[i] != stored[i]-1 {
				t.Fatalf("%s: %g - 1 read back as %g", d, stored[i], got[i])
			}
		}
	}
	if err := ShiftValues(make([]byte, 34), Q8_0, -1); err == nil || !strings.Contains(err.Error(), "Q8_0") {
		t.Fatalf("Q8_0: %v", err)
	}
}
