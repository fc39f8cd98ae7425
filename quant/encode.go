package quant

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Quantize encodes src into dst as blocks of type t. len(src) must be a whole number of blocks and dst exactly
// their size. Q8_0, Q4_0 and Q4_1 are bit-exact with gguf-py's gguf.quants (itself bit-exact with ggml's
// quantize_row_*_ref); Q4_K follows ggml's quantize_row_q4_K_ref (the weighted search for each sub-block's
// scale and min), computed without fused multiply-adds.
func Quantize(t Type, dst []byte, src []float32) error {
	f, ok := t.Format()
	enc := encoders[t]
	if !ok || enc == nil {
		return fmt.Errorf("quantize: cannot encode %s (encodable: Q8_0, Q4_0, Q4_1, Q4_K)", t)
	}
	if len(src)%f.BlockElems != 0 || len(dst) != len(src)/f.BlockElems*f.BlockBytes {
		return fmt.Errorf("quantize %s: %d elements into %d bytes (blocks of %d elements in %d bytes)", t, len(src), len(dst), f.BlockElems, f.BlockBytes)
	}
	for i := 0; i < len(src); i += f.BlockElems {
		b := i / f.BlockElems * f.BlockBytes
		enc(dst[b:b+f.BlockBytes], src[i:i+f.BlockElems])
	}
	return nil
}

var encoders = map[Type]func(b []byte, x []float32){Q8_0: encodeQ8_0, Q4_0: encodeQ4_0, Q4_1: encodeQ4_1, Q4_K: encodeQ4_K}

func putHalf(b []byte, f float32) { binary.LittleEndian.PutUint16(b, Float32ToHalf(f)) }

// inverse is 1/d, or 0 for d == 0 (as ggml and gguf-py write it).
func inverse(d float32) float32 {
	if d == 0 {
		return 0
	}
	return 1 / d
}

// roundAway rounds half away from zero (C's roundf).
func roundAway(x float32) float32 { return float32(math.Round(float64(x))) }

func encodeQ8_0(b []byte, x []float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	d := amax / 127
	id := inverse(d)
	putHalf(b, d)
	for j, v := range x {
		b[2+j] = byte(int8(roundAway(v * id)))
	}
}

func abs32(v float32) float32 { return math.Float32frombits(math.Float32bits(v) &^ (1 << 31)) }

func encodeQ4_0(b []byte, x []float32) {
	// The value of largest magnitude (the first of equals), signed: it maps to -8.
	var amax, vmax float32
	for _, v := range x {
		if a := abs32(v); a > amax {
			amax, vmax = a, v
		}
	}
	d := vmax / -8
	id := inverse(d)
	putHalf(b, d)
	for j := range QK / 2 {
		lo := min(15, int(float32(x[j]*id)+8.5))
		hi := min(15, int(float32(x[j+QK/2]*id)+8.5))
		b[2+j] = byte(lo) | byte(hi)<<4
	}
}

func encodeQ4_1(b []byte, x []float32) {
	lo, hi := x[0], x[0]
	for _, v := range x[1:] {
		lo, hi = min(lo, v), max(hi, v)
	}
	d := (hi - lo) / 15
	id := inverse(d)
	putHalf(b, d)
	putHalf(b[2:], lo)
	for j := range QK / 2 {
		q0 := min(15, int(float32((x[j]-lo)*id)+0.5))
		q1 := min(15, int(float32((x[j+QK/2]-lo)*id)+0.5))
		b[4+j] = byte(q0) | byte(q1)<<4
	}
}

