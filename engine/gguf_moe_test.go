package engine

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/reference"
)

// ggufMoEQuantTolerance bounds the logit differences from llama.cpp's on the K-quant mixture-of-experts file in the
// engine's arithmetic: both multiply the same Q4_K/Q6_K blocks by activations rounded to 8 bits (Q8_K) with the
// same integer products and sum them in other orders (3.8e-06 apart on this file), so the bound leaves room for
// an activation rounded to the other side of an 8-bit step on another CPU's order, not for a wrong expert.
const ggufMoEQuantTolerance = 1e-3

// TestGGUFMoE opens every mixture-of-experts GGUF file llama.cpp made (gguf/testdata/moe, from the transformers
// fixtures of Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, GLM-4.5 and MiniMax-M2, and a Q4_K_M Qwen3-MoE:
// scripts/fixtures/gguf_moe.py), its fused experts read as one tensor per expert, and compares layerstream's
// logits of the 40 ids with llama.cpp's on the same file (ggufFamilyTolerance: float32 weights and arithmetic on
// both sides; ggufMoEQuantTolerance for the K-quant file) and with transformers' on the checkpoint converted,
// with the settings llama.cpp reads from the file (<name>.transformers.safetensors), and the 20 greedy ids after
// them with llama.cpp's, on the host kernels, and for the float32 files on the graphs too (which multiply a
// quantized file's weights by activations not rounded to 8 bits as llama.cpp's are, so their greedy ids part from
// llama.cpp's on the tiny K-quant model's small margins).
func TestGGUFMoE(t *testing.T) {
	files, err := filepath.Glob("../gguf/testdata/moe/*.gguf")
	if err != nil || len(files) == 0 {
		t.Fatalf("no GGUF files in gguf/testdata/moe (made by scripts/fixtures/gguf_moe.py): %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".gguf")
		t.Run(name, func(t *testing.T) {
			llama, err := reference.ReadTensors(strings.TrimSuffix(file, ".gguf") + ".llamacpp.safetensors")
			if err != nil {
				t.Fatal(err)
			}
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
			meaning := strings.TrimSuffix(file, ".gguf") + ".transformers.safetensors"
			if _, err := os.Stat(meaning); err == nil {
				m, err := reference.ReadTensors(meaning)
				if err != nil {
					t.Fatal(err)
				}
				d := maxLogitDiff(got, m["logits"].F32)
				t.Logf("largest logit difference from transformers with the file's meaning %.2g", d)
				if d > ggufFamilyTolerance {
					t.Errorf("logits differ from transformers' with the settings llama.cpp reads from the file by %.3g (tolerance %g)", d, ggufFamilyTolerance)
				}
			} else {
				tol = ggufMoEQuantTolerance
			}
			d := maxLogitDiff(got, llama["logits"].F32)
			t.Logf("largest logit difference from llama.cpp %.2g (tolerance %g)", d, tol)
			if d > tol {
				t.Errorf("logits differ from llama.cpp's on the same file by %.3g (tolerance %g)", d, tol)
			}
			want := ints(llama["greedy_ids"].I64)
			checkGGUFGreedy(t, "host kernels", e, ids, want)
			if tol != ggufFamilyTolerance {
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
