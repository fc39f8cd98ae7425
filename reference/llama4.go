package reference

import (
	"fmt"
	"math"
	"slices"
)

// llama4 configures Llama 4's text decoder (transformers' Llama4TextModel): layers with rotary embeddings
// (no_rope_layers 1, else all but every no_rope_layer_interval-th) attend within chunks of attention_chunk_size
// where layer_types says chunked_attention (absent: the rotary layers) and normalise each head of the rotated q
// and k without weight (use_qk_norm); the others rotate nothing and, with attn_temperature_tuning, scale their
// queries at position p by 1 + attn_scale·ln(1 + ⌊(p + 1)/floor_scale⌋); dense MLPs feed_forward.* of
// intermediate_size_mlp, experts where moe_layers says (moe.go). The checkpoint gives q and k in rotate-half
// order (checkpoint.Architecture.RotaryPairs), which m.rotate turns as Llama 4's complex pairs.
func (m *model) llama4() error {
	c := m.cfg
	m.mlp, m.denseInter = "feed_forward", c.IntermediateSizeMLP
	if c.UseQKNorm {
		m.qkNorm = "rotated"
	}
	for l := range c.NumHiddenLayers {
		rotary := (l+1)%c.NoRopeLayerInterval != 0
		if len(c.NoRopeLayers) > 0 {
			rotary = c.NoRopeLayers[l] != 0
		}
		chunked := rotary && c.AttentionChunkSize != nil
		if c.LayerTypes != nil {
			if t := c.LayerTypes[l]; t != "chunked_attention" && t != "full_attention" {
				return fmt.Errorf("config.json layer_types[%d] %q is not implemented by the reference", l, t)
			}
			chunked = c.LayerTypes[l] == "chunked_attention"
		}
		if chunked {
			if c.AttentionChunkSize == nil || *c.AttentionChunkSize <= 0 {
				return fmt.Errorf("chunked layer %d without a positive attention_chunk_size is not implemented by the reference", l)
			}
			m.chunk[l] = *c.AttentionChunkSize
		}
		if !rotary {
			m.rope[l] = -1
		}
	}
	if c.AttnTemperatureTuning {
		scale, floor := c.AttnScale, float64(c.FloorScale)
		m.qScale = func(l, p int) float64 {
			if m.rope[l] >= 0 {
				return 1
			}
			return 1 + scale*math.Log(1+math.Floor((float64(p)+1)/floor))
		}
	}
	return m.newExperts()
}

// llama4Sparse says whether layer l has experts: moe_layers, else every interleave_moe_layer_step-th layer.
func (m *model) llama4Sparse(l int) bool {
	if m.cfg.MoELayers != nil {
		return slices.Contains(m.cfg.MoELayers, l)
	}
	return m.cfg.InterleaveMoELayerStep > 0 && (l+1)%m.cfg.InterleaveMoELayerStep == 0
}
