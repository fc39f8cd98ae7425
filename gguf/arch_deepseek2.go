package gguf

import (
	"fmt"
	"math"
	"slices"

	"github.com/layerstream/layerstream/checkpoint"
)

// DeepSeek-V3 and Kimi K2 as llama.cpp's converter writes them (deepseek2): multi-head latent attention with
// kv_b_proj stored as its two parts, attn_k_b (each head's key rows transposed, [heads, kv_lora_rank, nope]) and
// attn_v_b ([heads, v, kv_lora_rank]), which are the k_b_proj and v_b_proj checkpoint.Open cuts from a
// safetensors kv_b_proj (engine/model/deepseek.go binds both); rotary pairs interleaved as in DeepSeek's
// checkpoints (the converter keeps the rows; llama.cpp ropes deepseek2 pairwise: rope_interleave); GLM-4.5's
// expert keys (sigmoidExperts; softmax gating, DeepSeek-V2's, is refused by name) and group-limited routing.
// attention.key_length is kv_lora_rank + the rotary dimensions and value_length kv_lora_rank (the latent);
// key_length_mla and value_length_mla are the per-head sizes. yarn's rope.scaling.yarn_log_multiplier is
// 0.1·mscale_all_dim, and llama.cpp takes mscale equal to it (llama-context.cpp's deepseek2 case), as
// DeepSeek-V3's config.json (both 1.0) and DeepSeek-V2's have it.
func init() {
	register("deepseek2", archInfo{hf: "DeepseekV3ForCausalLM", latent: true, layerShapes: true, names: withSigmoidExperts(map[string]string{
		"attn_q_a.weight":       "self_attn.q_a_proj.weight",
		"attn_q_a_norm.weight":  "self_attn.q_a_layernorm.weight",
		"attn_q_b.weight":       "self_attn.q_b_proj.weight",
		"attn_kv_a_mqa.weight":  "self_attn.kv_a_proj_with_mqa.weight",
		"attn_kv_a_norm.weight": "self_attn.kv_a_layernorm.weight",
		"attn_k_b.weight":       "self_attn.k_b_proj.weight",
		"attn_v_b.weight":       "self_attn.v_b_proj.weight",
	}), keys: append(slices.Clone(sigmoidExpertKeys), "attention.q_lora_rank", "attention.kv_lora_rank",
		"attention.key_length_mla", "attention.value_length_mla", "rope.scaling.yarn_log_multiplier",
		"rope.scaling.yarn_beta_fast", "rope.scaling.yarn_beta_slow"),
		moe: &moeInfo{countKey: "n_routed_experts", experts: qwenExperts, groups: true}, nextn: true, nextnKey: "num_nextn_predict_layers",
		config: deepseek2Config, tensor: deepseek2Tensor})
}

// deepseek2Config reads the latent attention's and the experts' keys into DeepseekV3Config's.
func deepseek2Config(m archMeta, cfg map[string]any) error {
	need := func(k string) (int, error) {
		v, ok, err := m.Int(m.key(k))
		if err == nil && (!ok || v <= 0) {
			err = fmt.Errorf("metadata %s is missing or not positive: a deepseek2 file without multi-head latent attention's absorbed form (attn_k_b, attn_v_b; an older conversion?) is not supported", m.key(k))
		}
		return v, err
	}
	dims := map[string]int{}
	for _, k := range []string{"attention.kv_lora_rank", "attention.key_length_mla", "attention.value_length_mla",
		"rope.dimension_count", "attention.key_length", "attention.value_length"} {
		v, err := need(k)
		if err != nil {
			return err
		}
		dims[k] = v
	}
	rank, rope := dims["attention.kv_lora_rank"], dims["rope.dimension_count"]
	switch {
	case dims["attention.key_length"] != rank+rope:
		return fmt.Errorf("metadata %s is %d, want kv_lora_rank + rope.dimension_count = %d (the latent key)", m.key("attention.key_length"), dims["attention.key_length"], rank+rope)
	case dims["attention.value_length"] != rank:
		return fmt.Errorf("metadata %s is %d, want kv_lora_rank %d (the latent value)", m.key("attention.value_length"), dims["attention.value_length"], rank)
	case dims["attention.key_length_mla"] <= rope:
		return fmt.Errorf("metadata %s is %d, want more than rope.dimension_count %d (each head's key: nope + rope dimensions)", m.key("attention.key_length_mla"), dims["attention.key_length_mla"], rope)
	}
	var qRank any // null: one q_proj (attn_q)
	if v, ok, err := m.Int(m.key("attention.q_lora_rank")); err != nil {
		return err
	} else if ok && v > 0 {
		qRank = v
	}
	cfg["model_type"], cfg["num_key_value_heads"], cfg["head_dim"] = "deepseek_v3", cfg["num_attention_heads"], rope
	cfg["kv_lora_rank"], cfg["q_lora_rank"], cfg["qk_rope_head_dim"] = rank, qRank, rope
	cfg["qk_nope_head_dim"], cfg["v_head_dim"] = dims["attention.key_length_mla"]-rope, dims["attention.value_length_mla"]
	cfg["rope_interleave"], cfg["attention_bias"] = true, false
	if _, ok := cfg["num_nextn_predict_layers"]; !ok { // DeepseekV3Config's default is 1
		cfg["num_nextn_predict_layers"] = 0
	}
	if err := m.latentYarn(cfg); err != nil {
		return err
	}
	if err := m.deepseek2Gating(cfg); err != nil {
		return err
	}
	return m.sigmoidExperts(cfg, true)
}

