package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Dequantize decodes src, a whole number of blocks of type t, into dst, which must hold exactly their elements.
// The values are bit-exact with ggml's dequantize_row_* reference functions and gguf-py's gguf.quants (each
// product and sum rounded to float32 in the same order; explicit float32 conversions keep Go from fusing a
// multiply and an add).
func Dequantize(t Type, dst []float32, src []byte) error {
	f, ok := t.Format()
	if !ok {
		return fmt.Errorf("dequantize: %s is not supported (supported: %s)", t, SupportedNames())
	}
	if len(dst)%f.BlockElems != 0 || len(src) != len(dst)/f.BlockElems*f.BlockBytes {
		return fmt.Errorf("dequantize %s: %d bytes for %d elements (blocks of %d elements in %d bytes)", t, len(src), len(dst), f.BlockElems, f.BlockBytes)
	}
	dec := decoders[t]
	for i := 0; i < len(dst); i += f.BlockElems {
		b := i / f.BlockElems * f.BlockBytes
		dec(dst[i:i+f.BlockElems], src[b:b+f.BlockBytes])
	}
	return nil
}

// decoders decode one block of their type.
var decoders = map[Type]func(y []float32, b []byte){
	F32:  func(y []float32, b []byte) { y[0] = math.Float32frombits(binary.LittleEndian.Uint32(b)) },
	F16:  func(y []float32, b []byte) { y[0] = halfAt(b, 0) },
	BF16: func(y []float32, b []byte) { y[0] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b)) << 16) },
	Q8_0: decodeQ8_0, Q4_0: decodeQ4_0, Q4_1: decodeQ4_1, Q5_0: decodeQ5_0, Q5_1: decodeQ5_1,
	Q2_K: decodeQ2_K, Q3_K: decodeQ3_K, Q4_K: decodeQ4_K, Q5_K: decodeQ5_K, Q6_K: decodeQ6_K,
	IQ4_NL: decodeIQ4_NL, IQ4_XS: decodeIQ4_XS,
	IQ3_S: decodeGrid(IQ3_S), IQ3_XXS: decodeGrid(IQ3_XXS), IQ2_S: decodeGrid(IQ2_S), IQ2_XS: decodeGrid(IQ2_XS),
	IQ2_XXS: decodeGrid(IQ2_XXS), IQ1_M: decodeGrid(IQ1_M), IQ1_S: decodeGrid(IQ1_S),
	MXFP4: decodeMXFP4,
}

func halfAt(b []byte, off int) float32 { return halfTable[binary.LittleEndian.Uint16(b[off:])] }

// Q8_0: f16 d, 32 × int8 q; y = q·d.
func decodeQ8_0(y []float32, b []byte) {
	d := halfAt(b, 0)
	q := b[2 : 2+QK]
	for j := range QK {
		y[j] = float32(int8(q[j])) * d
	}
}

// Q4_0: f16 d, 16 bytes of nibbles (low nibbles are elements 0..15, high 16..31); y = (q-8)·d.
func decodeQ4_0(y []float32, b []byte) {
	d := halfAt(b, 0)
	q := b[2 : 2+QK/2]
	for j := range QK / 2 {
		y[j] = d * float32(int(q[j]&0xf)-8)
		y[j+QK/2] = d * float32(int(q[j]>>4)-8)
	}
}

// Q4_1: f16 d, f16 m, 16 bytes of nibbles; y = q·d + m.
func decodeQ4_1(y []float32, b []byte) {
	d, m := halfAt(b, 0), halfAt(b, 2)
	q := b[4 : 4+QK/2]
	for j := range QK / 2 {
		y[j] = float32(d*float32(q[j]&0xf)) + m
		y[j+QK/2] = float32(d*float32(q[j]>>4)) + m
	}
}

// Q5_0: f16 d, uint32 of fifth bits, 16 bytes of nibbles; y = (q-16)·d.
func decodeQ5_0(y []float32, b []byte) {
	d := halfAt(b, 0)
	qh := binary.LittleEndian.Uint32(b[2:])
	q := b[6 : 6+QK/2]
	for j := range QK / 2 {
		lo := int(q[j]&0xf) | int(qh>>j&1)<<4
		hi := int(q[j]>>4) | int(qh>>(j+16)&1)<<4
		y[j] = d * float32(lo-16)
		y[j+QK/2] = d * float32(hi-16)
	}
}

