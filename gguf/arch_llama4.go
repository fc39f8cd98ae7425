package gguf

import "fmt"

// Llama 4 (llama.cpp's llama4: Scout, Maverick as text models). The converter keeps Hugging Face's q/k rows, whose
// rotary pairs are already adjacent (llama.cpp's normal rope), read back in rotate-half order as llama's are; it writes the
// llama3 rope scaling as rope_freqs.weight (llama's longrope reading); a layer is a mixture of experts when
// (i + 1) is a multiple of interleave_moe_layer_step, with expert_feed_forward_length experts and shared expert,
// the others a dense MLP of feed_forward_length (so the layers differ in shape: layerShapes). The router takes the top experts_per_token logits and scales the
// chosen experts' inputs by their sigmoid. The gate and up experts read as one gate_up_proj per expert, gate rows
// first, as the family binds them.
//
// llama.cpp's graph fixes what the checkpoint's config says and the file does not (src/models/llama4.cpp): chunked
// attention with a chunk of 8192 on three layers in four (the fourth full), rotary embeddings on those three and
// none on the fourth, whose queries take the temperature 1 + 0.1·ln(1 + ⌊(p + 1) / 8192⌋), and weightless q/k norms
// after rotary unless the file has 128 experts (Maverick). So the file means that config, whatever the checkpoint
// said; what llama.cpp reads otherwise is refused: an attention.sliding_window of 0 (llama.cpp's MobileLLM reading,
// every layer full and rotary but the last), and, as keys this reader does not list, a sliding window pattern,
// a separate rotary base for the chunked layers, an attention scale and an experts' weight scale.
func init() {
	register("llama4", archInfo{hf: "Llama4ForCausalLM", interleavedRotary: true, configTensors: []string{"rope_freqs.weight"}, layerShapes: true,
		names: map[string]string{
			"ffn_gate.weight":       "feed_forward.gate_proj.weight",
			"ffn_up.weight":         "feed_forward.up_proj.weight",
			"ffn_down.weight":       "feed_forward.down_proj.weight",
			"ffn_gate.bias":         "",
			"ffn_up.bias":           "",
			"ffn_down.bias":         "",
			"ffn_gate_inp.weight":   "feed_forward.router.weight",
			"ffn_gate_shexp.weight": "feed_forward.shared_expert.gate_proj.weight",
			"ffn_up_shexp.weight":   "feed_forward.shared_expert.up_proj.weight",
			"ffn_down_shexp.weight": "feed_forward.shared_expert.down_proj.weight",
		}, keys: []string{"expert_feed_forward_length", "interleave_moe_layer_step"},
		moe: &moeInfo{countKey: "num_local_experts", experts: map[string]string{
			"ffn_gate_exps.weight": "feed_forward.experts.%d.gate_up_proj.weight", "ffn_up_exps.weight": "",
			"ffn_down_exps.weight": "feed_forward.experts.%d.down_proj.weight",
		}, gateUp: map[string]string{"ffn_gate_exps.weight": "ffn_up_exps.weight"}},
		config: llama4Config})
}

// Llama 4's values that llama.cpp's llama4 graph fixes (llama4LayerPeriod: its swa pattern and no-rope step).
const (
	llama4Chunk       = 8192
	llama4TempFloor   = 8192
	llama4TempScale   = 0.1
	llama4LayerPeriod = 4
	llama4NoQKNorm    = 128 // experts of the one Llama 4 whose q/k are not normed (Maverick)
)

// llama4Config writes the config llama.cpp computes a llama4 file with (see the architecture's comment).
func llama4Config(m archMeta, cfg map[string]any) error {
	if v, ok, err := m.Int(m.key("attention.sliding_window")); err != nil {
		return err
	} else if ok {
		if v == 0 {
			return fmt.Errorf("metadata %s is 0: llama.cpp's llama4 without chunked attention (every layer full, rotary on all but the last) is not supported", m.key("attention.sliding_window"))
		}
		delete(cfg, "sliding_window") // llama.cpp's chunk is 8192 whatever the key says
	}
	inter, ok, err := m.Int(m.key("expert_feed_forward_length"))
	if err != nil {
		return err
	} else if !ok || inter <= 0 {
		return fmt.Errorf("metadata %s is missing or not positive: llama.cpp requires the experts' width", m.key("expert_feed_forward_length"))
	}
	step, ok, err := m.Int(m.key("interleave_moe_layer_step"))
	if err != nil {
		return err
	} else if !ok || step < 0 {
		return fmt.Errorf("metadata %s is missing or negative: llama.cpp requires it", m.key("interleave_moe_layer_step"))
	}
	layers := cfg["num_hidden_layers"].(int)
	moe, types, noRope := []int{}, make([]string, layers), make([]int, layers)
	for i := range layers {
		if step > 0 && (i+1)%step == 0 {
			moe = append(moe, i)
		}
		types[i], noRope[i] = "chunked_attention", 1
		if (i+1)%llama4LayerPeriod == 0 {
			types[i], noRope[i] = "full_attention", 0
		}
	}
	cfg["model_type"], cfg["intermediate_size_mlp"], cfg["intermediate_size"] = "llama4_text", cfg["intermediate_size"], inter
	cfg["interleave_moe_layer_step"], cfg["moe_layers"], cfg["layer_types"] = step, moe, types
	cfg["no_rope_layers"], cfg["no_rope_layer_interval"] = noRope, llama4LayerPeriod
	cfg["attention_chunk_size"], cfg["attn_temperature_tuning"] = llama4Chunk, true
	cfg["floor_scale"], cfg["attn_scale"] = llama4TempFloor, llama4TempScale
	cfg["use_qk_norm"] = cfg["num_local_experts"] != llama4NoQKNorm
	return ropeFreqs(m, cfg)
}
