package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestMXFP4FromSplit: Hugging Face's split MXFP4 (blocks and scales apart, element 2j in byte j's low nibble)
// rewritten as ggml blocks decodes to what transformers' convert_moe_packed_tensors computes from it:
// FP4_VALUES[nibble]·2^(scale−127) (integrations/mxfp4.py), for every code and scales from 2^-126 to 2^126.
func TestMXFP4FromSplit(t *testing.T) {
	fp4 := [16]float64{0, 0.5, 1, 1.5, 2, 3, 4, 6, 0, -0.5, -1, -1.5, -2, -3, -4, -6}
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 64
	blocks, scales := make([]byte, n*QK/2), make([]byte, n)
	for i := range blocks {
		blocks[i] = byte(rng.IntN(256))
	}
	for i := range scales {
		scales[i] = byte(1 + rng.IntN(253))
	}
	scales[0], scales[1] = 127, 1
	dst := make([]byte, n*17)
	if err := MXFP4FromSplit(dst, blocks, scales); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n*QK)
	if err := Dequantize(MXFP4, got, dst); err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		b, k := i/QK, i%QK
		q := blocks[b*QK/2+k/2] >> (4 * (k % 2)) & 0xf
		want := float32(math.Ldexp(fp4[q], int(scales[b])-127))
		if g != want {
			t.Fatalf("element %d (block %d, scale %d, code %d): %g, want %g", i, b, scales[b], q, g, want)
		}
	}
	if err := MXFP4FromSplit(dst, blocks[1:], scales); err == nil {
		t.Error("blocks one byte short: accepted")
	}
}
