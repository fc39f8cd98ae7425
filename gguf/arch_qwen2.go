package gguf

// Qwen2 and Qwen2.5: the Llama tensors with q/k/v biases, in Hugging Face's rotary order.
func init() {
	register("qwen2", archInfo{hf: "Qwen2ForCausalLM"})
}
