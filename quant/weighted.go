package quant

import (
	"fmt"
	"math"
)

// QuantizeWeighted encodes src, rows of cols values, as t (Q4_K or Q4_1) into dst as llama.cpp's quantizer does
// when given an importance matrix (quantize_row_q4_K_impl, quantize_row_q4_1_impl): each value's error is
// weighted by importance[i mod cols] (its column's mean squared input, package imatrix) times
// sqrt(σ² + x²), σ² the row's (Q4_1) or super-block's (Q4_K) mean square, and each block's scale and minimum
// come from make_qkx3_quants' search (makeQKX2: with weights and squared errors, make_qkx3_quants is
// make_qkx2_quants, whose max == min test equals its max <= min, the minimum being clamped to ≤ 0 and max ≥ min);
// Q4_K's six-bit sub-block scales and minimums from make_qp_quants, weighted
// by their sub-blocks' summed weights. Without importances Quantize's encoders (ggml's reference ones) apply.
func QuantizeWeighted(t Type, dst []byte, src []float32, cols int, importance []float32) error {
	f, ok := t.Format()
	switch {
	case !ok || (t != Q4_K && t != Q4_1):
		return fmt.Errorf("quantize %s with importances: only Q4_K and Q4_1 (and Q8_0, QuantizeQ8_0Search)", t)
	case cols <= 0 || cols%f.BlockElems != 0 || len(src)%cols != 0:
		return fmt.Errorf("quantize %s: %d values in rows of %d: want rows of a whole number of %d-element blocks", t, len(src), cols, f.BlockElems)
	case len(dst) != len(src)/f.BlockElems*f.BlockBytes:
		return fmt.Errorf("quantize %s: %d elements into %d bytes, want %d", t, len(src), len(dst), len(src)/f.BlockElems*f.BlockBytes)
	case len(importance) != cols:
		return fmt.Errorf("quantize %s: %d importances for rows of %d columns", t, len(importance), cols)
	}
	rowBytes := cols / f.BlockElems * f.BlockBytes
	for r := 0; r < len(src)/cols; r++ {
		x, b := src[r*cols:(r+1)*cols], dst[r*rowBytes:(r+1)*rowBytes]
		if t == Q4_1 {
			encodeQ4_1Weighted(b, x, importance)
			continue
		}
		for i := 0; i < cols; i += QKK {
			encodeQ4_KWeighted(b[i/QKK*f.BlockBytes:][:f.BlockBytes], x[i:i+QKK], importance[i:i+QKK])
		}
	}
	return nil
}

// encodeQ4_1Weighted is quantize_row_q4_1_impl with quant weights qw: one row.
func encodeQ4_1Weighted(b []byte, x, qw []float32) {
	var sumX2 float32
	for _, v := range x {
		sumX2 += float32(v * v)
	}
	sigma2 := sumX2 / float32(len(x))
	var w [QK]float32
	var l, laux [QK]uint8
	for ib := 0; ib < len(x)/QK; ib++ {
		xb, blk := x[ib*QK:(ib+1)*QK], b[ib*20:(ib+1)*20]
		for j, v := range xb {
			w[j] = qw[ib*QK+j] * float32(math.Sqrt(float64(sigma2+float32(v*v))))
		}
		d, negMin := makeQKX2(15, xb, w[:], l[:], laux[:], -0.9, 0.05, 36)
		putHalf(blk, d)
		putHalf(blk[2:], -negMin)
		for j := range QK / 2 {
			blk[4+j] = l[j] | l[j+QK/2]<<4
		}
	}
}

