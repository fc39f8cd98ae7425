package quant

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// The codebook i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) store each group of 8 (or 4)
// weights of a 256-element super-block as an index into a lattice codebook (grids.go) with a sign per weight
// and a small odd integer scale per 16 or 32 weights. Every weight is therefore an integer times one float per
// super-block: weight j = d·sc[j/16]·q[j], q a signed 8-bit integer (the codebook value with its sign; IQ1's
// value and its ±1/8 shift, times 8), which GridInts decodes and the kernels multiply in the integers.

// GridTypes are the codebook i-quants, in ggml's numbering order.
var GridTypes = []Type{IQ2_XXS, IQ2_XS, IQ3_XXS, IQ1_S, IQ3_S, IQ2_S, IQ1_M}

// isGrid marks GridTypes by type number.
var isGrid = func() (m [64]bool) {
	for _, t := range GridTypes {
		m[t] = true
	}
	return m
}()

// IsGrid reports whether t is one of GridTypes.
func IsGrid(t Type) bool { return t < Type(len(isGrid)) && isGrid[t] }

// signMasks[s] has byte j all ones where bit j of s is set: a sign byte as a mask of the weights it negates.
var signMasks = func() (m [256]uint64) {
	for s := range 256 {
		for j := range 8 {
			if s>>j&1 != 0 {
				m[s] |= 0xff << (8 * j)
			}
		}
	}
	return m
}()

// KSigns is ggml's ksigns_iq2xs[s] (s < 128): the eight signs of a group stored as 7 bits, the eighth their
// parity (an even number of negatives).
func KSigns(s int) uint8 {
	p := 0
	for j := range 7 {
		p ^= s >> j & 1
	}
	return uint8(s | p<<7)
}

// kSignMasks[s] is the mask of KSigns(s).
var kSignMasks = func() (m [128]uint64) {
	for s := range 128 {
		m[s] = signMasks[KSigns(s)]
	}
	return m
}()

// KSignMask is the sign mask of KSigns of s's low 7 bits: byte j all ones where weight j of the group is negated.
func KSignMask(s int) uint64 { return kSignMasks[s&127] }

// signed negates the bytes of g (each nonzero and below 128) where mask is all ones: ^g + 1 per byte, which
// cannot carry into the next byte because no byte of g is 0.
func signed(g, mask uint64) uint64 { return (g ^ mask) + (mask & 0x0101010101010101) }

// IQ1Codes[0][i] holds 8·v+1 and IQ1Codes[1][i] 8·v−1 for the eight values v of IQ1SGrid[i] (int8 bytes): IQ1's
// weights times 8 with their shift of +1/8 or −1/8.
var IQ1Codes = func() (c [2][2048]uint64) {
	for i, g := range IQ1SGrid {
		for j := range 8 {
			v := int8(g >> (8 * j))
			c[0][i] |= uint64(uint8(8*v+1)) << (8 * j)
			c[1][i] |= uint64(uint8(8*v-1)) << (8 * j)
		}
	}
	return c
}()

