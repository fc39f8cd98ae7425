package ggml

import "math"

// ThetaScale is ggml's theta_scale, powf(base, -2/dims): the ratio between consecutive rotary frequencies. It is
// computed here in double precision and rounded, which equals glibc's powf for the bases and dimensions of
// released models (TestThetaScaleMatchesGlibc).
func ThetaScale(base float32, dims int) float32 {
	return float32(math.Pow(float64(base), float64(float32(-2)/float32(dims))))
}

// RopeAngles sets cos[i] and sin[i], i < len(cos), for position pos as ggml_rope_cache_init does without YaRN:
// θ starts at pos and is multiplied by thetaScale in float32 from one pair to the next; each pair's angle is
// freqScale·θ/freqFactors[i] (freqFactors nil: 1), whose glibc cosf and sinf are multiplied by mscale.
func RopeAngles(cos, sin []float32, pos int, thetaScale, freqScale, mscale float32, freqFactors []float32) {
	theta := float32(pos)
	for i := range cos {
		t := theta
		if freqFactors != nil {
			t /= freqFactors[i]
		}
		t *= freqScale
		cos[i], sin[i] = Cosf(t)*mscale, Sinf(t)*mscale
		theta *= thetaScale
	}
}

// Rotate is ggml's rotation of one pair (x0, x1) by an angle of cosine c and sine s, with the fused
// multiply-adds GCC makes of x0·c - x1·s and x0·s + x1·c.
func Rotate(x0, x1, c, s float32) (float32, float32) {
	return FMA32(x0, c, -(x1 * s)), FMA32(x0, s, x1*c)
}