// deepseek2Gating refuses a file without expert_gating_func (or with "none"), which llama.cpp reads as softmax
// (DeepSeek-V2 and V2.5's files) except for GLM-4.7 Lite's shape (47 or 48 layers, 154,880 tokens: sigmoid);
// sigmoidExperts then refuses any other value than sigmoid.
func (m archMeta) deepseek2Gating(cfg map[string]any) error {
	v, ok, err := m.Int(m.key("expert_gating_func"))
	if err != nil || ok && v != gatingNone {
		return err
	}
	if l := cfg["num_hidden_layers"].(int); (l == 47 || l == 48) && cfg["vocab_size"] == 154880 {
		return nil
	}
	return fmt.Errorf("metadata %s is missing or none: llama.cpp reads such a deepseek2 file (DeepSeek-V2, V2.5) with softmax router scores, which are not supported (supported: sigmoid, 2)", m.key("expert_gating_func"))
}

// latentYarn adds deepseek2's yarn settings to rope_scaling: mscale_all_dim (yarn_log_multiplier / 0.1, as
// llama.cpp reads it) and mscale equal to it (llama.cpp's assumption for deepseek2), beta_fast and beta_slow
// (which llama.cpp's deepseek2 reads); without yarn, a yarn_log_multiplier other than 0 is refused.
func (m archMeta) latentYarn(cfg map[string]any) error {
	mul, hasMul, err := m.Float(m.key("rope.scaling.yarn_log_multiplier"))
	if err != nil {
		return err
	}
	rs, yarn := cfg["rope_scaling"].(map[string]any)
	if !yarn || rs["rope_type"] != "yarn" {
		if hasMul && mul != 0 {
			return fmt.Errorf("metadata %s is %v without yarn rope scaling: not supported", m.key("rope.scaling.yarn_log_multiplier"), float32(mul))
		}
		return nil
	}
	for hf, k := range map[string]string{"beta_fast": "rope.scaling.yarn_beta_fast", "beta_slow": "rope.scaling.yarn_beta_slow"} {
		if v, ok, err := m.Float(m.key(k)); err != nil {
			return err
		} else if ok {
			rs[hf] = float32JSON(v)
		}
	}
	if hasMul && mul != 0 {
		if math.IsInf(mul, 0) || math.IsNaN(mul) {
			return fmt.Errorf("metadata %s is %g", m.key("rope.scaling.yarn_log_multiplier"), mul)
		}
		all := float32JSON(float64(float32(mul) / float32(0.1)))
		rs["mscale_all_dim"], rs["mscale"] = all, all
	}
	return nil
}

// deepseek2Tensor reads the per-head tensors attn_k_b and attn_v_b ([heads, rows, columns]) as the matrices
// [heads·rows, columns] the family binds.
func deepseek2Tensor(ct *checkpoint.TensorInfo) error {
	if len(ct.Shape) == 3 {
		ct.Shape = []int64{ct.Shape[0] * ct.Shape[1], ct.Shape[2]}
	}
	return nil
}
