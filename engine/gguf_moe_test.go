package engine

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/reference"
)

// ggufMoEQuantTolerance bounds the logit differences from llama.cpp's on the K-quant mixture-of-experts file in the
// engine's arithmetic: both multiply the same Q4_K/Q6_K blocks by activations rounded to 8 bits (Q8_K) with the
// same integer products and sum them in other orders (1e-05 apart on this file), so the bound leaves room for an
// activation rounded to the other side of an 8-bit step on another CPU's order, not for a wrong expert.
const ggufMoEQuantTolerance = 1e-3

// ggufLlamaCppTolerance bounds the difference from llama.cpp on files whose products llama.cpp computes with
// other inputs than layerstream: gpt-oss's MXFP4 experts, which llama.cpp multiplies by inputs rounded to Q8_0 and
// layerstream by float32 ones (exact weights: the file's meaning in transformers is matched within
// ggufFamilyTolerance), 0.31 apart on this file; its greedy ids are llama.cpp's.
var ggufLlamaCppTolerance = map[string]float64{"gpt_oss-mxfp4": 0.5}

// forEachGGUFMoE runs f for every mixture-of-experts GGUF file (gguf/testdata/moe).
func forEachGGUFMoE(t *testing.T, f func(t *testing.T, name, file string, llama map[string]*reference.Tensor)) int {
	t.Helper()
	return forEachGGUFIn(t, "moe", "scripts/fixtures/gguf_moe.py", f)
}

// TestGGUFMoE opens every mixture-of-experts GGUF file llama.cpp made (gguf/testdata/moe, from the transformers
// fixtures of Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, GLM-4.5 (also with group-limited routing), MiniMax-M2 and
// gpt-oss (F32 and MXFP4 experts; ggufLlamaCppTolerance), DeepSeek-V3 (deepseek2: multi-head latent attention, its
// attn_k_b and attn_v_b read as k_b_proj and v_b_proj), Llama 4 (llama4: with the chunk and query temperature
// llama.cpp fixes, which the checkpoint converted says too), and a Q4_K_M Qwen3-MoE:
// scripts/fixtures/gguf_moe.py), its fused experts read as one tensor per expert, and compares layerstream's
// logits of the 40 ids with llama.cpp's on the same file (ggufFamilyTolerance: float32 weights and arithmetic on
// both sides; ggufMoEQuantTolerance for the K-quant file) and with transformers' on the checkpoint converted,
// with the settings llama.cpp reads from the file (<name>.transformers.safetensors), and the 20 greedy ids after
// them with llama.cpp's, on the host kernels, and for the float32 files on the graphs too (which multiply a
// quantized file's weights by activations not rounded to 8 bits as llama.cpp's are, so their greedy ids part from
// llama.cpp's on the tiny K-quant model's small margins).
func TestGGUFMoE(t *testing.T) {
	forEachGGUFMoE(t, func(t *testing.T, name, file string, llama map[string]*reference.Tensor) {
		ids := ints(llama["input_ids"].I64)
		e, err := Open(context.Background(), file, Options{ShardDir: filepath.Join(t.TempDir(), "shards")})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		got, err := e.Logits(context.Background(), ids)
		if err != nil {
			t.Fatal(err)
		}
		tol := ggufFamilyTolerance
		if !checkFileMeaning(t, file, got) {
			tol = ggufMoEQuantTolerance
		}
		if t, ok := ggufLlamaCppTolerance[name]; ok {
			tol = t
		}
		d := maxLogitDiff(got, llama["logits"].F32)
		t.Logf("largest logit difference from llama.cpp %.2g (tolerance %g)", d, tol)
		if d > tol {
			t.Errorf("logits differ from llama.cpp's on the same file by %.3g (tolerance %g)", d, tol)
		}
		want := ints(llama["greedy_ids"].I64)
		checkGGUFGreedy(t, "host kernels", e, ids, want)
		if tol == ggufMoEQuantTolerance {
			return // the graphs multiply quantized weights by activations not rounded to 8 bits, unlike llama.cpp
		}
		g, err := Open(context.Background(), file, Options{ShardDir: filepath.Join(t.TempDir(), "graph"), GraphDecode: true})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		checkGGUFGreedy(t, "graphs", g, ids, want)
	})
}