// GridInts decodes a super-block b of the codebook i-quant t (IsGrid) into q and sc and returns d: weight j is
// d·sc[j/16]·q[j]. Its products, rounded to float32 as float32(d·sc)·q, are ggml's dequantized values bit for
// bit (d carries the format's power-of-two factor, which changes no rounding).
func GridInts(t Type, q *[QKK]int8, sc *[16]int32, b []byte) float32 {
	qb := (*[QKK]byte)(unsafe.Pointer(q))
	put := func(i int, v uint64) { binary.LittleEndian.PutUint64(qb[8*(i&31):], v) } // byte j: element j of group i
	switch t {
	case IQ2_XXS: // f16 d, then per 32: four grid bytes, then 4×7 sign bits and a 4-bit scale
		b = b[:66]
		for ib := range 8 {
			idx, aux := u32(b, 2+8*ib), u32(b, 6+8*ib)
			s := int32(2*(aux>>28) + 1)
			sc[2*ib], sc[2*ib+1] = s, s
			for l := range 4 {
				put(4*ib+l, signed(IQ2XXSGrid[uint8(idx>>(8*l))], KSignMask(int(aux>>(7*l)))))
			}
		}
		return GridScale(t, b)
	case IQ2_XS: // f16 d, 32 uint16 (9-bit grid index, 7 sign bits), 8 bytes of two 4-bit scales
		b = b[:74]
		for ib := range 8 {
			s := b[66+ib]
			sc[2*ib], sc[2*ib+1] = int32(2*(s&15)+1), int32(2*(s>>4)+1)
			for l := range 4 {
				v := uint32(binary.LittleEndian.Uint16(b[2+2*(4*ib+l):]))
				put(4*ib+l, signed(IQ2XSGrid[v&511], KSignMask(int(v>>9))))
			}
		}
		return GridScale(t, b)
	case IQ2_S: // f16 d, 32 grid index bytes, 32 sign bytes, 8 bytes of 2-bit index highs, 8 of two scales
		b = b[:82]
		for ib := range 8 {
			s, h := b[74+ib], uint32(b[66+ib])
			sc[2*ib], sc[2*ib+1] = int32(2*(s&15)+1), int32(2*(s>>4)+1)
			for l := range 4 {
				idx := uint32(b[2+4*ib+l]) | h<<(8-2*l)&0x300
				put(4*ib+l, signed(IQ2SGrid[idx&1023], signMasks[b[34+4*ib+l]]))
			}
		}
		return GridScale(t, b)
	case IQ3_XXS: // f16 d, 64 grid index bytes (4 values each), per 32: 4×7 sign bits and a 4-bit scale
		b = b[:98]
		for ib := range 8 {
			aux := u32(b, 66+4*ib)
			s := int32(2*(aux>>28) + 1)
			sc[2*ib], sc[2*ib+1] = s, s
			for l := range 4 {
				g := uint64(IQ3XXSGrid[b[2+8*ib+2*l]]) | uint64(IQ3XXSGrid[b[3+8*ib+2*l]])<<32
				put(4*ib+l, signed(g, KSignMask(int(aux>>(7*l)))))
			}
		}
		return GridScale(t, b)
	case IQ3_S: // f16 d, 64 grid index bytes, 8 bytes of index high bits, 32 sign bytes, 4 bytes of two scales
		b = b[:110]
		for ib := range 8 {
			s := int32(2*(b[106+ib/2]>>(4*(ib%2))&15) + 1)
			sc[2*ib], sc[2*ib+1] = s, s
			h := uint32(b[66+ib])
			for l := range 4 {
				i1 := uint32(b[2+8*ib+2*l]) | h<<(8-2*l)&256
				i2 := uint32(b[3+8*ib+2*l]) | h<<(7-2*l)&256
				g := uint64(IQ3SGrid[i1&511]) | uint64(IQ3SGrid[i2&511])<<32
				put(4*ib+l, signed(g, signMasks[b[74+4*ib+l]]))
			}
		}
		return GridScale(t, b)
	case IQ1_S: // f16 d, 32 grid index bytes, per 32 a uint16: 4×3 index high bits, a 3-bit scale, the shift's sign
		b = b[:50]
		for ib := range 8 {
			h := uint32(binary.LittleEndian.Uint16(b[34+2*ib:]))
			s := int32(2*(h>>12&7) + 1)
			sc[2*ib], sc[2*ib+1] = s, s
			codes := &IQ1Codes[h>>15]
			for l := range 4 {
				put(4*ib+l, codes[(uint32(b[2+4*ib+l])|(h>>(3*l)&7)<<8)&2047])
			}
		}
		return GridScale(t, b)
	case IQ1_M: // 32 grid index bytes, per 32 two bytes (per 8: 3 index high bits, the shift's sign), 8 bytes of 3-bit scales and d
		b = b[:56]
		var sw [4]uint32
		for i := range 4 {
			sw[i] = uint32(binary.LittleEndian.Uint16(b[48+2*i:]))
		}
		for ib := range 8 {
			s := sw[ib/2] >> (6 * (ib % 2))
			sc[2*ib], sc[2*ib+1] = int32(2*(s&7)+1), int32(2*(s>>3&7)+1)
			for l := range 4 {
				h := uint32(b[32+2*ib+l/2]) >> (4 * (l % 2)) // this group's nibble: 3 index bits, then the sign
				put(4*ib+l, IQ1Codes[h>>3&1][(uint32(b[4*ib+l])|(h&7)<<8)&2047])
			}
		}
		return GridScale(t, b)
	}
	panic(fmt.Sprintf("quant: GridInts of %s", t))
}

// GridScale is the d GridInts returns for the super-block b of the codebook i-quant t, alone: the block's
// float16 scale times the format's power of two (IQ1_M's float16 is spread over its scale words' top nibbles).
func GridScale(t Type, b []byte) float32 {
	switch t {
	case IQ3_S:
		return halfAt(b, 0)
	case IQ3_XXS:
		return halfAt(b, 0) * 0.25
	case IQ1_M:
		b = b[:56]
		d := b[49]>>4 | b[51]&0xf0
		return halfTable[uint16(d)|uint16(b[53]>>4|b[55]&0xf0)<<8] * 0.125
	}
	return halfAt(b, 0) * 0.125
}

func u32(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }

// decodeGrid returns the float decoder of a codebook i-quant: its GridInts, rounded as ggml rounds them.
func decodeGrid(t Type) func(y []float32, b []byte) {
	return func(y []float32, b []byte) {
		var q [QKK]int8
		var sc [16]int32
		d := GridInts(t, &q, &sc, b)
		for s := range 16 {
			ds := d * float32(sc[s])
			for j := 16 * s; j < 16*s+16; j++ {
				y[j] = float32(ds * float32(q[j]))
			}
		}
	}
}