// encodeQ4_KWeighted is quantize_row_q4_K_impl with quant weights qw: one super-block.
func encodeQ4_KWeighted(b []byte, x, qw []float32) {
	var L [QKK]uint8
	var laux [32]uint8
	var w [32]float32
	var sw, scales, mins [QKK / 32]float32
	var sumX2 float32
	for _, v := range x {
		sumX2 += float32(v * v)
	}
	sigma2 := 2 * sumX2 / QKK
	for j := range QKK / 32 {
		xs := x[32*j : 32*j+32]
		var sumW float32
		for i, v := range xs {
			w[i] = qw[32*j+i] * float32(math.Sqrt(float64(sigma2+float32(v*v))))
			sumW += w[i]
		}
		sw[j] = sumW
		scales[j], mins[j] = makeQKX2(15, xs, w[:], L[32*j:32*j+32], laux[:], -0.9, 0.05, 36)
	}
	var ls, lm [QKK / 32]uint8
	dBlock := makeQPQuants(63, scales[:], ls[:], sw[:])
	mBlock := makeQPQuants(63, mins[:], lm[:], sw[:])
	sc := b[4:16]
	clear(sc)
	for j := range QKK / 32 {
		if j < 4 {
			sc[j], sc[j+4] = ls[j], lm[j]
		} else {
			sc[j+4] = ls[j]&0xf | (lm[j]&0xf)<<4
			sc[j-4] |= (ls[j] >> 4) << 6
			sc[j] |= (lm[j] >> 4) << 6
		}
	}
	putHalf(b, dBlock)
	putHalf(b[2:], mBlock)
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

// groupMaxEps is ggml's GROUP_MAX_EPS: below it a group of scales counts as all zero.
const groupMaxEps = 1e-15

// makeQPQuants is ggml's make_qp_quants: the scale of the n non-negative values x quantized to 0..nmax into l,
// chosen by weighted squared error (weights qw) over nine candidate scales and then improved one value at a time.
func makeQPQuants(nmax int, x []float32, l []uint8, qw []float32) float32 {
	n := len(x)
	var mx float32
	for _, v := range x {
		mx = max(mx, v)
	}
	if mx < groupMaxEps {
		clear(l[:n])
		return 0
	}
	iscale := float32(nmax) / mx
	for i, v := range x {
		l[i] = uint8(nearestInt(float32(iscale * v)))
	}
	scale := 1 / iscale
	var best float32
	for i, v := range x {
		diff := v - float32(scale*float32(l[i]))
		best += float32(qw[i] * float32(diff*diff))
	}
	for is := -4; is <= 4; is++ {
		if is == 0 {
			continue
		}
		iscaleIs := (float32(0.1*float32(is)) + float32(nmax)) / mx
		scaleIs := 1 / iscaleIs
		var mse float32
		for i, v := range x {
			q := min(nmax, nearestInt(float32(iscaleIs*v)))
			diff := v - float32(scaleIs*float32(q))
			mse += float32(qw[i] * float32(diff*diff))
		}
		if mse < best {
			best, iscale = mse, iscaleIs
		}
	}
	var sumLX, sumL2 float32
	for i, v := range x {
		q := min(nmax, nearestInt(float32(iscale*v)))
		l[i] = uint8(q)
		sumLX += float32(float32(qw[i]*v) * float32(q))
		sumL2 += float32(float32(qw[i]*float32(q)) * float32(q))
	}
	for range 5 {
		changed := 0
		for i, v := range x {
			w := qw[i]
			slx := sumLX - float32(float32(w*v)*float32(l[i]))
			sl2 := sumL2 - float32(float32(w*float32(l[i]))*float32(l[i]))
			if slx > 0 && sl2 > 0 {
				nl := min(nmax, nearestInt(float32(v*sl2)/slx))
				if nl != int(l[i]) {
					slx += float32(float32(w*v) * float32(nl))
					sl2 += float32(float32(w*float32(nl)) * float32(nl))
					if float32(float32(slx*slx)*sumL2) > float32(float32(sumLX*sumLX)*sl2) {
						l[i], sumLX, sumL2 = uint8(nl), slx, sl2
						changed++
					}
				}
			}
		}
		if changed == 0 {
			break
		}
	}
	if sumL2 > 0 {
		return sumLX / sumL2
	}
	return 0
}