// Q5_1: f16 d, f16 m, uint32 of fifth bits, 16 bytes of nibbles; y = q·d + m.
func decodeQ5_1(y []float32, b []byte) {
	d, m := halfAt(b, 0), halfAt(b, 2)
	qh := binary.LittleEndian.Uint32(b[4:])
	q := b[8 : 8+QK/2]
	for j := range QK / 2 {
		lo := uint32(q[j]&0xf) | (qh>>j&1)<<4
		hi := uint32(q[j]>>4) | (qh>>(j+16)&1)<<4
		y[j] = float32(d*float32(lo)) + m
		y[j+QK/2] = float32(d*float32(hi)) + m
	}
}

// Q2_K: 16 bytes of scales (low nibble scale, high nibble min, per 16 elements), 64 bytes of 2-bit values,
// f16 d, f16 dmin; y = (d·scale)·q - dmin·min.
func decodeQ2_K(y []float32, b []byte) {
	scales, qs := b[:QKK/16], b[QKK/16:QKK/16+QKK/4]
	d, dmin := halfAt(b, QKK/16+QKK/4), halfAt(b, QKK/16+QKK/4+2)
	for i := range QKK / 16 {
		dl := d * float32(scales[i]&0xf)
		ml := dmin * float32(scales[i]>>4)
		// Sub-block i: 32-byte group i/8, shift 2·((i/2)%4), bytes 16·(i%2) .. +16.
		grp, shift, half := i/8, 2*((i/2)%4), 16*(i%2)
		for l := range 16 {
			q := qs[32*grp+half+l] >> shift & 3
			y[16*i+l] = float32(dl*float32(q)) - ml
		}
	}
}

// Q3_K: 32 bytes of high bits (inverted), 64 bytes of 2-bit values, 12 bytes of 6-bit signed scales, f16 d;
// y = (d·(scale-32))·(q - 4·!h).
func decodeQ3_K(y []float32, b []byte) {
	hmask, qs, sc := b[:QKK/8], b[QKK/8:QKK/8+QKK/4], b[QKK/8+QKK/4:QKK/8+QKK/4+12]
	d := halfAt(b, QKK/8+QKK/4+12)
	for i := range QKK / 16 {
		dl := d * float32(ScaleQ3K(i, sc))
		grp, shift, half := i/8, 2*((i/2)%4), 16*(i%2)
		for l := range 16 {
			q := int(qs[32*grp+half+l] >> shift & 3)
			if hmask[half+l]>>(i/2)&1 == 0 {
				q -= 4
			}
			y[16*i+l] = dl * float32(q)
		}
	}
}

// ScaleQ3K unpacks the signed 6-bit scale of sub-block i (0..15) from the 12 scale bytes of a Q3_K block: its low
// four bits in sc[i%8] (low or high nibble), its high two in sc[8+i%4], stored as scale + 32.
func ScaleQ3K(i int, sc []byte) int8 {
	lo := sc[i%8] >> (4 * (i / 8)) & 0xf
	hi := sc[8+i%4] >> (2 * (i / 4)) & 3
	return int8(lo|hi<<4) - 32
}

// ScaleMinK4 unpacks the 6-bit scale and min of sub-block j (0..7) from the 12 scale bytes of a Q4_K or Q5_K
// block (ggml's get_scale_min_k4).
func ScaleMinK4(j int, s []byte) (sc, m uint8) {
	if j < 4 {
		return s[j] & 63, s[j+4] & 63
	}
	return s[j+4]&0xf | (s[j-4]>>6)<<4, s[j+4]>>4 | (s[j]>>6)<<4
}

