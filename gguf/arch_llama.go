package gguf

// Llama (and what llama.cpp's converter writes as llama: Mistral, SmolLM2, TinyLlama...): the shared tensors and
// keys, with q/k rows in llama.cpp's interleaved rotary order.
func init() {
	register("llama", archInfo{hf: "LlamaForCausalLM", interleavedRotary: true})
}
