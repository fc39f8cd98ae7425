package engine

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/tokenizer"
)

// llamaCppStep is one position's reference from llama.cpp: its top logits and the log-sum-exp of all of them.
type llamaCppStep struct {
	IDs    []int     `json:"ids"`
	Logits []float64 `json:"logits"`
	LSE    float64   `json:"lse"`
}

// margin is the reference's top-1 minus top-2 logit.
func (s llamaCppStep) margin() float64 { return s.Logits[0] - s.Logits[1] }

// llamaCppCase is a prompt and llama.cpp's greedy continuation.
type llamaCppCase struct {
	Prompt       string         `json:"prompt"`
	PromptIDs    []int          `json:"prompt_ids"`
	IDs          []int          `json:"ids"`
	Steps        []llamaCppStep `json:"steps"`
	PromptLogits []llamaCppStep `json:"prompt_logits"`
	File         string         `json:"file"`
	Committed    bool           `json:"committed"`
}

type tokenizeCase struct {
	Text string `json:"text"`
	IDs  []int  `json:"ids"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// Tolerances against llama.cpp (scripts/fixtures/llama_cpp_refs.py). llama.cpp multiplies quantized weights
// with activations it quantizes too (to 8 bits per block of 32: Q8_1 for Q4_x weights, Q8_0 for Q8_0 weights),
// and layerstream with float32 activations: the logits differ by that rounding, not by float32 summation
// order. nearTie is the reference margin under which a different argmax is not a disagreement.
const (
	nearTie = 1e-3
	// smolLogprobTol bounds |logprob(layerstream) - logprob(llama.cpp)| of llama.cpp's top-8 tokens at every
	// step before the sequences part; measured max on the 8 prompts: see TestGGUFSmolLM2MatchesLlamaCpp's log.
	smolLogprobTol = 0.25
	// smolF32LogprobTol is the same against llama.cpp on a copy of the file dequantized to F32 (the same weight
	// values, multiplied in float32 by both): only float32 summation order differs.
	smolF32LogprobTol = 1e-3
)

// compareGreedy runs c's prompt greedily for len(c.IDs) tokens and compares with llama.cpp: the tokens must be
// equal until the first difference, which must be where llama.cpp's own top two were within nearTie; at every
// step before it, the log-probabilities of llama.cpp's top tokens must be within tol. It returns the largest
// log-probability difference and the number of equal tokens.
func compareGreedy(t *testing.T, e *Engine, c llamaCppCase, tol float64) (float64, int) {
	t.Helper()
	var got []Token
	req := Request{PromptIDs: c.PromptIDs, MaxNewTokens: len(c.IDs), StopIDs: []int{-1}, Logprobs: true, TopLogprobs: MaxTopLogprobs}
	if _, err := e.Generate(context.Background(), req, func(tk Token) error { got = append(got, tk); return nil }); err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i, tk := range got {
		ref := c.Steps[i]
		lp := map[int]float64{}
		for _, x := range tk.TopLogprobs {
			lp[x.ID] = x.Logprob
		}
		for j, id := range ref.IDs {
			want := ref.Logits[j] - ref.LSE
			g, ok := lp[id]
			if !ok {
				if want > -8 { // a likely reference token missing from our top 20
					t.Errorf("%q step %d: llama.cpp's token %d (logprob %.3f) is not among layerstream's top %d", c.Prompt, i+1, id, want, MaxTopLogprobs)
				}
				continue
			}
			worst = max(worst, math.Abs(g-want))
			if math.Abs(g-want) > tol {
				t.Errorf("%q step %d token %d: logprob %.4f, llama.cpp %.4f (tolerance %g)", c.Prompt, i+1, id, g, want, tol)
			}
		}
		if tk.ID != c.IDs[i] {
			if m := ref.margin(); m >= nearTie {
				t.Errorf("%q: token %d is %d, llama.cpp's %d with a margin of %.4g (not a near-tie, < %g)", c.Prompt, i+1, tk.ID, c.IDs[i], m, nearTie)
			} else {
				t.Logf("%q: first difference at token %d (%d vs llama.cpp's %d), a near-tie: llama.cpp's margin %.2g", c.Prompt, i+1, tk.ID, c.IDs[i], m)
			}
			return worst, i
		}
	}
	return worst, len(got)
}

// TestGGUFSmolLM2MatchesLlamaCpp runs the SmolLM2-135M-Instruct Q4_1 GGUF and compares with llama.cpp on the same
// file: the tokenizer made from the GGUF metadata (ids equal to llama.cpp's), and greedy decoding of 8 prompts
// × 64 tokens (equal tokens, or a first difference at a near-tie; log-probabilities within smolLogprobTol).
func TestGGUFSmolLM2MatchesLlamaCpp(t *testing.T) {
	path := testutil.SmolLM2GGUF(t)
	var ref struct {
		Cases    []llamaCppCase `json:"cases"`
		CasesF32 []llamaCppCase `json:"cases_f32"`
		Tokenize []tokenizeCase `json:"tokenize"`
	}
	readJSON(t, "../gguf/testdata/llamacpp/smollm2-q4_1.json", &ref)
	if len(ref.Cases) != 8 {
		t.Fatalf("%d reference cases, want 8", len(ref.Cases))
	}
	dir := t.TempDir()
	e, err := Open(context.Background(), path, Options{ShardDir: filepath.Join(dir, "shards")})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	tok, err := tokenizer.Load(e.Dir())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range append(ref.Tokenize, func() []tokenizeCase {
		var p []tokenizeCase
		for _, c := range ref.Cases {
			p = append(p, tokenizeCase{c.Prompt, c.PromptIDs})
		}
		return p
	}()...) {
		ids, err := tok.Encode(c.Text, false)
		if err != nil || !slices.Equal(ids, c.IDs) {
			t.Errorf("Encode(%q) = %v (%v), llama.cpp %v", c.Text, ids, err, c.IDs)
		}
	}
	for _, set := range []struct {
		name  string
		cases []llamaCppCase
		tol   float64
	}{{"llama.cpp on the F32 copy", ref.CasesF32, smolF32LogprobTol}, {"llama.cpp on the Q4_1 file", ref.Cases, smolLogprobTol}} {
		if len(set.cases) != 8 {
			t.Fatalf("%s: %d reference cases, want 8", set.name, len(set.cases))
		}
		worst, equal, total := 0.0, 0, 0
		for _, c := range set.cases {
			w, n := compareGreedy(t, e, c, set.tol)
			worst, equal, total = max(worst, w), equal+n, total+len(c.IDs)
		}
		t.Logf("SmolLM2 Q4_1 vs %s: %d of %d greedy tokens equal before any near-tie; largest logprob difference %.5f (tolerance %g)", set.name, equal, total, worst, set.tol)
	}
}

// TestGGUFTinyTypesMatchLlamaCpp runs a tiny random Llama converted and quantized by llama.cpp to each type and
// compares every position's logits (prompt and 16 greedy tokens) with llama.cpp's. The quantized files are
// committed (../gguf/testdata/tiny); F32, F16 and BF16 are made by scripts/fixtures/llama_cpp_refs.py into
// testdata/models.
func TestGGUFTinyTypesMatchLlamaCpp(t *testing.T) {
	var ref struct {
		Types    map[string]llamaCppCase `json:"types"`
		Tokenize []tokenizeCase          `json:"tokenize"`
	}
	readJSON(t, "../gguf/testdata/llamacpp/tiny.json", &ref)
	for _, name := range []string{"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"} {
		t.Run(name, func(t *testing.T) {
			c, ok := ref.Types[name]
			if !ok {
				t.Fatalf("no reference for %s", name)
			}
			path := filepath.Join("..", c.File)
			if !c.Committed {
				path = testutil.ModelPath(t, c.File, "scripts/fixtures/llama_cpp_refs.py --only tiny")
			}
			e, err := Open(context.Background(), path, Options{ShardDir: filepath.Join(t.TempDir(), "shards")})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if name == "Q8_0" {
				tok, err := tokenizer.Load(e.Dir())
				if err != nil {
					t.Fatal(err)
				}
				for _, tc := range ref.Tokenize {
					ids, err := tok.Encode(tc.Text, true)
					if err != nil || !slices.Equal(ids, tc.IDs) {
						t.Errorf("SentencePiece tokenizer: Encode(%q) = %v (%v), llama.cpp %v", tc.Text, ids, err, tc.IDs)
					}
				}
			}
			w, n := compareGreedy(t, e, c, tinyLogprobTol[name])
			t.Logf("%s: %d of %d greedy tokens equal; largest logprob difference %.5f (tolerance %g)", name, n, len(c.IDs), w, tinyLogprobTol[name])
			if n < len(c.IDs)/2 {
				t.Errorf("%s: only %d of %d tokens before the first (near-tie) difference", name, n, len(c.IDs))
			}
		})
	}
}

// tinyLogprobTol is per type: llama.cpp computes F32/F16/BF16 matrices in float (tight), and quantized ones
// against 8-bit-quantized activations (looser).
var tinyLogprobTol = map[string]float64{
	"F32": 1e-3, "F16": 1e-3, "BF16": 1e-3,
	"Q8_0": 0.05, "Q4_0": 0.05, "Q4_1": 0.05, "Q4_K": 0.05, "Q5_K": 0.05, "Q6_K": 0.05,
}
