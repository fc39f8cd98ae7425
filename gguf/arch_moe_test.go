package gguf

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
)

// openMoE parses a mixture-of-experts file made by llama.cpp's converter (scripts/fixtures/gguf_moe.py).
func openMoE(t *testing.T, name string) *File {
	t.Helper()
	return openTestdata(t, "moe", name)
}

// TestMoEMapping: each mixture-of-experts file's fused experts become one tensor per expert under the family's
// Hugging Face names, each a view of its slice of the fused bytes in order, no fused tensor is left, and the
// config carries what llama.cpp's graph fixes for the architecture (the renormalization of the chosen experts'
// weights above all, which transformers reads from the config and llama.cpp does not).
func TestMoEMapping(t *testing.T) {
	for _, c := range []struct {
		file, arch, expert string
		experts, perTok    int
		norm               any            // norm_topk_prob, nil where the family always renormalizes (Mixtral, MiniMax-M2)
		extra              map[string]any // further config values
	}{
		{"mixtral", "MixtralForCausalLM", "block_sparse_moe.experts.%d.w1.weight", 4, 2, nil, nil},
		{"qwen2_moe", "Qwen2MoeForCausalLM", "mlp.experts.%d.gate_proj.weight", 4, 2, false,
			map[string]any{"SharedExpertIntermediateSize": 48, "MoEIntermediateSize": 32, "QKVBias": true}},
		{"qwen3_moe", "Qwen3MoeForCausalLM", "mlp.experts.%d.gate_proj.weight", 8, 2, true, map[string]any{"MoEIntermediateSize": 32}},
		{"olmoe", "OlmoeForCausalLM", "mlp.experts.%d.gate_proj.weight", 8, 2, false, nil},
		{"glm4_moe", "Glm4MoeForCausalLM", "mlp.experts.%d.gate_proj.weight", 8, 2, true,
			map[string]any{"FirstKDenseReplace": 1, "NSharedExperts": 1, "NumHiddenLayers": 3, "RoutedScalingFactor": 2.5, "UseQKNorm": true,
				"NGroup": 1, "TopKGroup": 1}},
		{"glm4_moe-groups", "Glm4MoeForCausalLM", "mlp.experts.%d.gate_proj.weight", 8, 2, true,
			map[string]any{"NGroup": 4, "TopKGroup": 2}},
		{"minimax_m2", "MiniMaxM2ForCausalLM", "block_sparse_moe.experts.%d.w1.weight", 8, 2, nil, nil},
		{"qwen3moe-q4km", "Qwen3MoeForCausalLM", "mlp.experts.%d.gate_proj.weight", 4, 2, true, nil},
		{"deepseek_v3", "DeepseekV3ForCausalLM", "mlp.experts.%d.gate_proj.weight", 8, 3, true,
			map[string]any{"FirstKDenseReplace": 1, "NSharedExperts": 1, "NumHiddenLayers": 3, "RoutedScalingFactor": 2.5,
				"NGroup": 4, "TopKGroup": 2, "MoEIntermediateSize": 32}},
	} {
		t.Run(c.file, func(t *testing.T) {
			g := openMoE(t, c.file)
			ck, err := g.Checkpoint()
			if err != nil {
				t.Fatal(err)
			}
			cfg := ck.Config
			if cfg.Architectures[0] != c.arch || cfg.NumExperts != c.experts || cfg.NumExpertsPerTok != c.perTok || c.norm != nil && cfg.NormTopKProb != c.norm {
				t.Errorf("config %s, %d experts, %d per token, norm_topk_prob %v; want %s, %d, %d, %v", cfg.Architectures[0],
					cfg.NumExperts, cfg.NumExpertsPerTok, cfg.NormTopKProb, c.arch, c.experts, c.perTok, c.norm)
			}
			for k, want := range c.extra {
				if got := fmt.Sprint(configField(cfg, k)); got != fmt.Sprint(want) {
					t.Errorf("config %s = %s, want %v", k, got, want)
				}
			}
			byName := map[string]checkpoint.TensorInfo{}
			for _, ti := range ck.Tensors {
				if strings.Contains(ti.Name, "_exps") {
					t.Errorf("fused tensor %s left in the checkpoint", ti.Name)
				}
				byName[ti.Name] = ti
			}
			layer := slices.Index(sparseLayers(cfg), true)
			fused, _ := g.Tensor(fmt.Sprintf("blk.%d.ffn_gate_exps.weight", layer))
			for e := range c.experts {
				name := fmt.Sprintf("model.layers.%d.", layer) + fmt.Sprintf(c.expert, e)
				ti, ok := byName[name]
				per := fused.Size / int64(c.experts)
				if !ok || ti.Offset != fused.Offset+int64(e)*per || ti.Length != per || ti.Shape[1] != int64(cfg.HiddenSize) {
					t.Errorf("expert %d: %s %+v; want a view of bytes %d+%d of %s", e, name, ti, fused.Offset+int64(e)*per, per, fused.Name)
				}
			}
		})
	}
}