// Q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins (8 sub-blocks of 32), 128 bytes of nibbles (each
// 32-byte group holds sub-block 2g in its low nibbles and 2g+1 in its high ones); y = (d·sc)·q - dmin·m.
func decodeQ4_K(y []float32, b []byte) {
	d, dmin := halfAt(b, 0), halfAt(b, 2)
	scales, qs := b[4:16], b[16:16+QKK/2]
	for g := range 4 {
		sc, m := ScaleMinK4(2*g, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = ScaleMinK4(2*g+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		q := qs[32*g : 32*g+32]
		for l := range 32 {
			y[64*g+l] = float32(d1*float32(q[l]&0xf)) - m1
			y[64*g+32+l] = float32(d2*float32(q[l]>>4)) - m2
		}
	}
}

// Q5_K: as Q4_K plus 32 bytes of fifth bits (bit i of byte l belongs to element l of sub-block i).
func decodeQ5_K(y []float32, b []byte) {
	d, dmin := halfAt(b, 0), halfAt(b, 2)
	scales, qh, qs := b[4:16], b[16:16+QKK/8], b[16+QKK/8:16+QKK/8+QKK/2]
	for g := range 4 {
		sc, m := ScaleMinK4(2*g, scales)
		d1, m1 := d*float32(sc), dmin*float32(m)
		sc, m = ScaleMinK4(2*g+1, scales)
		d2, m2 := d*float32(sc), dmin*float32(m)
		q := qs[32*g : 32*g+32]
		for l := range 32 {
			lo := q[l]&0xf | (qh[l]>>(2*g)&1)<<4
			hi := q[l]>>4 | (qh[l]>>(2*g+1)&1)<<4
			y[64*g+l] = float32(d1*float32(lo)) - m1
			y[64*g+32+l] = float32(d2*float32(hi)) - m2
		}
	}
}

// Q6_K: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 int8 scales (per 16 elements), f16 d;
// y = (d·scale)·(q-32).
func decodeQ6_K(y []float32, b []byte) {
	ql, qh, sc := b[:QKK/2], b[QKK/2:QKK/2+QKK/4], b[QKK/2+QKK/4:QKK/2+QKK/4+QKK/16]
	d := halfAt(b, QKK/2+QKK/4+QKK/16)
	for n := range 2 {
		l4, h4, s4, y4 := ql[64*n:], qh[32*n:], sc[8*n:], y[128*n:]
		for l := range 32 {
			is := l / 16
			q1 := int(l4[l]&0xf|(h4[l]>>0&3)<<4) - 32
			q2 := int(l4[l+32]&0xf|(h4[l]>>2&3)<<4) - 32
			q3 := int(l4[l]>>4|(h4[l]>>4&3)<<4) - 32
			q4 := int(l4[l+32]>>4|(h4[l]>>6&3)<<4) - 32
			y4[l] = d * float32(int8(s4[is])) * float32(q1)
			y4[l+32] = d * float32(int8(s4[is+2])) * float32(q2)
			y4[l+64] = d * float32(int8(s4[is+4])) * float32(q3)
			y4[l+96] = d * float32(int8(s4[is+6])) * float32(q4)
		}
	}
}

// IQ4Values are the 16 values IQ4_NL's and IQ4_XS's nibbles index (ggml's kvalues_iq4nl): a non-linear grid,
// finer near zero.
var IQ4Values = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

// IQ4_NL: f16 d, 16 bytes of nibbles (low nibbles are elements 0..15, high 16..31); y = d·IQ4Values[q].
func decodeIQ4_NL(y []float32, b []byte) {
	d := halfAt(b, 0)
	q := b[2 : 2+QK/2]
	for j := range QK / 2 {
		y[j] = d * float32(IQ4Values[q[j]&0xf])
		y[j+QK/2] = d * float32(IQ4Values[q[j]>>4])
	}
}

// IQ4XSScale is the 6-bit scale of sub-block j (0..7) of an IQ4_XS super-block, less its offset 32: its low
// nibble from scales_l (the 4 bytes at 4), its two high bits from scales_h (the uint16 at 2).
func IQ4XSScale(b []byte, j int) int {
	lo := int(b[4+j/2]>>(4*(j%2))) & 0xf
	hi := int(binary.LittleEndian.Uint16(b[2:])>>(2*j)) & 3
	return (lo | hi<<4) - 32
}

// IQ4_XS: f16 d, uint16 scales_h, 4 bytes scales_l, 128 bytes of nibbles (sub-block j of 32: the 16 bytes from
// 8+16j, low nibbles its elements 0..15, high 16..31); y = (d·scale_j)·IQ4Values[q].
func decodeIQ4_XS(y []float32, b []byte) {
	d := halfAt(b, 0)
	for j := range QKK / 32 {
		dl := d * float32(IQ4XSScale(b, j))
		q, yj := b[8+16*j:8+16*j+16], y[32*j:]
		for l := range 16 {
			yj[l] = dl * float32(IQ4Values[q[l]&0xf])
			yj[l+16] = dl * float32(IQ4Values[q[l]>>4])
		}
	}
}