// checkGGUFGreedy generates len(want) tokens after ids (no stop tokens) and compares them with want.
func checkGGUFGreedy(t *testing.T, what string, e *Engine, ids, want []int) {
	t.Helper()
	res, err := e.Generate(context.Background(), Request{PromptIDs: ids, MaxNewTokens: len(want), StopIDs: []int{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.GeneratedIDs, want) {
		t.Errorf("greedy ids (%s) %v, llama.cpp %v", what, res.GeneratedIDs, want)
	}
}

// llamaCppRefusedMoE are the mixture-of-experts files Arithmetic llama.cpp refuses, with what the refusal says:
// gpt-oss's attention sinks and clamped SwiGLU, DeepSeek-V3's multi-head latent attention (llamaCppUncovered),
// Llama 4's chunked attention, query temperature and input-weighted experts.
var llamaCppRefusedMoE = map[string]string{"deepseek_v3": "DeepseekV3ForCausalLM is not covered: multi-head latent attention",
	"llama4_text": "architecture Llama4ForCausalLM is not covered",
	"gpt_oss":     "architecture GptOssForCausalLM is not covered", "gpt_oss-mxfp4": "architecture GptOssForCausalLM is not covered"}

// TestLlamaCppArithmeticMoE: with Arithmetic llama.cpp, every mixture-of-experts file (Mixtral, Qwen2-MoE,
// Qwen3-MoE, OLMoE: softmax routing; GLM-4.5, also with expert groups, and MiniMax-M2: sigmoid routing with a choice
// bias, partial rotary embeddings; F32, and the Q4_K_M Qwen3-MoE) gives llama.cpp's logits of the 40 ids bit for
// bit (the fixtures were made with llama.cpp's cache in float32, KVCache f32) and its 20 greedy ids after them,
// each generation step keeping only the last position's logits as llama.cpp does; gpt-oss's, DeepSeek-V3's and
// Llama 4's files are refused by name (llamaCppRefusedMoE).
func TestLlamaCppArithmeticMoE(t *testing.T) {
	forEachGGUFMoE(t, func(t *testing.T, name, file string, llama map[string]*reference.Tensor) {
		ids := ints(llama["input_ids"].I64)
		if refusal := llamaCppRefusedMoE[name]; refusal != "" {
			llamaCppExact(t, file, ids, llama["logits"].F32, refusal)
			return
		}
		e := llamaCppExact(t, file, ids, llama["logits"].F32, "")
		checkGGUFGreedy(t, "arithmetic llama.cpp", e, ids, ints(llama["greedy_ids"].I64))
	})
}

// TestLlamaCppArithmeticMoEBatched: with Arithmetic llama.cpp, a sequence of the Q4_K_M mixture of experts computed
// in a batch with 15 others (the 40-token prompt and short ones, decoding together) gets the bits it gets alone:
// each expert multiplies the rows of one sequence routed to it as llama.cpp's mul_mat_id does for that sequence
// alone (its tiled kernel from 8 rows of the sequence, not of the batch: 16 sequences decoding at once route
// about 8 rows to each of the 4 experts, and layer 2's Q6_K experts are not repacked).
func TestLlamaCppArithmeticMoEBatched(t *testing.T) {
	file := "../gguf/testdata/moe/qwen3moe-q4km.gguf"
	llama, err := reference.ReadTensors(strings.TrimSuffix(file, ".gguf") + ".llamacpp.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	e, err := Open(context.Background(), file, Options{ShardDir: t.TempDir(), Arithmetic: ArithmeticLlamaCpp, KVCache: KVCacheF32, MaxBatch: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	reqs := []Request{{PromptIDs: ints(llama["input_ids"].I64), MaxNewTokens: 6}}
	for i := range 15 {
		reqs = append(reqs, Request{PromptIDs: []int{1, 40 + i, 41 + 2*i}, MaxNewTokens: 10 + i%3})
	}
	batchedAsAlone(t, file, e, reqs)
}