// configField reads a Config field by name (the few TestMoEMapping compares).
func configField(c *checkpoint.Config, name string) any {
	return map[string]any{"SharedExpertIntermediateSize": c.SharedExpertIntermediateSize, "MoEIntermediateSize": c.MoEIntermediateSize,
		"QKVBias": c.QKVBias, "FirstKDenseReplace": c.FirstKDenseReplace, "NSharedExperts": c.NSharedExperts,
		"NumHiddenLayers": c.NumHiddenLayers, "RoutedScalingFactor": c.RoutedScalingFactor, "UseQKNorm": c.UseQKNorm,
		"NGroup": c.NGroup, "TopKGroup": c.TopKGroup}[name]
}

// sparseLayers says which layers hold experts: all but GLM-4.5's leading dense ones.
func sparseLayers(c *checkpoint.Config) []bool {
	s := make([]bool, c.NumHiddenLayers)
	for i := range s {
		s[i] = i >= c.FirstKDenseReplace
	}
	return s
}

// TestMoERefuses: the expert keys and tensors layerstream does not implement are refused by name (group-limited
// routing outside GLM-4.5, and there with llama.cpp's bounds; llama4's keys beyond what its graph fixes), and GLM-4.5's multi-token-prediction blocks are
// left out.
func TestMoERefuses(t *testing.T) {
	u32 := func(v uint32) *Value { return &Value{Type: TypeUint32, V: v} }
	for _, c := range []struct {
		file, key string
		v         *Value
		want      string
	}{
		{"glm4_moe", "glm4moe.expert_gating_func", u32(gatingSoftmax), "glm4moe.expert_gating_func is 1 (softmax)"},
		{"glm4_moe", "glm4moe.expert_gating_func", u32(4), "glm4moe.expert_gating_func is 4"},
		{"qwen3_moe", "qwen3moe.expert_group_count", u32(4), "group-limited expert routing is not supported for qwen3moe"},
		{"glm4_moe-groups", "glm4moe.expert_group_used_count", u32(4), "want at least 1 and fewer than the groups"},
		{"glm4_moe", "glm4moe.expert_shared_count", nil, "glm4moe.expert_shared_count is missing"},
		{"glm4_moe", "glm4moe.rope.dimension_sections", &Value{Type: TypeArray, Elem: TypeInt32, V: []int32{8, 8, 0, 0}}, "glm4moe.rope.dimension_sections is not supported"},
		{"minimax_m2", "minimax-m2.expert_gating_func", nil, "minimax-m2.expert_gating_func is missing"},
		{"qwen3_moe", "qwen3moe.expert_used_count", nil, "a mixture of experts needs"},
		{"qwen3_moe", "qwen3moe.expert_count", u32(0), "a mixture of experts needs"},
		{"qwen3_moe", "qwen3moe.expert_weights_scale", f32(2), "qwen3moe.expert_weights_scale is not supported"},
		{"qwen3_moe", "qwen3moe.nextn_predict_layers", u32(1), "multi-token-prediction layers are not supported"},
		{"mixtral", "llama.expert_shared_feed_forward_length", u32(8), "llama.expert_shared_feed_forward_length is not supported"},
		// llama4: what llama.cpp reads beyond the values its graph fixes.
		{"llama4_text", "llama4.attention.sliding_window", u32(0), "llama4.attention.sliding_window is 0"},
		{"llama4_text", "llama4.attention.sliding_window_pattern", u32(2), "llama4.attention.sliding_window_pattern is not supported"},
		{"llama4_text", "llama4.rope.freq_base_swa", f32(10000), "llama4.rope.freq_base_swa is not supported"},
		{"llama4_text", "llama4.attention.scale", f32(0.5), "llama4.attention.scale is not supported"},
		{"llama4_text", "llama4.expert_feed_forward_length", nil, "llama4.expert_feed_forward_length is missing"},
		{"llama4_text", "llama4.interleave_moe_layer_step", nil, "llama4.interleave_moe_layer_step is missing"},
	} {
		g := openMoE(t, c.file)
		setKV(g, c.key, c.v)
		if _, err := g.Checkpoint(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %s = %v: got %v, want an error containing %q", c.file, c.key, c.v, err, c.want)
		}
	}
	// A dense architecture's file saying it has experts.
	g := openFamily(t, "qwen2")
	setKV(g, "qwen2.expert_count", u32(8))
	if _, err := g.Checkpoint(); err == nil || !strings.Contains(err.Error(), "qwen2.expert_count is 8: llama.cpp's qwen2 architecture has no routed experts") ||
		!strings.Contains(err.Error(), "read for deepseek2, gemma4, glm4moe, gpt-oss, llama, llama4, minimax-m2, olmoe, qwen2moe, qwen35moe, qwen3moe, qwen3next)") {
		t.Errorf("qwen2 with experts: got %v", err)
	}
	// A fused experts tensor of the wrong rank, and one whose experts disagree with the metadata.
	for _, c := range []struct {
		dims []int64
		want string
	}{{[]int64{64, 32 * 8}, "has 2 dimensions, want 3"}, {[]int64{64, 16, 16}, "shape [16 64], the metadata implies [32 64]"}} {
		g = openMoE(t, "qwen3_moe")
		i := slices.IndexFunc(g.Tensors, func(t TensorInfo) bool { return t.Name == "blk.0.ffn_up_exps.weight" })
		g.Tensors[i].Dims = c.dims
		if _, err := g.Checkpoint(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ffn_up_exps %v: got %v, want %q", c.dims, err, c.want)
		}
	}
	// GLM-4.5's blocks past block_count - nextn_predict_layers (here blk.3) are left out.
	g = openMoE(t, "glm4_moe")
	mtp, _ := g.Tensor("blk.1.attn_norm.weight")
	mtp.Name = "blk.3.nextn.eh_proj.weight"
	g.Tensors = append(g.Tensors, mtp)
	ck, err := g.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(ck.Tensors, func(t checkpoint.TensorInfo) bool { return strings.HasPrefix(t.Name, "model.layers.3.") }) {
		t.Errorf("a multi-token-prediction tensor is in the checkpoint")
	}
}

