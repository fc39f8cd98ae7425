package gguf

// SmolLM3: Llama's tensors (q/k rows in llama.cpp's interleaved rotary order), with some layers computed without
// rotary embeddings. The file does not say which: llama.cpp hard-codes every fourth (layer i skips rope when
// (i+1) % 4 == 0, SmolLM3-3B's no_rope_layer_interval), and so does this mapping, as Hugging Face's
// no_rope_layers (1: the layer rotates).
func init() {
	register("smollm3", archInfo{hf: "SmolLM3ForCausalLM", interleavedRotary: true, config: func(m archMeta, cfg map[string]any) error {
		const step = 4 // llama.cpp's n_no_rope_layer_step for smollm3
		layers := cfg["num_hidden_layers"].(int)
		rope := make([]int, layers)
		for i := range rope {
			if (i+1)%step != 0 {
				rope[i] = 1
			}
		}
		cfg["no_rope_layers"] = rope
		cfg["no_rope_layer_interval"] = step
		return nil
	}})
}