// nearestInt rounds to the nearest integer, ties to even, as ggml's nearest_int does (|f| ≤ 2^22). Callers pass
// products rounded with an explicit float32 conversion, so that a GOAMD64=v3 build does not fuse them with the
// addition here.
func nearestInt(f float32) int {
	v := f + 12582912
	return int(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// makeQKX2 is ggml's make_qkx2_quants: the scale and min (returned as -min ≥ 0) of n values x with
// importance weights w, quantized to 0..nmax into l, after a search over nstep+1 candidate scales.
func makeQKX2(nmax int, x, w []float32, l, laux []uint8, rmin, rdelta float32, nstep int) (scale, negMin float32) {
	n := len(x)
	lo, hi := x[0], x[0]
	sumW := w[0]
	sumX := float32(sumW * x[0])
	for i := 1; i < n; i++ {
		lo, hi = min(lo, x[i]), max(hi, x[i])
		sumW += w[i]
		sumX += float32(w[i] * x[i])
	}
	lo = min(lo, 0)
	if hi == lo {
		clear(l[:n])
		return 0, -lo
	}
	iscale := float32(nmax) / (hi - lo)
	scale = 1 / iscale
	var best float32
	for i := range n {
		q := max(0, min(nmax, nearestInt(float32(iscale*(x[i]-lo)))))
		l[i] = uint8(q)
		diff := float32(scale*float32(q)) + lo - x[i]
		best += float32(w[i] * float32(diff*diff))
	}
	for is := 0; is <= nstep; is++ {
		iscale = (rmin + float32(rdelta*float32(is)) + float32(nmax)) / (hi - lo)
		var sumL, sumL2, sumXL float32
		for i := range n {
			q := max(0, min(nmax, nearestInt(float32(iscale*(x[i]-lo)))))
			laux[i] = uint8(q)
			wl := w[i] * float32(q)
			sumL += wl
			sumL2 += float32(wl * float32(q))
			sumXL += float32(wl * x[i])
		}
		det := float32(sumW*sumL2) - float32(sumL*sumL)
		if det > 0 {
			thisScale := (float32(sumW*sumXL) - float32(sumX*sumL)) / det
			thisMin := (float32(sumL2*sumX) - float32(sumL*sumXL)) / det
			if thisMin > 0 {
				thisMin = 0
				thisScale = sumXL / sumL2
			}
			var cur float32
			for i := range n {
				diff := float32(thisScale*float32(laux[i])) + thisMin - x[i]
				cur += float32(w[i] * float32(diff*diff))
			}
			if cur < best {
				copy(l[:n], laux[:n])
				best, scale, lo = cur, thisScale, thisMin
			}
		}
	}
	return scale, -lo
}

func encodeQ4_K(b []byte, x []float32) {
	var L [QKK]uint8
	var laux [32]uint8
	var w [32]float32
	var scales, mins [QKK / 32]float32
	var maxScale, maxMin float32
	for j := range QKK / 32 {
		xs := x[32*j : 32*j+32]
		var sumX2 float32
		for _, v := range xs {
			sumX2 += float32(v * v)
		}
		av := float32(math.Sqrt(float64(sumX2 / 32)))
		for i, v := range xs {
			w[i] = av + abs32(v)
		}
		scales[j], mins[j] = makeQKX2(15, xs, w[:], L[32*j:32*j+32], laux[:], -1, 0.1, 20)
		maxScale, maxMin = max(maxScale, scales[j]), max(maxMin, mins[j])
	}
	var invScale, invMin float32
	if maxScale > 0 {
		invScale = 63 / maxScale
	}
	if maxMin > 0 {
		invMin = 63 / maxMin
	}
	sc := b[4:16]
	clear(sc)
	for j := range QKK / 32 {
		ls := uint8(min(63, nearestInt(float32(invScale*scales[j]))))
		lm := uint8(min(63, nearestInt(float32(invMin*mins[j]))))
		if j < 4 {
			sc[j], sc[j+4] = ls, lm
		} else {
			sc[j+4] = ls&0xf | (lm&0xf)<<4
			sc[j-4] |= (ls >> 4) << 6
			sc[j] |= (lm >> 4) << 6
		}
	}
	putHalf(b, maxScale/63)
	putHalf(b[2:], maxMin/63)
	d, dmin := halfAt(b, 0), halfAt(b, 2)
	for j := range QKK / 32 {
		s, m := ScaleMinK4(j, sc)
		dj := d * float32(s)
		if dj == 0 {
			continue
		}
		dm := dmin * float32(m)
		for i := range 32 {
			L[32*j+i] = uint8(max(0, min(15, nearestInt((x[32*j+i]+dm)/dj))))
		}
	}
	q := b[16 : 16+QKK/2]
	for j := 0; j < QKK; j += 64 {
		for l := range 32 {
			q[j/2+l] = L[j+l] | L[j+l+32]<<4
		}
	}
}
