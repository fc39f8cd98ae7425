package model

import (
	"fmt"
	"math"
	"slices"

	"github.com/layerstream/layerstream/checkpoint"
)

// Rope is one rotary embedding of a model: how many dimensions of each head rotate, and at which frequencies
// (transformers' rope types: default, linear, dynamic, yarn, llama3, longrope).
type Rope struct {
	// Dims is the number of rotated dimensions at the start of each head: head_dim, or fewer with a partial
	// rotary factor. Even.
	Dims   int
	Params checkpoint.Rope
	// MaxPositions is max_position_embeddings, which dynamic NTK scaling measures sequences against (and
	// longrope its default attention factor).
	MaxPositions int
}

// RopeOptions are the rotary variants a family implements beyond whole heads and the common scaling types
// (default, linear, dynamic, yarn, llama3); the others refuse them.
type RopeOptions struct {
	// Partial: partial_rotary_factor rotates the first head_dim·factor dimensions of each head (Phi-3).
	Partial bool
	// LongRope: longrope (Phi-3's "su") scaling, whose factors depend on the pass's length; a family allowing it
	// also decides what happens to cached keys when a sequence outgrows the short factors (Plan.Recompute).
	// Longrope with equal short and long factors does not depend on the length (fixed per-pair divisors: how
	// a GGUF file's rope_freqs.weight reads), and every family takes it.
	LongRope bool
	// Proportional: Gemma 4's proportional rope, which turns the whole head with the frequencies of its first
	// partial_rotary_factor·head_dim/2 pairs and 0 for the others (those dimensions pass unchanged).
	Proportional bool
}

// NewRope checks p for heads of headDim dimensions, refusing what opts does not allow.
func NewRope(p checkpoint.Rope, headDim, maxPositions int, opts RopeOptions) (Rope, error) {
	r := Rope{Dims: headDim, Params: p, MaxPositions: maxPositions}
	if p.Type == "proportional" {
		if !opts.Proportional {
			return r, fmt.Errorf("rope type %q is not implemented for this family", p.Type)
		}
		if f := p.PartialRotaryFactor; f < 0 || f > 1 {
			return r, fmt.Errorf("partial_rotary_factor must be in [0, 1], got %g", f)
		}
		if p.Factor < 0 {
			return r, fmt.Errorf("rope factor must be positive, got %g", p.Factor)
		}
	} else if f := p.PartialRotaryFactor; f != 0 && f != 1 {
		if !opts.Partial {
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
	case "default", "linear", "dynamic", "yarn", "llama3", "proportional":
	case "longrope":
		if !opts.LongRope && !slices.Equal(p.ShortFactor, p.LongFactor) {
			return r, fmt.Errorf("rope type %q with different short and long factors is not implemented for this family", p.Type)
		}
		if err := checkLongRope(p, r.Dims, maxPositions); err != nil {
			return r, err
		}
	default:
		return r, fmt.Errorf("rope type %q is not implemented", p.Type)
	}
	if p.Type == "llama3" && !(p.HighFreqFactor > p.LowFreqFactor && p.LowFreqFactor > 0) {
		return r, fmt.Errorf("rope type llama3 needs 0 < low_freq_factor < high_freq_factor, got %g and %g", p.LowFreqFactor, p.HighFreqFactor)
	}
	return r, nil
}

// checkLongRope refuses longrope parameters transformers would not compute, or would compute differently in
// its two versions: a factor per rotated pair in short_factor and long_factor, positive; a "factor" other than
// max_position_embeddings / original_max_position_embeddings, which transformers 4 overrides with that ratio
// and transformers 5 keeps.
func checkLongRope(p checkpoint.Rope, dims, maxPositions int) error {
	for _, l := range []struct {
		name string
		v    []float64
	}{{"short_factor", p.ShortFactor}, {"long_factor", p.LongFactor}} {
		if len(l.v) != dims/2 {
			return fmt.Errorf("longrope %s has %d entries, want %d (one per rotated pair of the %d rotated dimensions)", l.name, len(l.v), dims/2, dims)
		}
		for i, f := range l.v {
			if !(f > 0) || math.IsInf(f, 0) {
				return fmt.Errorf("longrope %s[%d] must be a positive number, got %g", l.name, i, f)
			}
		}
	}
	ratio := float64(maxPositions) / float64(p.OriginalMaxPositionEmbeddings)
	if p.Factor != 0 && p.Factor != ratio {
		return fmt.Errorf("longrope factor %g differs from max_position_embeddings / original_max_position_embeddings = %d / %d: transformers 4 would use the ratio, transformers 5 the factor", p.Factor, maxPositions, p.OriginalMaxPositionEmbeddings)
	}
	if p.AttentionFactor != nil && !(*p.AttentionFactor > 0) {
		return fmt.Errorf("longrope attention_factor must be positive, got %g", *p.AttentionFactor)
	}
	return nil
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
	case "longrope":
		scale = r.longRope(inv, seqLen)
	case "proportional":
		r.proportional(inv)
	}
	return inv, scale
}

// longRope divides the frequencies by LongRoPE's per-pair factors, as transformers'
// _compute_longrope_parameters does: the long ones for a pass reaching past original_max_position_embeddings,
// else the short ones. It returns the attention factor on cos and sin: attention_factor, else
// √(1 + ln(f) / ln(original)) with f = max_position_embeddings / original_max_position_embeddings (1 when f ≤ 1).
func (r Rope) longRope(inv []float64, seqLen int) float64 {
	p := r.Params
	orig := p.OriginalMaxPositionEmbeddings
	factors := p.ShortFactor
	if seqLen > orig {
		factors = p.LongFactor
	}
	for i := range inv {
		inv[i] /= factors[i]
	}
	if p.AttentionFactor != nil {
		return *p.AttentionFactor
	}
	f := float64(r.MaxPositions) / float64(orig)
	if f <= 1 {
		return 1
	}
	return math.Sqrt(1 + math.Log(f)/math.Log(float64(orig)))
}

// proportional keeps the first partial_rotary_factor·head_dim/2 frequencies (all without the factor) and
// zeroes the others, then divides them by the rope factor, as transformers' _compute_proportional_rope_parameters.
func (r Rope) proportional(inv []float64) {
	p := r.Params
	f := p.PartialRotaryFactor
	if f == 0 {
		f = 1
	}
	angles := int(math.Floor(f * float64(r.Dims) / 2))
	for i := range inv {
		if i >= angles {
			inv[i] = 0
		}
		if p.Factor != 0 {
			inv[i] /= p.Factor
		}
	}
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
