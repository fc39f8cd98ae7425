package model

import (
	"fmt"
	"math"

	"github.com/layerstream/layerstream/checkpoint"
)

// Rope is one rotary embedding of a model: how many dimensions of each head rotate, and at which frequencies
// (transformers' rope types: default, linear, dynamic, yarn, llama3).
type Rope struct {
	// Dims is the number of rotated dimensions at the start of each head: head_dim, or fewer with a partial
	// rotary factor. Even.
	Dims   int
	Params checkpoint.Rope
	// MaxPositions is max_position_embeddings, which dynamic NTK scaling measures sequences against.
	MaxPositions int
}

// NewRope checks p for heads of headDim dimensions. partial says whether the family rotates part of a head
// (Phi-3's partial_rotary_factor); others refuse a factor other than 1.
func NewRope(p checkpoint.Rope, headDim, maxPositions int, partial bool) (Rope, error) {
	r := Rope{Dims: headDim, Params: p, MaxPositions: maxPositions}
	if f := p.PartialRotaryFactor; f != 0 && f != 1 {
		if !partial {
			return r, fmt.Errorf("partial_rotary_factor %g is not implemented for this family (it rotates whole heads)", f)
		}
		if !(f > 0 && f < 1) {
			return r, fmt.Errorf("partial_rotary_factor must be in (0, 1], got %g", f)
		}
		r.Dims = int(float64(headDim) * f)
	}
	if r.Dims%2 != 0 || r.Dims == 0 {
		return r, fmt.Errorf("rotary embeddings need an even number of rotated dimensions, got %d (head_dim %d)", r.Dims, headDim)
	}
	switch p.Type {
	case "default", "linear", "dynamic", "yarn", "llama3":
	default:
		return r, fmt.Errorf("rope type %q is not implemented", p.Type)
	}
	if p.Type == "llama3" && !(p.HighFreqFactor > p.LowFreqFactor && p.LowFreqFactor > 0) {
		return r, fmt.Errorf("rope type llama3 needs 0 < low_freq_factor < high_freq_factor, got %g and %g", p.LowFreqFactor, p.HighFreqFactor)
	}
	return r, nil
}

// Context is the number of positions the rope serves: max_position_embeddings, times the factor for dynamic
// NTK scaling, which extends a model past the context it was trained on.
func (r Rope) Context() int {
	if r.Params.Type == "dynamic" && r.Params.Factor > 1 {
		return int(float64(r.MaxPositions) * r.Params.Factor)
	}
	return r.MaxPositions
}

// Frequencies returns the inverse frequencies of the Dims/2 rotated pairs and the factor cos and sin are
// multiplied by, for a forward pass whose last position is seqLen-1: dynamic NTK scaling depends on it, as in
// transformers, where a pass's seq_len is its largest position + 1 (keys already cached keep the rotation they
// were written with).
func (r Rope) Frequencies(seqLen int) (inv []float64, scale float64) {
	p := r.Params
	dim := r.Dims
	base := p.Theta
	if p.Type == "dynamic" {
		s := float64(max(seqLen, r.MaxPositions))
		base *= math.Pow(p.Factor*s/float64(r.MaxPositions)-(p.Factor-1), float64(dim)/float64(dim-2))
	}
	inv = make([]float64, dim/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(base, float64(2*i)/float64(dim))
	}
	scale = 1
	switch p.Type {
	case "linear":
		for i := range inv {
			inv[i] /= p.Factor
		}
	case "llama3":
		old := float64(p.OriginalMaxPositionEmbeddings)
		lowWavelen, highWavelen := old/p.LowFreqFactor, old/p.HighFreqFactor
		for i, f := range inv {
			wavelen := 2 * math.Pi / f
			switch {
			case wavelen < highWavelen: // high frequencies are kept
			case wavelen > lowWavelen:
				inv[i] = f / p.Factor
			default: // in between, interpolated
				smooth := (old/wavelen - p.LowFreqFactor) / (p.HighFreqFactor - p.LowFreqFactor)
				inv[i] = (1-smooth)*f/p.Factor + smooth*f
			}
		}
	case "yarn":
		inv, scale = yarn(p, dim, r.MaxPositions)
	}
	return inv, scale
}

// yarn computes YaRN's frequencies (interpolated and extrapolated ones blended by a linear ramp over the
// dimensions) and its attention factor, as transformers' _compute_yarn_parameters does.
func yarn(p checkpoint.Rope, dim, maxPositions int) ([]float64, float64) {
	factor := p.Factor
	orig := float64(p.OriginalMaxPositionEmbeddings)
	if factor == 0 {
		factor = float64(maxPositions) / orig
	}
	mscale := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	var attention float64
	switch {
	case p.AttentionFactor != nil:
		attention = *p.AttentionFactor
	case p.Mscale != 0 && p.MscaleAllDim != 0:
		attention = mscale(factor, p.Mscale) / mscale(factor, p.MscaleAllDim)
	default:
		attention = mscale(factor, 1)
	}
	betaFast, betaSlow := p.BetaFast, p.BetaSlow
	if betaFast == 0 {
		betaFast = 32
	}
	if betaSlow == 0 {
		betaSlow = 1
	}
	correction := func(rotations float64) float64 {
		return float64(dim) * math.Log(orig/(rotations*2*math.Pi)) / (2 * math.Log(p.Theta))
	}
	low, high := correction(betaFast), correction(betaSlow)
	if p.Truncate == nil || *p.Truncate {
		low, high = math.Floor(low), math.Ceil(high)
	}
	low, high = max(low, 0), min(high, float64(dim-1))
	if low == high {
		high += 0.001 // as transformers does, against a division by zero
	}
	inv := make([]float64, dim/2)
	for i := range inv {
		posFreq := math.Pow(p.Theta, float64(2*i)/float64(dim))
		ramp := min(max((float64(i)-low)/(high-low), 0), 1)
		extrapolation := 1 - ramp
		inv[i] = 1/(factor*posFreq)*(1-extrapolation) + 1/posFreq*extrapolation
	}
	return inv, attention
}
