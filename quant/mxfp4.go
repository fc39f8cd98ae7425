package quant

import (
	"fmt"
	"math"
)

// MXFP4 (the OCP microscaling format gpt-oss publishes its experts in; ggml's block_mxfp4): blocks of 32 values,
// each an E2M1 float (4 bits: sign, 2 exponent bits, 1 mantissa bit) times the block's E8M0 scale 2^(e−127).
// ggml's block is the scale byte e, then 16 bytes whose low nibbles are elements 0..15 and high nibbles 16..31;
// its decoding takes twice the E2M1 value (MXFP4Values, integers) times half the scale (MXFP4Scale), the same
// products.

// MXFP4Values are twice the E2M1 values of the 16 codes (ggml's kvalues_mxfp4): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and
// their negatives (code 8, −0, is 0).
var MXFP4Values = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// MXFP4Scale is half the scale of E8M0 exponent e, 2^(e−128), as ggml's ggml_e8m0_to_fp32_half computes it
// (e = 255, which the OCP format reserves for NaN, is 2^127).
var MXFP4Scale = func() (t [256]float32) {
	for e := range t {
		if e < 2 {
			t[e] = math.Float32frombits(0x00200000 << e) // 2^-128, 2^-127: subnormal
		} else {
			t[e] = math.Float32frombits(uint32(e-1) << 23)
		}
	}
	return t
}()

// MXFP4: e8m0 e, 16 bytes of nibbles (low nibbles elements 0..15, high 16..31); y = MXFP4Values[q]·MXFP4Scale[e].
func decodeMXFP4(y []float32, b []byte) {
	d := MXFP4Scale[b[0]]
	for j, q := range b[1 : 1+QK/2] {
		y[j] = float32(MXFP4Values[q&0xf]) * d
		y[j+QK/2] = float32(MXFP4Values[q>>4]) * d
	}
}

// MXFP4FromSplit writes, as ggml's MXFP4 blocks, the blocks of a matrix stored as Hugging Face's gpt-oss
// checkpoints publish it: blocks holding 16 bytes per block of 32 values whose low nibble is the even element
// and high nibble the odd one (element 2j and 2j+1 in byte j), and scales holding each block's E8M0 exponent
// apart. dst must hold len(scales) blocks of 17 bytes; len(blocks) must be 16·len(scales).
func MXFP4FromSplit(dst, blocks, scales []byte) error {
	n := len(scales)
	if len(blocks) != n*QK/2 || len(dst) != n*(1+QK/2) {
		return fmt.Errorf("mxfp4: %d bytes of blocks and %d scales into %d bytes: want 16 bytes of blocks per scale and 17 per block", len(blocks), n, len(dst))
	}
	for i, e := range scales {
		out, in := dst[i*(1+QK/2):(i+1)*(1+QK/2)], blocks[i*QK/2:(i+1)*QK/2]
		out[0] = e
		for j := range QK / 2 { // element k is nibble k%2 of byte k/2: low nibbles 0..15 from bytes 0..7, high ones from 8..15
			lo, hi := nibble(in, j), nibble(in, j+QK/2)
			out[1+j] = lo | hi<<4
		}
	}
	return nil
}

// nibble is element k of a block whose byte j holds elements 2j (low nibble) and 2j+1 (high nibble).
func nibble(b []byte, k int) byte { return b[k/2] >> (4 * (k % 2)) & 0xf }
