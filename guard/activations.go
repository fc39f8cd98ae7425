package guard

import (
	"fmt"
	"math"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/sections"
)

// The problems CheckActivations detects.
const (
	KindActivationNaN   Kind = "activation-nan"   // the residual stream holds a NaN or ±Inf after some layer
	KindActivationRange Kind = "activation-range" // the residual stream's magnitude is beyond any healthy model's
)

// Healthy magnitudes of the residual stream (the largest |x| after any decoder layer, prompt included),
// measured in float32 with greedy generations of 64 tokens (`layerstream generate -v` logs the peak as
// "residual stream peak"; TROUBLESHOOTING.md "Activations out of range" has the commands): stories260K 8.8 to
// 10.6 (3 prompts), aidreams260K 1.2 to 1.5 (3 prompts), SmolLM2-135M-Instruct 1.99e4 to 2.49e4 (its 12
// reference prompts), always after layer 11 on the prompt: a "massive activation", as large models show them
// (published figures: Llama-2-7B 2.6e3, Mixtral 7.1e3; Gemma's checkpoints exceed float16's 65504). Float32
// itself breaks down far later: RMSNorm's sum of squares overflows once |x| passes about 1.8e19/sqrt(hidden)
// (3e17 at hidden 4096), after which every normalised value is 0.
const (
	// f32Limit is ActivationLimit for float32 and bfloat16 activations (bfloat16 has float32's exponent
	// range): 4000 times the largest healthy magnitude measured (SmolLM2's 2.5e4), and a billion times below
	// float32's breakdown.
	f32Limit = 1e8
	// f16Max is float16's largest finite value: the overflow behind most "!!!!" outputs. ActivationLimit warns at
	// half of it, one doubling before the overflow (SmolLM2 peaks at 38% of it).
	f16Max = 65504
)

// ActivationLimit returns the magnitude of the residual stream beyond which activations of dtype dt count as
// blown up: float16 overflows at 65504 (warned at half of it); float32 and bfloat16 go on to 3.4e38, but no
// healthy model comes near the f32 limit (see the figures above).
func ActivationLimit(dt checkpoint.DType) float32 {
	if dt == checkpoint.F16 {
		return f16Max / 2
	}
	return f32Limit
}

// CheckActivations checks one forward pass's residual stream: maxAbs[l] is the largest |x| after decoder layer
// l over the positions the pass computed for the sequence (NaN or ±Inf when any value was), in activations of
// dtype dt; step is the generation step (0 for the prompt). It reports the first layer whose values are not
// finite (KindActivationNaN) and the first whose magnitude passes ActivationLimit(dt) (KindActivationRange),
// each naming its section, and records the largest finite magnitude seen (PeakActivation). It returns nil, or a
// *Problem in Strict mode. One pass over a few numbers per layer: the engine computes maxAbs as the layer's
// output goes by.
func (m *Monitor) CheckActivations(step int, maxAbs []float32, dt checkpoint.DType) error {
	limit := ActivationLimit(dt)
	var err error
	for l, v := range maxAbs {
		if v != v || math.IsInf(float64(v), 0) {
			m.nanStep, m.nanLayer = step, l
			return m.report(KindActivationNaN, step, sections.Activations, fmt.Sprintf(
				"the residual stream holds NaN or ±Inf after decoder layer %d (step %d; the layers before it were "+
					"finite): the weights of that layer are out of range or corrupted, or its activations "+
					"overflowed %s", l, step, dt))
		}
		if v > m.peak {
			m.peak, m.peakLayer, m.peakStep = v, l, step
		}
		if v > limit && err == nil && !m.warned[KindActivationRange] {
			err = m.report(KindActivationRange, step, sections.Activations, fmt.Sprintf(
				"the residual stream reaches |x| = %.3g after decoder layer %d (step %d), beyond the %.0e no "+
					"healthy model comes near in %s: that layer's weights are most likely scaled out of range "+
					"(a bad conversion), and the output is garbage even while it stays finite", v, l, step, limit, dt))
		}
	}
	return err
}

// PeakActivation returns the largest finite |x| of the residual stream CheckActivations has seen, the layer
// after which and the step at which it was seen (0, -1, -1 before any).
func (m *Monitor) PeakActivation() (value float32, layer, step int) {
	if m.peakLayer < 0 {
		return 0, -1, -1
	}
	return m.peak, m.peakLayer, m.peakStep
}

// NonFinite reports whether x holds a NaN or ±Inf: logits that no sampler can choose from.
func NonFinite(x []float32) bool { return maxAbsBits(x) >= 0x7f800000 }

// MaxAbs returns the largest |v| of x: NaN when x holds a NaN, else +Inf when it holds ±Inf. The engine
// computes it after every decoder layer for CheckActivations (about 3 GB/s here: 1.3 ms for a 512-token row of
// a 2048-wide model, against the ~1 s its layer takes).
func MaxAbs(x []float32) float32 {
	m := maxAbsBits(x)
	if m > 0x7f800000 {
		return float32(math.NaN())
	}
	return math.Float32frombits(m)
}

// maxAbsBits returns the largest bit pattern of x's values without their sign: float32 patterns so taken order
// as the magnitudes do, with +Inf (0x7f800000) above every finite value and the NaNs above +Inf, so one integer
// maximum finds all three.
func maxAbsBits(x []float32) uint32 {
	var m uint32
	for _, v := range x {
		m = max(m, math.Float32bits(v)&0x7fffffff)
	}
	return m
}
