package quant

import (
	"fmt"
	"math"
	"slices"
)

// Q8_0Candidates is how many scales QuantizeQ8_0Search tries per block: max|x|/m for m = 127, 126, …, 112, each
// as it is and refitted by least squares to the integers it rounds to. (Twice as many, half as far apart, did
// no better on SmolLM2.)
const Q8_0Candidates = 16

// QuantizeQ8_0Search encodes src, rows of cols values, as Q8_0 into dst (len(src)/32 blocks of 34 bytes) as
// Quantize does, except that each block's scale is the one, of Q8_0Candidates, that minimizes the block's
// weighted squared error Σwᵢ·(xᵢ − d·qᵢ)² with d as stored (in float16), where wᵢ = importance[i mod cols] (an
// importance matrix's mean squared input of the column, package imatrix) or 1 when importance is nil; a block
// whose importances are all zero is weighted uniformly. The first candidate is Quantize's scale, so no block's
// (weighted) error exceeds Quantize's.
//
// Round-to-nearest with the largest magnitude on ±127 leaves every weight within half a step; the search moves
// the grid so that the block's error lands lower: 0.76 of round-to-nearest's squared error on Gaussian weights,
// and on SmolLM2-135M about half the mean KL divergence that Q8_0 weights add; with importances, so that the
// weights that meet large inputs land near grid points, a third (docs/performance-log.md, "q8 shards at 99%"). It costs about 60 ns a
// weight on one core, against 1-2 for Quantize.
func QuantizeQ8_0Search(dst []byte, src []float32, cols int, importance []float32) error {
	f, _ := Q8_0.Format()
	switch {
	case cols <= 0 || cols%QK != 0 || len(src)%cols != 0:
		return fmt.Errorf("quantize Q8_0: %d values in rows of %d: want rows of a whole number of %d-element blocks", len(src), cols, QK)
	case len(dst) != len(src)/QK*f.BlockBytes:
		return fmt.Errorf("quantize Q8_0: %d elements into %d bytes, want %d", len(src), len(dst), len(src)/QK*f.BlockBytes)
	case importance != nil && len(importance) != cols:
		return fmt.Errorf("quantize Q8_0: %d importances for rows of %d columns", len(importance), cols)
	}
	var ones [QK]float32
	for i := range ones {
		ones[i] = 1
	}
	for i := 0; i < len(src); i += QK {
		w := ones[:]
		if importance != nil {
			w = importance[i%cols:][:QK]
			if !slices.ContainsFunc(w, func(v float32) bool { return v > 0 }) {
				w = ones[:]
			}
		}
		searchQ8_0(dst[i/QK*f.BlockBytes:][:f.BlockBytes], src[i:i+QK], w)
	}
	return nil
}

// searchQ8_0 encodes one block of 32 values as QuantizeQ8_0Search does, with weights w.
func searchQ8_0(b []byte, x, w []float32) {
	var amax float32
	for _, v := range x {
		amax = max(amax, abs32(v))
	}
	if amax == 0 {
		clear(b)
		return
	}
	var sxx float64
	var wx [QK]float64
	for j, v := range x {
		wx[j] = float64(w[j]) * float64(v)
		sxx += float64(wx[j] * float64(v))
	}
	bestErr, bestD, bestC := 0.0, float32(0), -1
	for c := range Q8_0Candidates {
		d := amax / float32(127-c)
		id := inverse(d)
		var sxq, sqq [4]float64 // four sums: one chain of dependent adds took most of the time
		for j := 0; j < QK; j += 4 {
			for k := range 4 {
				r := float64(roundQ8(x[j+k] * id))
				sxq[k] += float64(wx[j+k] * r)
				sqq[k] += float64(float64(w[j+k]) * r * r)
			}
		}
		xq, qq := (sxq[0]+sxq[1])+(sxq[2]+sxq[3]), (sqq[0]+sqq[1])+(sqq[2]+sqq[3])
		try := func(d float32) {
			dh := float64(HalfToFloat32(Float32ToHalf(d)))
			// Explicitly rounded products here and above, so that a GOAMD64=v3 build (which may fuse a multiply
			// and an add) picks the same candidate.
			if e := sxx - float64(2*dh*xq) + float64(dh*dh*qq); bestC < 0 || e < bestErr {
				bestErr, bestD, bestC = e, float32(dh), c
			}
		}
		try(d)
		if qq > 0 {
			try(float32(xq / qq))
		}
	}
	// The integers of the winning candidate, as it rounded them.
	id := inverse(amax / float32(127-bestC))
	putHalf(b, bestD)
	for j, v := range x {
		b[2+j] = byte(int8(roundQ8(v * id)))
	}
}

// roundQ8 is roundAway(p) clamped to ±127: float64(p) + 0.5 is exact for the |p| ≤ 127 (and a rounding) of
// p = x/d with d ≥ max|x|/127, so the truncation rounds half away from zero as C's roundf does. The clamp comes
// before the conversion, and a NaN (a NaN weight, or 0·Inf where 1/d overflows) gives 0, so that every
// architecture writes the same bytes (Go leaves the conversion of NaN and out-of-range values to the CPU).
func roundQ8(p float32) int32 {
	f := float64(p)
	if f != f {
		return 0
	}
	return int32(min(max(f+math.Copysign(0.5, f), -127), 127))
}
