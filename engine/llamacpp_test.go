package engine

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLlamaCppArithmeticTiny: with Arithmetic llama.cpp, the tiny random Llama GGUF files that llama.cpp
// quantized (../gguf/testdata/tiny) give llama.cpp's own logits bit for bit (scripts/fixtures/llama_cpp_refs.py:
// its top 8 logits at every position of the prompt, evaluated as one batch, then 16 greedy steps): float32
// matrices (tinyBLAS for the prompt, ggml_vec_dot_f32 for single rows), Q8_0 and Q4_1 (its vec_dot kernels). A wrong summation order in any op moves some logit by an ulp, which this test sees. Types it does not
// reproduce are refused by Open, naming a tensor.
func TestLlamaCppArithmeticTiny(t *testing.T) {
	var ref struct {
		Types map[string]llamaCppCase `json:"types"`
	}
	readJSON(t, "../gguf/testdata/llamacpp/tiny.json", &ref)
	for _, name := range []string{"F32", "Q8_0", "Q4_1"} {
		t.Run(name, func(t *testing.T) {
			c := ref.Types[name]
			e, err := Open(context.Background(), filepath.Join("..", c.File), Options{ShardDir: t.TempDir(), Arithmetic: ArithmeticLlamaCpp})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			logits, err := e.Logits(context.Background(), c.PromptIDs)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range c.PromptLogits {
				for j, id := range s.IDs {
					if got := logits[i][id]; got != float32(s.Logits[j]) {
						t.Fatalf("prompt position %d, token %d: logit %.9g, llama.cpp %.9g", i, id, got, s.Logits[j])
					}
				}
				if top := topIDs(logits[i], len(s.IDs)); !slices.Equal(top, s.IDs) {
					t.Fatalf("prompt position %d: top ids %v, llama.cpp %v", i, top, s.IDs)
				}
			}
			ids, lp := generateGreedy(t, e, c)
			if !slices.Equal(ids, c.IDs) {
				t.Fatalf("greedy ids %v, llama.cpp %v", ids, c.IDs)
			}
			// The log-probabilities of the decode steps differ only by the float64 rounding of the two
			// log-sum-exps. The first step's reference is the prompt batch's last row (the fixture keeps every
			// row's logits, so llama.cpp multiplied the head with 16 rows at once: tinyBLAS for F32), which the
			// prompt check above covered; Generate computes the head for that one row, as llama.cpp does when
			// only the last row's logits are kept.
			for i := 1; i < len(ids); i++ {
				s := c.Steps[i]
				for j, id := range s.IDs {
					if got, ok := lp(i, id); !ok || math.Abs(got-s.logprob(j)) > 1e-9 {
						t.Fatalf("step %d token %d: log-probability %.12g, llama.cpp %.12g", i, id, got, s.logprob(j))
					}
				}
			}
		})
	}
	for name, want := range map[string]string{"F16": "is F16", "BF16": "is BF16", "Q4_0": "not Q4_0", "Q4_K": "not Q4_K", "Q6_K": "not Q6_K"} {
		_, err := Open(context.Background(), filepath.Join("..", ref.Types[name].File), Options{ShardDir: t.TempDir(), Arithmetic: ArithmeticLlamaCpp})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "tensor ") {
			t.Errorf("%s with arithmetic llama.cpp: %v, want an error naming a tensor and saying %q", name, err, want)
		}
	}
}

// topIDs returns the ids of row's k largest values, largest first (the first of equal values first).
func topIDs(row []float32, k int) []int {
	ids := make([]int, len(row))
	for i := range ids {
		ids[i] = i
	}
	slices.SortStableFunc(ids, func(a, b int) int {
		switch {
		case row[a] > row[b]:
			return -1
		case row[a] < row[b]:
			return 1
		}
		return 0
	})
	return ids[:k]
}