// TestDeepSeek2: llama.cpp's deepseek2 file of the deepseek_v3 fixture reads as its checkpoint: the latent
// attention's sizes from key_length_mla, value_length_mla and the latent's key_length/value_length, one key/value
// head per query head, rope_interleave, yarn's mscale_all_dim from yarn_log_multiplier, and attn_k_b/attn_v_b
// ([heads, rows, columns]) as k_b_proj [heads·kv_lora_rank, nope] and v_b_proj [heads·v, kv_lora_rank], views of
// the file's bytes; what it does not implement is refused by name.
func TestDeepSeek2(t *testing.T) {
	ck, err := openMoE(t, "deepseek_v3").Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Config
	if c.KVLoraRank != 32 || c.QLoraRank == nil || *c.QLoraRank != 48 || c.QKNopeHeadDim != 16 || c.QKRopeHeadDim != 8 ||
		c.VHeadDim != 24 || c.NumKeyValueHeads != 4 || !c.RopeInterleave || c.Rope.Type != "yarn" || c.Rope.MscaleAllDim != 1 ||
		c.Rope.Mscale != 1 || c.Rope.Factor != 4 || c.ScoringFunc != "sigmoid" {
		t.Errorf("config %+v, rope %+v", c.LatentAttention, c.Rope)
	}
	for name, want := range map[string][]int64{"model.layers.1.self_attn.k_b_proj.weight": {4 * 32, 16},
		"model.layers.1.self_attn.v_b_proj.weight": {4 * 24, 32}} {
		if ti, ok := ck.Tensor(name); !ok || !slices.Equal(ti.Shape, want) || ti.Transformed() {
			t.Errorf("%s: %+v, want shape %v read as stored", name, ti, want)
		}
	}
	u32 := func(v uint32) *Value { return &Value{Type: TypeUint32, V: v} }
	for _, c := range []struct {
		key  string
		v    *Value
		want string
	}{
		{"deepseek2.expert_gating_func", u32(gatingSoftmax), "deepseek2.expert_gating_func is 1 (softmax)"},
		{"deepseek2.expert_gating_func", nil, "deepseek2.expert_gating_func is missing or none: llama.cpp reads such a deepseek2 file (DeepSeek-V2, V2.5) with softmax"},
		{"deepseek2.attention.kv_lora_rank", nil, "deepseek2.attention.kv_lora_rank is missing"},
		{"deepseek2.attention.key_length", u32(24), "deepseek2.attention.key_length is 24, want kv_lora_rank + rope.dimension_count = 40"},
		{"deepseek2.attention.value_length", u32(24), "deepseek2.attention.value_length is 24, want kv_lora_rank 32"},
		{"deepseek2.rope.scaling.type", &Value{Type: TypeString, V: "none"}, "yarn_log_multiplier is 0.1 without yarn"},
		{"deepseek2.expert_group_used_count", u32(4), "want at least 1 and fewer than the groups"},
		{"deepseek2.attention.sliding_window_pattern", u32(2), "deepseek2.attention.sliding_window_pattern is not supported"},
	} {
		g := openMoE(t, "deepseek_v3")
		setKV(g, c.key, c.v)
		if _, err := g.Checkpoint(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s = %v: got %v, want an error containing %q", c.key, c.v, err, c.want)
		}
	}
}
