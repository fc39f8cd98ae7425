package gguf

// refusedArchs say why an architecture layerstream computes from safetensors is not read from GGUF.
var refusedArchs = map[string]string{
	// The converter splits Qwen3-Next's in_proj_qkvz, grouped per key head, into Qwen3.5's separate attn_qkv and
	// attn_gate, but keeps in_proj_ba grouped (ssm_ba): Qwen3.5's in_proj_b and in_proj_a are not one region of
	// the file each, and layerstream's DeltaNet reads either all its projections grouped or none.
	"qwen3next": "llama.cpp's converter leaves Qwen3-Next's DeltaNet projections half regrouped (attn_qkv and attn_gate separate, ssm_ba grouped per key head), a layout layerstream's DeltaNet does not read; its safetensors checkpoints are read",
}
