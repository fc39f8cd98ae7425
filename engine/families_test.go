package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/kvcache"
	"github.com/layerstream/layerstream/reference"
)

// writeSafetensors writes float32 tensors as a safetensors file.
func writeSafetensors(t *testing.T, path string, tensors map[string][]float32, shapes map[string][]int) {
	t.Helper()
	names := slices.Sorted(maps.Keys(tensors))
	header := map[string]any{}
	off := 0
	for _, n := range names {
		size := 4 * len(tensors[n])
		header[n] = map[string]any{"dtype": "F32", "shape": shapes[n], "data_offsets": []int{off, off + size}}
		off += size
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	buf := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
	buf = append(buf, h...)
	for _, n := range names {
		for _, v := range tensors[n] {
			buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
		}
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

// familyBase is a tiny config every family test starts from (transformers 5 spelling): hidden 24, 3 layers,
// 4 heads of 8 over 2 key/value heads, vocab 50.
func familyBase(arch, modelType string) map[string]any {
	return map[string]any{
		"architectures": []string{arch}, "model_type": modelType, "hidden_size": 24, "intermediate_size": 40,
		"num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 50,
		"max_position_embeddings": 64, "rms_norm_eps": 1e-6, "hidden_act": "silu", "tie_word_embeddings": false,
		"dtype": "float32", "eos_token_id": 3, "rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1000.0},
	}
}

// writeFamily writes a random checkpoint for cfg: the layer tensors the family's Plan lists (plus extra, name
// suffix → shape, in every layer), the embedding, final norm and lm_head. Norm weights are near 1, the rest
// N(0, 0.3²), biases included.
func writeFamily(t *testing.T, cfg map[string]any, extra map[string][]int) string {
	t.Helper()
	dir := t.TempDir()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := checkpoint.ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	a, err := model.For(c)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	ts, sh := map[string][]float32{}, map[string][]int{}
	add := func(name string, dims ...int) {
		v := make([]float32, elems(dims))
		for i := range v {
			if strings.Contains(name, "norm") {
				v[i] = 1 + 0.1*float32(rng.NormFloat64())
			} else {
				v[i] = 0.3 * float32(rng.NormFloat64())
			}
		}
		ts[name], sh[name] = v, dims
	}
	add("model.embed_tokens.weight", c.VocabSize, c.HiddenSize)
	add("model.norm.weight", c.HiddenSize)
	add("lm_head.weight", c.VocabSize, c.HiddenSize)
	for l := range c.NumHiddenLayers {
		p := a.Plan()
		for i, s := range p.Weights {
			if p.Holds(p.Layers[l], i) { // a dense layer of a mixture of experts holds no experts, and so on
				add(fmt.Sprintf("model.layers.%d.%s", l, s.Name), s.Shape...)
			}
		}
		for name, shape := range extra {
			add(fmt.Sprintf("model.layers.%d.%s", l, name), shape...)
		}
	}
	writeSafetensors(t, filepath.Join(dir, "model.safetensors"), ts, sh)
	return dir
}

// familyIDs is a prompt longer than the test windows (4 and 5 positions), so that sliding layers differ from
// full ones and the ring wraps.
var familyIDs = []int{1, 17, 4, 33, 49, 0, 12, 7, 44, 21, 9, 30}

// TestFamiliesMatchReference checks every family and rope scaling against the float64 reference forward pass
// (written independently, from transformers' model code): the one-pass logits (graphs), and token by token on
// the host kernels and on the graphs (the decode path, through the ring cache of sliding layers). Fixtures made
// by transformers itself check the same families against transformers (TestHFFixtures).
func TestFamiliesMatchReference(t *testing.T) {
	llama := func(edit map[string]any) map[string]any {
		c := familyBase("LlamaForCausalLM", "llama")
		maps.Copy(c, edit)
		return c
	}
	rope := func(p map[string]any) map[string]any {
		return llama(map[string]any{"rope_parameters": p})
	}
	for _, tc := range []struct {
		name string
		cfg  map[string]any
		// oneWay: the decode path rotates each step with the frequencies of its own length (dynamic NTK), so
		// token by token differs from one pass by design; only the one-pass logits are compared.
		oneWay bool
	}{
		{"llama", llama(nil), false},
		{"llama biases", llama(map[string]any{"attention_bias": true, "mlp_bias": true}), false},
		{"llama3 rope", rope(map[string]any{"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}), false},
		{"linear rope", rope(map[string]any{"rope_type": "linear", "rope_theta": 1000.0, "factor": 4.0}), false},
		{"yarn rope", rope(map[string]any{"rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0, "original_max_position_embeddings": 16}), false},
		{"dynamic rope", llama(map[string]any{"max_position_embeddings": 8, "rope_parameters": map[string]any{"rope_type": "dynamic", "rope_theta": 1000.0, "factor": 2.0}}), true},
		{"mistral window", func() map[string]any {
			c := familyBase("MistralForCausalLM", "mistral")
			c["sliding_window"] = 5
			return c
		}(), false},
		{"qwen2 sliding", func() map[string]any {
			c := familyBase("Qwen2ForCausalLM", "qwen2")
			c["use_sliding_window"], c["sliding_window"], c["max_window_layers"] = true, 4, 1
			return c
		}(), false},
		{"qwen3", familyBase("Qwen3ForCausalLM", "qwen3"), false},
		{"olmo2", familyBase("Olmo2ForCausalLM", "olmo2"), false},
		{"olmo3", olmo3Config(), false},
		{"olmo3 derived layer types", func() map[string]any {
			c := olmo3Config()
			delete(c, "layer_types") // every fourth layer full: 3 layers, all sliding
			return c
		}(), false},
		{"ministral3", ministral3Config(), false},
		{"ministral3 window", func() map[string]any {
			c := ministral3Config()
			c["sliding_window"] = 5
			return c
		}(), false},
		{"granite", func() map[string]any {
			c := familyBase("GraniteForCausalLM", "granite")
			c["embedding_multiplier"], c["attention_multiplier"], c["residual_multiplier"], c["logits_scaling"] = 3.0, 0.2, 0.5, 2.0
			return c
		}(), false},
		{"smollm3", func() map[string]any {
			c := familyBase("SmolLM3ForCausalLM", "smollm3")
			c["no_rope_layers"], c["use_sliding_window"], c["sliding_window"] = []int{1, 0, 1}, true, 4
			return c
		}(), false},
		{"gemma2", gemma2Config(), false},
		{"gemma2 bf16 embedding scale", func() map[string]any {
			c := gemma2Config()
			c["dtype"] = "bfloat16" // f32 weights, but √24 = 4.898979 rounded to bf16 (4.90625) as transformers does
			return c
		}(), false},
		{"gemma3 rope_parameters by layer type", gemma3Config(), false},
		{"gemma3 transformers 4 spelling", func() map[string]any {
			c := gemma3Config()
			delete(c, "layer_types") // from sliding_window_pattern: layers 0 and 2 local, 1 global
			c["sliding_window_pattern"] = 2
			c["rope_parameters"], c["rope_theta"], c["rope_local_base_freq"] = nil, 100000.0, 3000.0
			c["rope_scaling"] = map[string]any{"rope_type": "linear", "factor": 8.0}
			return c
		}(), false},
		{"phi3 partial rotary, sliding window", func() map[string]any {
			c := familyBase("Phi3ForCausalLM", "phi3")
			c["sliding_window"] = 5
			c["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5}
			return c
		}(), false},
		{"mixtral window", func() map[string]any {
			c := mixtralConfig()
			c["sliding_window"] = 5
			return c
		}(), false},
		{"qwen2_moe dense layer, shared expert", qwen2MoeConfig(), false},
		{"qwen2_moe sparse step, renormalized", func() map[string]any {
			c := qwen2MoeConfig()
			c["mlp_only_layers"], c["decoder_sparse_step"], c["norm_topk_prob"], c["qkv_bias"] = []int{}, 2, true, false
			return c
		}(), false},
		{"qwen3_moe", qwen3MoeConfig(), false},
		{"olmoe", olmoeConfig(), false},
		{"glm4_moe dense first layer, shared experts", glm4MoeConfig(), false},
		{"glm4_moe groups", func() map[string]any {
			c := glm4MoeConfig()
			c["n_group"], c["topk_group"] = 2, 1 // 3 per token from the best group of 3
			return c
		}(), false},
		{"deepseek_v3 latent attention, yarn, groups", deepseekV3Config(), false},
		{"deepseek_v3 q_proj (q_lora_rank null), no groups", func() map[string]any {
			c := deepseekV3Config()
			c["q_lora_rank"], c["n_group"], c["topk_group"] = json.RawMessage("null"), 1, 1
			return c
		}(), false},
		{"deepseek_v3 rotate-half rope, default rope", func() map[string]any {
			c := deepseekV3Config()
			c["rope_interleave"] = false
			c["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 1000.0}
			return c
		}(), false},
		{"minimax_m2", minimaxM2Config(), false},
		// The prompt (12 positions) outgrows original_max_position_embeddings (8): one pass rotates with the long
		// factors; a token-by-token decode uses the short ones until it does (TestLongRopeRecompute).
		{"phi3 longrope", phi3LongRopeConfig(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeFamily(t, tc.cfg, nil)
			ck, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := reference.Forward(ck, familyIDs)
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, got [][]float32) {
				t.Helper()
				m := 0.0
				for p := range ref.Logits {
					for v := range ref.Logits[p] {
						m = max(m, math.Abs(float64(got[p][v])-ref.Logits[p][v]))
					}
				}
				if m > 1e-4 {
					t.Errorf("%s differs from the float64 reference by %g (> 1e-4)", what, m)
				}
			}
			e := open(t, dir, Options{})
			got, err := e.Logits(context.Background(), familyIDs)
			if err != nil {
				t.Fatal(err)
			}
			check("one pass (graphs)", got)
			if !tc.oneWay {
				check("token by token (host kernels)", tokenByToken(t, e, familyIDs))
				check("token by token (graphs)", tokenByToken(t, open(t, dir, Options{GraphDecode: true}), familyIDs))
			}
		})
	}
}

// gemma2Config is a tiny Gemma 2: attention and final soft-caps, query_pre_attn_scalar 12 (not head_dim 8),
// local layers 0 and 2 with a window of 4.
func gemma2Config() map[string]any {
	c := familyBase("Gemma2ForCausalLM", "gemma2")
	c["hidden_activation"], c["query_pre_attn_scalar"], c["sliding_window"] = "gelu_pytorch_tanh", 12, 4
	c["attn_logit_softcapping"], c["final_logit_softcapping"], c["tie_word_embeddings"] = 5.0, 6.0, true
	return c
}

// gemma3Config is a tiny Gemma 3 in transformers 5's spelling: layers local, local, global (window 5), the
// global layers' rope linear-scaled, the local layers' with their own base.
func gemma3Config() map[string]any {
	c := familyBase("Gemma3ForCausalLM", "gemma3_text")
	c["hidden_activation"], c["query_pre_attn_scalar"], c["sliding_window"] = "gelu_pytorch_tanh", 10, 5
	c["layer_types"] = []string{"sliding_attention", "sliding_attention", "full_attention"}
	c["rope_parameters"] = map[string]any{
		"full_attention":    map[string]any{"rope_type": "linear", "factor": 8.0, "rope_theta": 100000.0},
		"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 3000.0},
	}
	return c
}

// olmo3Config is a tiny OLMo 3: layers sliding, full, sliding (window 4), the full layer's rope yarn-scaled,
// the sliding layers' with their own base.
func olmo3Config() map[string]any {
	c := familyBase("Olmo3ForCausalLM", "olmo3")
	c["sliding_window"] = 4
	c["layer_types"] = []string{"sliding_attention", "full_attention", "sliding_attention"}
	c["rope_parameters"] = map[string]any{
		"full_attention":    map[string]any{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16, "rope_theta": 100000.0},
		"sliding_attention": map[string]any{"rope_type": "default", "rope_theta": 3000.0},
	}
	return c
}

// ministral3Config is a tiny Ministral 3: yarn rope, queries scaled by 1 + 0.5·ln(1 + ⌊p / 4⌋), so that the
// 12-position prompt crosses two steps.
func ministral3Config() map[string]any {
	c := familyBase("Ministral3ForCausalLM", "ministral3")
	c["rope_parameters"] = map[string]any{"rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0, "original_max_position_embeddings": 4,
		"max_position_embeddings": 64, "mscale": 1.0, "mscale_all_dim": 1.0, "llama_4_scaling_beta": 0.5}
	c["sliding_window"] = nil
	return c
}

// mixtralConfig is a tiny Mixtral: 5 experts of 16, 2 per token.
func mixtralConfig() map[string]any {
	c := familyBase("MixtralForCausalLM", "mixtral")
	c["num_local_experts"], c["num_experts_per_tok"], c["intermediate_size"] = 5, 2, 16
	return c
}

// qwen2MoeConfig is a tiny Qwen2-MoE: 6 experts of 12, 3 per token, not renormalized, a shared expert of 20,
// layer 1 dense (intermediate_size 40), q/k/v biases; transformers 4's spelling of the expert count.
func qwen2MoeConfig() map[string]any {
	c := familyBase("Qwen2MoeForCausalLM", "qwen2_moe")
	c["num_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"] = 6, 3, 12, 20
	c["mlp_only_layers"], c["norm_topk_prob"], c["qkv_bias"] = []int{1}, false, true
	return c
}

// qwen3MoeConfig is a tiny Qwen3-MoE: 8 experts of 12, 4 per token, renormalized; transformers 5's spelling.
func qwen3MoeConfig() map[string]any {
	c := familyBase("Qwen3MoeForCausalLM", "qwen3_moe")
	c["num_local_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"], c["norm_topk_prob"] = 8, 4, 12, true
	return c
}

// olmoeConfig is a tiny OLMoE: 4 experts of 16, 2 per token.
func olmoeConfig() map[string]any {
	c := familyBase("OlmoeForCausalLM", "olmoe")
	c["num_experts"], c["num_experts_per_tok"], c["intermediate_size"] = 4, 2, 16
	return c
}

// glm4MoeConfig is a tiny GLM-4.5: layer 0 dense, 6 experts of 12 with sigmoid scores, a choice bias, 3 per
// token renormalized × 2.5, two shared experts, q/k/v biases, per-head q/k norms, half the head rotated.
func glm4MoeConfig() map[string]any {
	c := familyBase("Glm4MoeForCausalLM", "glm4_moe")
	c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"], c["n_shared_experts"] = 6, 3, 12, 2
	c["routed_scaling_factor"], c["first_k_dense_replace"], c["attention_bias"], c["use_qk_norm"] = 2.5, 1, true, true
	c["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5}
	return c
}

// deepseekV3Config is a tiny DeepSeek-V3: multi-head latent attention (q_lora_rank 16, kv_lora_rank 12,
// qk_nope 6 + qk_rope 4, v_head_dim 5, interleaved rope), yarn with mscale 1 and mscale_all_dim 0.8 (cos and sin
// × mscale(1)/mscale(0.8), the scores × mscale(0.8)²); layer 0 dense, then 8 experts of 12 in 4 groups, the
// best 2 groups kept, 3 per token renormalized × 2.5, one shared expert.
func deepseekV3Config() map[string]any {
	c := familyBase("DeepseekV3ForCausalLM", "deepseek_v3")
	c["num_key_value_heads"], c["n_routed_experts"], c["num_experts_per_tok"], c["moe_intermediate_size"] = 4, 8, 3, 12
	c["n_group"], c["topk_group"], c["n_shared_experts"], c["routed_scaling_factor"], c["first_k_dense_replace"] = 4, 2, 1, 2.5, 1
	c["q_lora_rank"], c["kv_lora_rank"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"] = 16, 12, 6, 4, 5
	c["head_dim"], c["rope_interleave"] = 4, true
	c["rope_parameters"] = map[string]any{"rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0, "original_max_position_embeddings": 16,
		"mscale": 1.0, "mscale_all_dim": 0.8}
	return c
}

// minimaxM2Config is a tiny MiniMax-M2: 6 experts of 16 with sigmoid scores and a choice bias, 2 per token,
// whole-projection q/k norms, half the head rotated.
func minimaxM2Config() map[string]any {
	c := familyBase("MiniMaxM2ForCausalLM", "minimax_m2")
	c["num_local_experts"], c["num_experts_per_tok"], c["intermediate_size"] = 6, 2, 16
	c["rope_parameters"] = map[string]any{"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5}
	return c
}

// phi3LongRopeConfig is a tiny Phi-3 with longrope over original_max_position_embeddings 8 (of 32) and
// partial rotary (4 of 8 dimensions: 2 factors each).
func phi3LongRopeConfig() map[string]any {
	c := familyBase("Phi3ForCausalLM", "phi3")
	c["max_position_embeddings"], c["original_max_position_embeddings"] = 32, 8
	c["rope_parameters"] = map[string]any{"rope_type": "longrope", "rope_theta": 1000.0, "partial_rotary_factor": 0.5,
		"short_factor": []float64{1, 1.5}, "long_factor": []float64{3, 7}, "original_max_position_embeddings": 8}
	return c
}

// TestLongRopeRecompute: a Phi-3 longrope sequence whose cache was written with the short factors is computed
// again, whole, when a pass takes it past original_max_position_embeddings (Plan.Recompute), as transformers'
// generate does: a prompt prefilled in chunks that cross the limit, and a short prompt whose decode crosses it,
// give the tokens (and log-probabilities) of one pass over the same ids, and the logits at the crossing are the
// float64 reference's over the whole sequence (long factors at every position).
func TestLongRopeRecompute(t *testing.T) {
	dir := writeFamily(t, phi3LongRopeConfig(), nil)
	ctx := context.Background()
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []Options{{}, {GraphDecode: true}} {
		e := open(t, dir, opts)
		gen := func(r Request) (*Result, []float64) {
			t.Helper()
			r.StopIDs, r.Logprobs = []int{}, true
			var lps []float64
			res, err := e.Generate(ctx, r, func(tok Token) error { lps = append(lps, tok.Logprob); return nil })
			if err != nil {
				t.Fatal(err)
			}
			return res, lps
		}
		// The prompt of 12 crosses 8 in its third chunk of 4: the whole prompt is computed again.
		whole, wholeLP := gen(Request{PromptIDs: familyIDs, MaxNewTokens: 6})
		chunked, chunkedLP := gen(Request{PromptIDs: familyIDs, MaxNewTokens: 6, PrefillChunk: 4})
		if !slices.Equal(whole.GeneratedIDs, chunked.GeneratedIDs) {
			t.Errorf("graph decode %v: chunked prefill %v, one pass %v", opts.GraphDecode, chunked.GeneratedIDs, whole.GeneratedIDs)
		}
		for i := range wholeLP {
			if d := math.Abs(wholeLP[i] - chunkedLP[i]); d > 1e-5 {
				t.Errorf("graph decode %v, token %d: log-probability %g chunked, %g in one pass", opts.GraphDecode, i+1, chunkedLP[i], wholeLP[i])
			}
		}
		// A prompt of 5 decodes 3 tokens with the short factors, then its 9th position crosses: the token chosen
		// there is the argmax of the reference's logits over those 9 ids.
		short, _ := gen(Request{PromptIDs: familyIDs[:5], MaxNewTokens: 6})
		seq := append(slices.Clone(familyIDs[:5]), short.GeneratedIDs[:4]...)
		ref, err := reference.Forward(ck, seq)
		if err != nil {
			t.Fatal(err)
		}
		last := ref.Logits[len(seq)-1]
		best := 0
		for i, v := range last {
			if v > last[best] {
				best = i
			}
		}
		if short.GeneratedIDs[4] != best {
			t.Errorf("graph decode %v: token after the crossing %d, the reference's argmax over the long-rotated sequence %d", opts.GraphDecode, short.GeneratedIDs[4], best)
		}
	}
}

// TestSlidingBatchMatchesAlone: sequences of different lengths decoding together through ring caches (each row
// of a ring holds its own positions) generate what each generates alone.
func TestSlidingBatchMatchesAlone(t *testing.T) {
	c := familyBase("MistralForCausalLM", "mistral")
	c["sliding_window"] = 4
	dir := writeFamily(t, c, nil)
	ctx := context.Background()
	reqs := []Request{
		{PromptIDs: familyIDs, MaxNewTokens: 9, StopIDs: []int{}},
		{PromptIDs: familyIDs[:2], MaxNewTokens: 14, StopIDs: []int{}},
		{PromptIDs: familyIDs[3:9], MaxNewTokens: 5, StopIDs: []int{}, PrefillChunk: 4},
	}
	for _, opts := range []Options{{}, {GraphDecode: true}} {
		e := open(t, dir, opts)
		batch, err := e.GenerateBatch(ctx, reqs, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range reqs {
			alone, err := e.Generate(ctx, r, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(alone.GeneratedIDs, batch[i].GeneratedIDs) {
				t.Errorf("graph decode %v, request %d: batch %v, alone %v", opts.GraphDecode, i, batch[i].GeneratedIDs, alone.GeneratedIDs)
			}
		}
	}
}

// TestUnusedTensorsRefused (issue 13 case 2): a layer tensor the configuration does not account for, such as
// o_proj.bias in a checkpoint whose config.json lacks attention_bias, is refused by name rather than ignored;
// rotary_emb.inv_freq, which old checkpoints saved, is skipped.
func TestUnusedTensorsRefused(t *testing.T) {
	ctx := context.Background()
	llama := familyBase("LlamaForCausalLM", "llama")
	for _, tc := range []struct {
		base  map[string]any
		extra map[string][]int
		want  string
	}{
		{llama, map[string][]int{"self_attn.o_proj.bias": {24}}, "self_attn.o_proj.bias"},
		{llama, map[string][]int{"self_attn.q_norm.weight": {8}}, "self_attn.q_norm.weight"},
		{llama, map[string][]int{"self_attn.rotary_emb.inv_freq": {4}}, ""},
		// Gemma 3's q/k norms in a Gemma 2 checkpoint, unfused projections in a Phi-3 one.
		{gemma2Config(), map[string][]int{"self_attn.k_norm.weight": {8}}, "self_attn.k_norm.weight"},
		{phi3LongRopeConfig(), map[string][]int{"self_attn.q_proj.weight": {32, 24}}, "self_attn.q_proj.weight"},
		{phi3LongRopeConfig(), map[string][]int{"mlp.up_proj.weight": {40, 24}}, "mlp.up_proj.weight"},
		// A dense MLP beside the experts, an expert more than num_experts, a shared expert Qwen3-MoE does not
		// have, experts saved fused (transformers 5's in-memory layout), a router bias Mixtral does not read.
		{mixtralConfig(), map[string][]int{"mlp.gate_proj.weight": {16, 24}}, "mlp.gate_proj.weight"},
		{olmoeConfig(), map[string][]int{"mlp.experts.4.up_proj.weight": {16, 24}}, "mlp.experts.4.up_proj.weight"},
		{qwen3MoeConfig(), map[string][]int{"mlp.shared_expert.up_proj.weight": {12, 24}}, "mlp.shared_expert.up_proj.weight"},
		{qwen3MoeConfig(), map[string][]int{"mlp.experts.gate_up_proj": {8, 24, 24}}, "mlp.experts.gate_up_proj"},
		{mixtralConfig(), map[string][]int{"block_sparse_moe.e_score_correction_bias": {5}}, "block_sparse_moe.e_score_correction_bias"},
	} {
		dir := writeFamily(t, tc.base, tc.extra)
		arch := tc.base["architectures"].([]string)[0]
		e, err := Open(ctx, dir, Options{})
		if tc.want == "" {
			if err != nil {
				t.Errorf("%v: %v", tc.extra, err)
			} else {
				e.Close()
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), arch) {
			t.Errorf("%v: got %v, want an error naming the tensor", tc.extra, err)
		}
		if e != nil {
			e.Close()
		}
		ck, err := checkpoint.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := reference.Forward(ck, familyIDs); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("reference, %v: got %v, want an error naming the tensor", tc.extra, err)
		}
	}
}

// TestDamagedSplitRefusedAtOpen: a config.json whose sizes disagree with the tensors' shapes, and a shard folder
// missing a layer's file, are refused when the engine opens, naming the tensor or the file, not when generation
// reaches the layer (after text was printed).
func TestDamagedSplitRefusedAtOpen(t *testing.T) {
	ctx := context.Background()
	dir := writeFamily(t, familyBase("LlamaForCausalLM", "llama"), nil)
	shardDir := filepath.Join(t.TempDir(), "shards")
	e, err := Open(ctx, dir, Options{ShardDir: shardDir})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()

	path := filepath.Join(shardDir, "layer.1.shard")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if e, err := Open(ctx, shardDir, Options{}); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("shard folder without %s: got %v", path, err)
		if e != nil {
			e.Close()
		}
	}

	cfg := familyBase("LlamaForCausalLM", "llama")
	cfg["intermediate_size"] = 20 // the tensors are 40 wide
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	e, err = Open(ctx, dir, Options{ShardDir: filepath.Join(t.TempDir(), "shards")})
	if err == nil || !strings.Contains(err.Error(), "model.layers.0.mlp.") || !strings.Contains(err.Error(), "the config implies") {
		t.Errorf("intermediate_size 20 over tensors of 40: got %v, want the tensor named", err)
	}
	if e != nil {
		e.Close()
	}
}

// TestNotImplementedRefused: a configuration the family does not implement is refused when the engine opens,
// naming the key and value.
func TestNotImplementedRefused(t *testing.T) {
	ctx := context.Background()
	llama := familyBase("LlamaForCausalLM", "llama")
	longrope := func(edit map[string]any) map[string]any {
		p := maps.Clone(phi3LongRopeConfig()["rope_parameters"].(map[string]any))
		maps.Copy(p, edit)
		return map[string]any{"rope_parameters": p}
	}
	for _, tc := range []struct {
		name string
		base map[string]any
		edit map[string]any
		want string
	}{
		{"activation", llama, map[string]any{"hidden_act": "relu"}, `hidden_act "relu"`},
		{"partial rotary", llama, map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5}}, "partial_rotary_factor 0.5"},
		{"longrope", llama, map[string]any{"rope_parameters": map[string]any{"rope_type": "longrope", "rope_theta": 1000.0, "short_factor": []float64{1, 1, 1, 1}, "long_factor": []float64{2, 2, 2, 2}}}, `rope type "longrope"`},
		{"gemma2 activation", gemma2Config(), map[string]any{"hidden_activation": "relu"}, `hidden_activation "relu"`},
		{"gemma2 bidirectional", gemma2Config(), map[string]any{"use_bidirectional_attention": true}, "use_bidirectional_attention"},
		{"gemma2 nested rope", gemma2Config(), map[string]any{"rope_parameters": gemma3Config()["rope_parameters"]}, "nested by layer type"},
		{"gemma2 scalar", gemma2Config(), map[string]any{"query_pre_attn_scalar": 0}, "query_pre_attn_scalar must be positive"},
		{"gemma2 no dtype", gemma2Config(), map[string]any{"dtype": nil}, "no dtype"},
		{"gemma3 attention soft-cap", gemma3Config(), map[string]any{"attn_logit_softcapping": 50.0}, "attn_logit_softcapping 50"},
		{"gemma3 layer type", gemma3Config(), map[string]any{"layer_types": []string{"sliding_attention", "chunked_attention", "full_attention"}}, `"chunked_attention"`},
		{"gemma3 pattern", gemma3Config(), map[string]any{"layer_types": nil, "_sliding_window_pattern": 2}, "_sliding_window_pattern 2"},
		{"gemma3 local bases", gemma3Config(), map[string]any{"rope_local_base_freq": 10000.0}, "rope_local_base_freq 10000"},
		{"olmo3 flat rope_theta", olmo3Config(), map[string]any{"rope_parameters": nil, "rope_theta": 10000.0}, "rope_theta 10000 without rope_parameters by layer type"},
		{"olmo3 layer type", olmo3Config(), map[string]any{"layer_types": []string{"sliding_attention", "chunked_attention", "full_attention"}}, `"chunked_attention"`},
		{"ministral3 no beta", ministral3Config(), map[string]any{"rope_parameters": map[string]any{"rope_type": "yarn", "rope_theta": 1000.0, "factor": 4.0, "original_max_position_embeddings": 4}}, "no llama_4_scaling_beta"},
		{"phi3 rope type", phi3LongRopeConfig(), map[string]any{"rope_parameters": map[string]any{"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0}}, `rope type "linear"`},
		{"phi3 longrope factors", phi3LongRopeConfig(), longrope(map[string]any{"short_factor": []float64{1, 1, 1}}), "short_factor has 3 entries, want 2"},
		{"phi3 longrope factor", phi3LongRopeConfig(), longrope(map[string]any{"factor": 2.0}), "longrope factor 2"},
		{"olmoe clip_qkv", olmoeConfig(), map[string]any{"clip_qkv": 8.0}, "clip_qkv 8"},
		{"experts disagree", qwen3MoeConfig(), map[string]any{"num_experts": 4}, "num_experts 4 and num_local_experts 8 disagree"},
		{"more experts per token", mixtralConfig(), map[string]any{"num_experts_per_tok": 6}, "num_experts_per_tok 6"},
		{"qwen2_moe sparse step", qwen2MoeConfig(), map[string]any{"decoder_sparse_step": 0}, "decoder_sparse_step 0"},
		// Keys of the MoE families layerstream does not implement: refused by name.
		{"mixtral router bias", mixtralConfig(), map[string]any{"router_bias": true}, "router_bias"},
		{"qwen3_moe shared expert", qwen3MoeConfig(), map[string]any{"shared_expert_intermediate_size": 12}, "shared_expert_intermediate_size"},
		{"olmoe routed scaling", olmoeConfig(), map[string]any{"routed_scaling_factor": 2.5}, "routed_scaling_factor"},
		{"glm4_moe groups", glm4MoeConfig(), map[string]any{"n_group": 2, "topk_group": 3}, "topk_group 3 is not between 1 and n_group 2"},
		{"glm4_moe group size", glm4MoeConfig(), map[string]any{"n_group": 4}, "n_group 4 does not divide"},
		{"deepseek_v3 biases", deepseekV3Config(), map[string]any{"attention_bias": true}, "attention_bias true"},
		{"deepseek_v3 key/value heads", deepseekV3Config(), map[string]any{"num_key_value_heads": 2}, "num_key_value_heads 2"},
		{"deepseek_v3 scoring", deepseekV3Config(), map[string]any{"scoring_func": "softmax"}, `scoring_func "softmax"`},
		{"deepseek_v3 choice", deepseekV3Config(), map[string]any{"topk_method": "greedy"}, `topk_method "greedy"`},
		{"deepseek_v3 sparse layers", deepseekV3Config(), map[string]any{"moe_layer_freq": 2}, "moe_layer_freq 2"},
		{"deepseek_v3 experts in the kept groups", deepseekV3Config(), map[string]any{"num_experts_per_tok": 5}, "num_experts_per_tok 5 exceeds"},
		{"deepseek_v3 partial rotary", deepseekV3Config(), map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5}}, "partial_rotary_factor 0.5"},
		{"minimax_m2 shared expert", minimaxM2Config(), map[string]any{"shared_intermediate_size": 16}, "shared_intermediate_size"},
	} {
		c := maps.Clone(tc.base)
		for k, v := range tc.edit {
			if v == nil {
				delete(c, k)
			} else {
				c[k] = v
			}
		}
		dir := writeFamily(t, tc.base, nil)
		b, _ := json.Marshal(c)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Open(ctx, dir, Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
		// The float64 reference refuses it too (it may word it otherwise).
		if ck, cerr := checkpoint.Open(dir); cerr == nil {
			if _, rerr := reference.Forward(ck, familyIDs[:3]); rerr == nil {
				t.Errorf("%s: the reference computed it", tc.name)
			}
		}
	}
}

// TestLogitsChecksAsGenerate (issue 13 case 3): Engine.Logits refuses what Generate refuses of a prompt (token
// ids outside the vocabulary, more positions than the model's context), and a model with sliding windows is
// computed with them on both (TestFamiliesMatchReference: "qwen2 sliding").
func TestLogitsChecksAsGenerate(t *testing.T) {
	e := open(t, writeFamily(t, familyBase("LlamaForCausalLM", "llama"), nil), Options{})
	ctx := context.Background()
	for _, ids := range [][]int{nil, {1, 50}, {-1}, make([]int, 65)} {
		_, lerr := e.Logits(ctx, ids)
		gerr := e.CheckRequest(Request{PromptIDs: ids, MaxNewTokens: 1})
		if lerr == nil || gerr == nil {
			t.Errorf("%d ids: Logits %v, Generate %v: want both refused", len(ids), lerr, gerr)
		}
	}
	if _, err := e.Logits(ctx, make([]int, 64)); err != nil {
		t.Errorf("a prompt filling the context: %v", err)
	}
}

// TestSlidingSessionDiverges: a session's next prompt that shares only an early prefix with what the session
// holds cannot reuse a sliding layer's ring once it has written later positions over that prefix's last ones
// (beyond its slack): the prompt is computed again, and the result is that of a request without a session.
func TestSlidingSessionDiverges(t *testing.T) {
	c := familyBase("MistralForCausalLM", "mistral")
	c["sliding_window"] = 4
	c["max_position_embeddings"] = 512 // a ring (kvcache.RingSlots(4, ringSlack) = 192 slots) smaller than the cache
	e := open(t, writeFamily(t, c, nil), Options{})
	ctx := context.Background()
	s := e.NewSession()
	defer s.Close()
	if _, err := e.Generate(ctx, Request{PromptIDs: familyIDs, MaxNewTokens: 300, StopIDs: []int{}, Session: s}, nil); err != nil {
		t.Fatal(err)
	}
	next := append(slices.Clone(familyIDs[:6]), 2, 8, 16)
	got, err := e.Generate(ctx, Request{PromptIDs: next, MaxNewTokens: 6, StopIDs: []int{}, Session: s}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.Generate(ctx, Request{PromptIDs: next, MaxNewTokens: 6, StopIDs: []int{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.GeneratedIDs, want.GeneratedIDs) || got.CachedPromptTokens != 0 {
		t.Errorf("session: %v (%d cached), alone: %v", got.GeneratedIDs, got.CachedPromptTokens, want.GeneratedIDs)
	}
}

// TestReleasedConfigs: the config.json of released Gemma 2, Gemma 3 (1B, and 4B's vision-language wrapper),
// Phi-3.5/Phi-4-mini and Mistral Small 3.1/3.2 checkpoints (as the Hub has them, factor lists shortened to their
// length) build an Architecture: every key is known, and the Plan is the model's (local/global layers, rope bases,
// longrope's recompute length).
func TestReleasedConfigs(t *testing.T) {
	factors := func(n int, v float64) string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprint(v)
		}
		return "[" + strings.Join(s, ", ") + "]"
	}
	for _, tc := range []struct {
		name, config string
		check        func(p *model.Plan) bool
	}{
		{"gemma-2-2b-it", `{"architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
			"attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 107],
			"final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
			"hidden_size": 2304, "initializer_range": 0.02, "intermediate_size": 9216, "max_position_embeddings": 8192,
			"model_type": "gemma2", "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0,
			"query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096,
			"torch_dtype": "float32", "transformers_version": "4.42.4", "use_cache": true, "vocab_size": 256000}`,
			func(p *model.Plan) bool {
				return len(p.Layers) == 26 && p.Layers[0].Window == 4096 && p.Layers[1].Window == 0 && p.EmbedScale == float64(float32(48))
			}},
		{"gemma-3-1b-it", `{"architectures": ["Gemma3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
			"attn_logit_softcapping": null, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 106],
			"final_logit_softcapping": null, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
			"initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
			"num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0,
			"query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": null,
			"rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
			"transformers_version": "4.50.0.dev0", "use_cache": true, "vocab_size": 262144}`,
			func(p *model.Plan) bool {
				// √1152 = 33.941 in bf16: 34.
				return p.Layers[4].Window == 512 && p.Layers[4].Rope == 1 && p.Layers[5].Window == 0 && p.Layers[5].Rope == 0 &&
					p.Ropes[0].Params.Theta == 1e6 && p.Ropes[1].Params.Theta == 1e4 && p.EmbedScale == 34
			}},
		{"Phi-3.5-mini-instruct", `{"architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
			"embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
			"intermediate_size": 8192, "max_position_embeddings": 131072, "model_type": "phi3", "num_attention_heads": 32,
			"num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096, "pad_token_id": 32000,
			"resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": {"long_factor": ` + factors(48, 1.5) + `, "short_factor": ` + factors(48, 1) + `,
			"type": "longrope"}, "rope_theta": 10000.0, "sliding_window": 262144, "tie_word_embeddings": false,
			"torch_dtype": "bfloat16", "transformers_version": "4.43.3", "use_cache": true, "vocab_size": 32064}`,
			func(p *model.Plan) bool {
				_, scale := p.Ropes[0].Frequencies(10)
				return p.Recompute == 4096 && p.Ropes[0].Dims == 96 && math.Abs(scale-math.Sqrt(1+math.Log(32)/math.Log(4096))) < 1e-12
			}},
		{"Phi-4-mini-instruct", `{"architectures": ["Phi3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
			"bos_token_id": 199999, "embd_pdrop": 0.0, "eos_token_id": 199999, "full_attn_mod": 1, "hidden_act": "silu",
			"hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192, "interpolate_factor": 1, "lm_head_bias": false,
			"max_position_embeddings": 131072, "mlp_bias": false, "model_type": "phi3", "num_attention_heads": 24,
			"num_hidden_layers": 32, "num_key_value_heads": 8, "original_max_position_embeddings": 4096, "pad_token_id": 199999,
			"partial_rotary_factor": 0.75, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": {"long_factor": ` + factors(48, 2) + `,
			"short_factor": ` + factors(48, 1) + `, "type": "longrope"}, "rope_theta": 10000.0, "sliding_window": 262144,
			"tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.45.0", "use_cache": true, "vocab_size": 200064}`,
			func(p *model.Plan) bool {
				return p.Recompute == 4096 && p.Ropes[0].Dims == 96 && p.HeadDim == 128 && p.KVHeads == 8
			}},
		{"gemma-3-4b-it", `{"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
			"eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
			"model_type": "gemma3", "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
			"num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
			"torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
			"vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304, "model_type": "siglip_vision_model",
			"num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": false}}`,
			func(p *model.Plan) bool {
				// √2560 = 50.596 in bf16: 50.5.
				return len(p.Layers) == 34 && p.Layers[4].Window == 1024 && p.Layers[5].Window == 0 && p.Ropes[0].Params.Type == "linear" &&
					p.Ropes[1].Params.Theta == 1e4 && p.EmbedScale == 50.5 && p.HeadDim == 256 && p.KVHeads == 4
			}},
		{"Mistral-Small-3.1-24B-Instruct-2503", `{"architectures": ["Mistral3ForConditionalGeneration"], "image_token_index": 10,
			"model_type": "mistral3", "multimodal_projector_bias": false, "projector_hidden_act": "gelu", "spatial_merge_size": 2,
			"text_config": {"attention_dropout": 0.0, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
			"initializer_range": 0.02, "intermediate_size": 32768, "max_position_embeddings": 131072, "model_type": "mistral",
			"num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
			"rope_theta": 1000000000.0, "sliding_window": null, "use_cache": true, "vocab_size": 131072},
			"torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
			"vision_config": {"attention_dropout": 0.0, "head_dim": 64, "hidden_act": "silu", "hidden_size": 1024, "image_size": 1540,
			"initializer_range": 0.02, "intermediate_size": 4096, "model_type": "pixtral", "num_attention_heads": 16,
			"num_channels": 3, "num_hidden_layers": 24, "patch_size": 14, "rope_theta": 10000.0}, "vision_feature_layer": -1}`,
			func(p *model.Plan) bool {
				return len(p.Layers) == 40 && p.Layers[0].Window == 0 && p.Ropes[0].Params.Theta == 1e9 && p.HeadDim == 128 &&
					p.KVHeads == 8 && p.Context == 131072
			}},
		// Mistral Small 3.2 as transformers 4.57.1 saved it (dtype at every level).
		{"Mistral-Small-3.2-24B-Instruct-2506", `{"architectures": ["Mistral3ForConditionalGeneration"], "dtype": "bfloat16",
			"image_token_index": 10, "model_type": "mistral3", "multimodal_projector_bias": false, "projector_hidden_act": "gelu",
			"spatial_merge_size": 2, "text_config": {"attention_dropout": 0.0, "dtype": "bfloat16", "head_dim": 128, "hidden_act": "silu",
			"hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 32768, "max_position_embeddings": 131072,
			"model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
			"rope_theta": 1000000000.0, "sliding_window": null, "use_cache": true, "vocab_size": 131072},
			"transformers_version": "4.57.1", "vision_config": {"attention_dropout": 0.0, "dtype": "bfloat16", "head_dim": 64,
			"hidden_act": "silu", "hidden_size": 1024, "image_size": 1540, "initializer_range": 0.02, "intermediate_size": 4096,
			"model_type": "pixtral", "num_attention_heads": 16, "num_channels": 3, "num_hidden_layers": 24, "patch_size": 14,
			"rope_theta": 10000.0}, "vision_feature_layer": -1}`,
			func(p *model.Plan) bool {
				return len(p.Layers) == 40 && p.Ropes[0].Params.Theta == 1e9 && p.HeadDim == 128
			}},
		// DeepSeek-V3's config.json less its quantization_config (the published weights are fp8 blocks, refused by
		// name; this is the config of their bf16 conversions).
		{"DeepSeek-V3", `{"architectures": ["DeepseekV3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
			"aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
			"hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
			"max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1,
			"n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 128,
			"num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
			"q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
			"rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0, "mscale_all_dim": 1.0,
			"original_max_position_embeddings": 4096, "type": "yarn"}, "rope_theta": 10000, "routed_scaling_factor": 2.5,
			"scoring_func": "sigmoid", "seq_aux": true, "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
			"torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": true, "v_head_dim": 128, "vocab_size": 129280}`,
			func(p *model.Plan) bool {
				// The cache: one latent of 512 and one rotary key of 64 per layer and position, 70,272 bytes a
				// token in float16 (docs/models.md).
				perToken := kvcache.Config{Layers: 61, Batch: 1, KVHeads: p.KVHeads, Capacity: 1, HeadDim: p.HeadDim,
					Half: true, Latent: latentLayers(p)}.Bytes()
				return len(p.Layers) == 61 && !p.Layers[2].MoE && p.Layers[3].MoE && p.Layers[60].Latent && p.KVHeads == 1 &&
					p.HeadDim == 576 && p.Ropes[0].Dims == 64 && p.Context == 163840 && perToken == 70272
			}},
	} {
		c, err := checkpoint.ParseConfig([]byte(tc.config))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		a, err := model.For(c)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !tc.check(a.Plan()) {
			t.Errorf("%s: plan %+v", tc.name, a.Plan())
		}
	}
}

// TestMoEBatchMatchesAlone: on the host kernels a mixture of experts computes each expert on the rows routed to
// it, so a batch gathers different rows per expert than a sequence alone; each sequence's log-probabilities must
// still be bit for bit its solo run's (the products sum each row in an order fixed by its length alone), from the
// checkpoint's f32 matrices and from q8 shards (a prompt of 20 tokens takes the tiled block products).
func TestMoEBatchMatchesAlone(t *testing.T) {
	c := qwen2MoeConfig() // widths that Q8_0's 32-value blocks divide
	c["hidden_size"], c["head_dim"], c["intermediate_size"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"] = 64, 16, 64, 32, 32
	dir := writeFamily(t, c, nil)
	q8 := q8Shards(t, dir)
	long := append(slices.Clone(familyIDs), 5, 6, 7, 8, 9, 10, 11, 13)
	reversed := slices.Clone(long)
	slices.Reverse(reversed)
	reqs := []Request{
		{PromptIDs: familyIDs, MaxNewTokens: 7, StopIDs: []int{}, Logprobs: true},
		{PromptIDs: familyIDs[:2], MaxNewTokens: 12, StopIDs: []int{}, Logprobs: true},
		{PromptIDs: familyIDs[3:9], MaxNewTokens: 5, StopIDs: []int{}, Logprobs: true, PrefillChunk: 4},
		{PromptIDs: long, MaxNewTokens: 4, StopIDs: []int{}, Logprobs: true},
		{PromptIDs: reversed, MaxNewTokens: 4, StopIDs: []int{}, Logprobs: true},
	}
	for _, model := range []string{dir, q8} {
		batchedAsAlone(t, model, open(t, model, Options{}), reqs)
	}
}

// TestGLM4MoEPredictionLayers: GLM-4.5 checkpoints hold their multi-token-prediction layer after the decoder's
// (model.layers.num_hidden_layers.*, num_nextn_predict_layers of them), which transformers does not compute: left
// out, the model computes as the float64 reference; without num_nextn_predict_layers the layer is refused by name.
func TestGLM4MoEPredictionLayers(t *testing.T) {
	dir := writeFamily(t, glm4MoeConfig(), nil) // three layers; the last becomes the prediction layer
	for _, n := range []int{1, 0} {
		c := glm4MoeConfig()
		c["num_hidden_layers"], c["num_nextn_predict_layers"] = 2, n
		b, _ := json.Marshal(c)
		if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		e, err := Open(context.Background(), dir, Options{ShardDir: filepath.Join(t.TempDir(), "shards")})
		if n == 0 {
			if err == nil || !strings.Contains(err.Error(), "layer.2") {
				t.Errorf("without num_nextn_predict_layers: got %v, want layer 2's tensors refused by name", err)
			}
			if e != nil {
				e.Close()
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.Logits(context.Background(), familyIDs)
		e.Close()
		if err != nil {
			t.Fatal(err)
		}
		ck, err := checkpoint.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := reference.Forward(ck, familyIDs)
		if err != nil {
			t.Fatal(err)
		}
		if d := maxDiff(got, toF32(ref.Logits)); d > 1e-4 {
			t.Errorf("logits differ from the reference by %g", d)
		}
	}
}
