package model

import (
	"fmt"
	"math"

	"github.com/layerstream/layerstream/checkpoint"
)

// Gemma 2: Llama's decoder with (1 + w) RMSNorms before and after each branch (input_layernorm and
// post_attention_layernorm around attention, pre_feedforward_layernorm and post_feedforward_layernorm around
// the MLP), the embeddings scaled by √hidden_size, hidden_activation (gelu_pytorch_tanh), attention scores
// scaled by query_pre_attn_scalar^-½ and soft-capped at attn_logit_softcapping, logits soft-capped at
// final_logit_softcapping, and local layers (sliding_window) alternating with global ones, the first local.
func init() {
	Register("Gemma2ForCausalLM", func(c *checkpoint.Config) (Architecture, error) {
		if c.RopeByLayerType != nil {
			return nil, fmt.Errorf("rope_parameters nested by layer type is not implemented for Gemma 2 (one rotary embedding serves every layer)")
		}
		rope, err := NewRope(c.Rope, c.HeadDim, c.MaxPositionEmbeddings, RopeOptions{})
		if err != nil {
			return nil, err
		}
		d, err := gemmaDecoder(c, rope)
		if err != nil {
			return nil, err
		}
		if c.AttnLogitSoftcapping != nil {
			if !(*c.AttnLogitSoftcapping > 0) {
				return nil, fmt.Errorf("attn_logit_softcapping must be positive or null, got %g", *c.AttnLogitSoftcapping)
			}
			d.attn.SoftCap = *c.AttnLogitSoftcapping
		}
		if err := d.slidingLayers(c, c.SlidingWindow, true, func(i int) bool { return i%2 == 0 }); err != nil {
			return nil, err
		}
		return d.finish(), nil
	})
}

// gemmaDecoder is what Gemma 2 and Gemma 3 share: the decoder with (1 + w) norms around both branches,
// hidden_activation, the query_pre_attn_scalar attention scale, the final logit soft-cap and the √hidden_size
// embedding scale; ropes[0] serves every layer until the family assigns others.
func gemmaDecoder(c *checkpoint.Config, ropes ...Rope) (*decoder, error) {
	if c.UseBidirectionalAttention.True() {
		return nil, fmt.Errorf("use_bidirectional_attention true (an encoder such as EmbeddingGemma) is not implemented: layerstream runs causal decoders")
	}
	act, err := ActivationFor("hidden_activation", c.HiddenActivation)
	if err != nil {
		return nil, err
	}
	if !(c.QueryPreAttnScalar > 0) {
		return nil, fmt.Errorf("query_pre_attn_scalar must be positive, got %g", c.QueryPreAttnScalar)
	}
	d := newDecoderWith(c, act, ropes...)
	d.normOffset = 1
	d.attn.Scale = 1 / math.Sqrt(c.QueryPreAttnScalar)
	return d, gemmaShared(d, c)
}

// gemmaShared configures what every Gemma's decoder has: norms before and after both branches, the final logit
// soft-cap and the √hidden_size embedding scale.
func gemmaShared(d *decoder, c *checkpoint.Config) (err error) {
	d.preAttnNorm, d.postAttnNorm = "input_layernorm.weight", "post_attention_layernorm.weight"
	d.preMLPNorm, d.postMLPNorm = "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"
	if c.FinalLogitSoftcapping != nil {
		if !(*c.FinalLogitSoftcapping > 0) {
			return fmt.Errorf("final_logit_softcapping must be positive or null, got %g", *c.FinalLogitSoftcapping)
		}
		d.logitSoftCap = *c.FinalLogitSoftcapping
	}
	d.plan.EmbedScale, err = gemmaEmbedScale(c)
	return err
}

// gemmaEmbedScale is √hidden_size as transformers multiplies the embeddings by it: a float32 tensor converted
// to the dtype the model is loaded in, which with transformers' default dtype "auto" is config.json's (bf16:
// √3072 = 55.4256 becomes 55.5, as in Google's own implementation). layerstream's activations are float32, so
// the scale is that rounded value in float32. A config without a dtype (transformers would take the weights')
// is refused: the scale would be a guess.
func gemmaEmbedScale(c *checkpoint.Config) (float64, error) { return gemmaScale(c, c.HiddenSize) }

// gemmaScale is √n rounded as gemmaEmbedScale rounds √hidden_size (Gemma 4's per-layer table: √P).
func gemmaScale(c *checkpoint.Config, n int) (float64, error) {
	s := float64(float32(math.Sqrt(float64(n))))
	switch c.TorchDType {
	case "float32":
		return s, nil
	case "bfloat16":
		return float64(math.Float32frombits(uint32(checkpoint.Float32ToBF16Bits(float32(s))) << 16)), nil
	case "float16":
		// 11 significant bits, ties to even (the scale is a normal float16 number: hidden_size < 2^32).
		q := math.Ldexp(1, int(math.Floor(math.Log2(s)))-10)
		return math.RoundToEven(s/q) * q, nil
	case "":
		return 0, fmt.Errorf("config.json has no dtype (or torch_dtype): Gemma scales its embeddings by √hidden_size rounded to the model's dtype, so it must be known")
	}
	return 0, fmt.Errorf("dtype %q is not implemented for Gemma's embedding scale (float32, bfloat16, float16)", c.TorchDType)
}
