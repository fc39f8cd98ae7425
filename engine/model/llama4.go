package model

import (
	"fmt"
	"slices"

	"github.com/layerstream/layerstream/checkpoint"
)

// Llama 4 (Llama4ForCausalLM, and Scout's and Maverick's Llama4ForConditionalGeneration read as a text model):
// Llama's attention without biases whose rotary layers (no_rope_layers 1; by default all but every
// no_rope_layer_interval-th) attend within chunks of attention_chunk_size positions (layer_types
// "chunked_attention") and normalise each head of the rotated q and k without weight (use_qk_norm), while the
// others attend to every position without rotary embeddings, their queries scaled by position
// (attn_temperature_tuning: 1 + attn_scale·ln(1 + ⌊(p + 1)/floor_scale⌋)). The layers moe_layers lists (by
// default every interleave_moe_layer_step-th) have a mixture of num_local_experts experts of intermediate_size
// and a shared expert of the same width: each row goes to its num_experts_per_tok best router logits, each
// expert computing on the row times the sigmoid of its logit; the others a dense MLP of intermediate_size_mlp.
// Its complex rotary embedding turns adjacent pairs of dimensions; the checkpoint reads q and k in rotate-half
// order (checkpoint.Architecture.RotaryPairs), which is the same attention. The routed experts are stored fused
// (checkpoint.Architecture.FusedExperts): each expert reads as one gate_up_proj and one down_proj.
func init() {
	Register("Llama4ForCausalLM", llama4)
	Register("Llama4ForConditionalGeneration", llama4)
}

func llama4(c *checkpoint.Config) (Architecture, error) {
	act, err := ActivationFor("hidden_act", c.HiddenAct)
	if err != nil {
		return nil, err
	}
	if c.RopeByLayerType != nil {
		return nil, fmt.Errorf("rope_parameters nested by layer type is not implemented for Llama 4")
	}
	rope, err := NewRope(c.Rope, c.HeadDim, c.MaxPositionEmbeddings, RopeOptions{})
	if err != nil {
		return nil, err
	}
	d := newDecoderWith(c, act, rope)
	d.qkvBias, d.oBias, d.mlpName, d.inter = false, false, "feed_forward", c.IntermediateSizeMLP
	if d.inter <= 0 {
		return nil, fmt.Errorf("intermediate_size_mlp %d is not positive", c.IntermediateSizeMLP)
	}
	if c.UseQKNorm {
		d.qkNorm = qkNormRotated
	}
	if err := llama4Attention(d, c); err != nil {
		return nil, err
	}
	sparse, err := llama4Sparse(c)
	if err != nil {
		return nil, err
	}
	m, err := newMoE(c, c.IntermediateSize, false)
	if err != nil {
		return nil, err
	}
	m.route.Score, m.route.WeighInputs = LogitSigmoidScores, true
	m.router, m.prefix, m.gate, m.up, m.down = "feed_forward.router", "feed_forward.experts", "gate_up_proj", "", "down_proj"
	m.fusedGateUp = true
	m.shared, m.sharedInter = "feed_forward.shared_expert", c.IntermediateSize
	d.sparseLayers(m, sparse)
	return d.finish(), nil
}

// llama4Attention gives each layer its rotary embedding or none (no_rope_layers, else every
// no_rope_layer_interval-th layer without), its chunk (layer_types, else chunked where rotary and
// attention_chunk_size is set) and, on the layers without rotary embeddings, the temperature tuning.
func llama4Attention(d *decoder, c *checkpoint.Config) error {
	if c.NoRopeLayerInterval <= 0 && len(c.NoRopeLayers) == 0 {
		return fmt.Errorf("no_rope_layer_interval %d is not positive", c.NoRopeLayerInterval)
	}
	if c.AttnTemperatureTuning && c.FloorScale <= 0 {
		return fmt.Errorf("floor_scale %d is not positive", c.FloorScale)
	}
	if c.LayerTypes == nil && c.AttentionChunkSize == nil {
		// transformers 5 makes every layer full attention then; 4.57 makes the rotary layers chunked, without a size.
		return fmt.Errorf("attention_chunk_size null without layer_types: transformers 4 and 5 read it differently; give layer_types")
	}
	for i := range d.plan.Layers {
		rotary := (i+1)%max(c.NoRopeLayerInterval, 1) != 0
		if len(c.NoRopeLayers) > 0 { // an empty list means the default, as transformers reads it
			switch c.NoRopeLayers[i] {
			case 0, 1:
				rotary = c.NoRopeLayers[i] == 1
			default:
				return fmt.Errorf("no_rope_layers[%d] is %d (want 1 for a rotary layer, 0 for none)", i, c.NoRopeLayers[i])
			}
		}
		k := &d.plan.Layers[i]
		if !rotary {
			k.Rope = NoRope
			if c.AttnTemperatureTuning {
				k.QueryScale = QueryScale{Beta: c.AttnScale, Floor: c.FloorScale, Shift: 1}
			}
		}
		chunked := rotary
		if c.LayerTypes != nil {
			switch lt := c.LayerTypes[i]; lt {
			case "chunked_attention", "full_attention":
				chunked = lt == "chunked_attention"
			default:
				return fmt.Errorf("layer_types[%d] %q is not implemented (supported: chunked_attention, full_attention)", i, lt)
			}
		}
		if !chunked {
			continue
		}
		if c.AttentionChunkSize == nil || *c.AttentionChunkSize <= 0 {
			return fmt.Errorf("layer_types[%d] is chunked_attention but attention_chunk_size is %s", i, chunkSize(c.AttentionChunkSize))
		}
		k.Chunk = *c.AttentionChunkSize
	}
	return nil
}

// chunkSize is attention_chunk_size for an error message.
func chunkSize(n *int) string {
	if n == nil {
		return "null"
	}
	return fmt.Sprint(*n)
}

// llama4Sparse is which layers have experts: moe_layers, else every interleave_moe_layer_step-th layer from
// the step's own (Llama4TextConfig: range(step - 1, layers, step)).
func llama4Sparse(c *checkpoint.Config) (func(i int) bool, error) {
	if c.MoELayers != nil {
		for _, l := range c.MoELayers {
			if l < 0 || l >= c.NumHiddenLayers {
				return nil, fmt.Errorf("moe_layers lists layer %d of %d", l, c.NumHiddenLayers)
			}
		}
		return func(i int) bool { return slices.Contains(c.MoELayers, i) }, nil
	}
	step := c.InterleaveMoELayerStep
	if step <= 0 {
		return nil, fmt.Errorf("interleave_moe_layer_step %d is not positive", step)
	}
	return func(i int) bool { return (i+1)%step == 0 }, nil
}
