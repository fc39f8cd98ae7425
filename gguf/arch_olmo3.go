package gguf

import "fmt"

// olmo3Config reads an olmo2 file with sliding-window layers as OLMo 3 (Olmo3ForCausalLM), as llama.cpp's olmo2
// loader and graph compute it (src/models/olmo2.cpp): the layers attention.sliding_window_pattern marks (else
// three of every four, the fourth full) attend within the window; the full-attention layers rotate with
// rope.freq_base and the rope scaling, the sliding ones with rope.freq_base unscaled. llama.cpp reads
// rope.freq_base_swa but its olmo2 graph rotates every layer with rope.freq_base: a file whose freq_base_swa
// differs is refused rather than read either way. The rotary embeddings are written as transformers 5's
// rope_parameters by layer type, OLMo 3's own spelling.
func olmo3Config(m archMeta, cfg map[string]any) error {
	theta := cfg["rope_theta"]
	if v, ok, err := m.Float(m.key("rope.freq_base_swa")); err != nil {
		return err
	} else if ok && float32JSON(v) != theta {
		return fmt.Errorf("metadata %s is %g, %s %v: llama.cpp's olmo2 graph rotates the sliding layers with the latter; refusing the contradiction", m.key("rope.freq_base_swa"), v, m.key("rope.freq_base"), theta)
	}
	full := map[string]any{"rope_type": "default", "rope_theta": theta}
	if rs, ok := cfg["rope_scaling"].(map[string]any); ok {
		for k, v := range rs {
			full[k] = v
		}
	}
	cfg["rope_parameters"] = map[string]any{"full_attention": full,
		"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": theta}}
	delete(cfg, "rope_theta")
	delete(cfg, "rope_scaling")
	cfg["architectures"], cfg["model_type"] = []string{"Olmo3ForCausalLM"}, "olmo3"
	return slidingLayerTypes(m, cfg, 4)
}
