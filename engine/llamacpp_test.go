package engine

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/reference"
)

// TestLlamaCppArithmeticTiny: with Arithmetic llama.cpp, the tiny random Llama GGUF files that llama.cpp
// quantized (../gguf/testdata/tiny) give llama.cpp's own logits bit for bit (scripts/fixtures/llama_cpp_refs.py:
// its top 8 logits at every position of the prompt, evaluated as one batch, then 16 greedy steps): float32
// matrices (tinyBLAS for the prompt, ggml_vec_dot_f32 for single rows), Q8_0 and Q4_1 (its vec_dot kernels), Q4_0
// and Q4_K (its repacked kernels), Q6_K (its tiled kernel for the prompt, vec_dot for single rows). A wrong
// summation order in any op moves some logit by an ulp, which this test sees (the i-quant files' rows hold one
// super-block, so their lanes' and tiles' fused updates are checked by the kernels' llama.cpp fixtures). Types it
// does not reproduce (F16, BF16) are refused by Open before the split, naming a tensor.
func TestLlamaCppArithmeticTiny(t *testing.T) {
	for _, cache := range []KVCache{KVCacheF32, KVCacheF16} {
		var ref struct {
			Types map[string]llamaCppCase `json:"types"`
		}
		fixture := "../gguf/testdata/llamacpp/tiny.json"
		if cache == KVCacheF16 {
			fixture = "../gguf/testdata/llamacpp/tiny-f16cache.json" // llama-cpp-python's default cache
		}
		readJSON(t, fixture, &ref)
		for _, name := range []string{"F32", "Q8_0", "Q4_1", "Q4_0", "Q4_K", "Q6_K"} {
			t.Run(name+"/"+string(cache), func(t *testing.T) { checkLlamaCppTiny(t, ref.Types[name], cache) })
		}
	}
	// Q3_K and Q5_K files (llama.cpp's vec_dot kernels for fewer than 8 rows, its tiled kernel for more), a Q2_K
	// file (its repacked AVX-512 kernels), and the Q4_K file with its lm_head tied to the embedding (llama.cpp loads
	// the embedding again as the output, repacked).
	var kq struct {
		Caches map[string]map[string]llamaCppCase `json:"caches"`
	}
	readJSON(t, "../gguf/testdata/llamacpp/tiny-kquants.json", &kq)
	for _, cache := range []KVCache{KVCacheF32, KVCacheF16} {
		for _, name := range []string{"Q2_K", "Q3_K", "Q5_K", "Q4_K-tied"} {
			t.Run(name+"/"+string(cache), func(t *testing.T) { checkLlamaCppTiny(t, kq.Caches[string(cache)][name], cache) })
		}
	}
	// The codebook i-quants (vec_dot and tiled).
	readJSON(t, "../gguf/testdata/llamacpp/tiny-grids.json", &kq)
	for _, cache := range []KVCache{KVCacheF32, KVCacheF16} {
		for _, name := range []string{"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"} {
			t.Run(name+"/"+string(cache), func(t *testing.T) { checkLlamaCppTiny(t, kq.Caches[string(cache)][name], cache) })
		}
	}
	// IQ4_NL (repacked as Q4_0 is, with its grid as the lookup table) and IQ4_XS (vec_dot and tiled).
	readJSON(t, "../gguf/testdata/llamacpp/tiny-iquants.json", &kq)
	for _, cache := range []KVCache{KVCacheF32, KVCacheF16} {
		for _, name := range []string{"IQ4_NL", "IQ4_XS"} {
			t.Run(name+"/"+string(cache), func(t *testing.T) { checkLlamaCppTiny(t, kq.Caches[string(cache)][name], cache) })
		}
	}
	var ref struct {
		Types map[string]llamaCppCase `json:"types"`
	}
	readJSON(t, "../gguf/testdata/llamacpp/tiny.json", &ref)
	for file, want := range map[string]string{ref.Types["F16"].File: "is F16", ref.Types["BF16"].File: "is BF16"} {
		dir := filepath.Join(t.TempDir(), "shards")
		_, err := Open(context.Background(), filepath.Join("..", file), Options{ShardDir: dir, Arithmetic: ArithmeticLlamaCpp})
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "tensor ") {
			t.Errorf("%s with arithmetic llama.cpp: %v, want an error naming a tensor and saying %q", file, err, want)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s with arithmetic llama.cpp: refused after a split into %s (%v), want before", file, dir, err)
		}
	}
	// A compute dtype other than float32 asked for by name, before the split too.
	dir := filepath.Join(t.TempDir(), "shards")
	_, err := Open(context.Background(), filepath.Join("..", ref.Types["Q8_0"].File), Options{ShardDir: dir, Arithmetic: ArithmeticLlamaCpp, DType: "bf16"})
	if err == nil || !strings.Contains(err.Error(), "compute dtype BF16 is not covered") {
		t.Errorf("--dtype bf16 with arithmetic llama.cpp: %v, want the compute dtype refused", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("--dtype bf16 with arithmetic llama.cpp: refused after a split into %s (%v), want before", dir, err)
	}
}

// checkLlamaCppTiny checks one tiny file with Arithmetic llama.cpp and the given cache against llama.cpp's
// outputs c: every prompt position's top logits as floats, the greedy ids, the decode steps' log-probabilities.
func checkLlamaCppTiny(t *testing.T, c llamaCppCase, cache KVCache) {
	e, err := Open(context.Background(), filepath.Join("..", c.File), Options{ShardDir: t.TempDir(), Arithmetic: ArithmeticLlamaCpp, KVCache: cache})
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

// TestLlamaCppArithmeticFamilies: with Arithmetic llama.cpp, every family GGUF file llama.cpp's converter made
// (gguf/testdata/families, float32 matrices) of a covered architecture gives llama.cpp's logits of the fixture's
// 40 ids bit for bit: q/k in rotary pairs (Llama, Granite, SmolLM3 with its NoPE layers) or halves (Qwen2,
// Qwen3 and OLMo 2 with their q/k norms), biases, Granite's multipliers, linear scaling and Llama 3's frequency
// factors. The others are refused, saying what is not covered. The fixtures were made with llama.cpp's cache in
// float32 (-ctk f32 -ctv f32), which KVCache f32 asks for.
func TestLlamaCppArithmeticFamilies(t *testing.T) {
	refused := map[string]string{
		"gemma2": "architecture Gemma2ForCausalLM is not covered", "gemma3": "architecture Gemma3ForCausalLM is not covered",
		"gemma3-vl": "architecture Gemma3ForCausalLM is not covered", "gemma4_text": "architecture Gemma4ForCausalLM is not covered", "gemma4_text-moe": "architecture Gemma4ForCausalLM is not covered",
		"qwen3_5":       "architecture Qwen3_5ForCausalLM is not covered",
		"qwen3_5_moe":   "architecture Qwen3_5MoeForCausalLM is not covered",
		"qwen3_next":    "architecture Qwen3NextForCausalLM is not covered",
		"phi3":          "architecture Phi3ForCausalLM is not covered",
		"phi3-longrope": "architecture Phi3ForCausalLM is not covered", "phi4-mini": "architecture Phi3ForCausalLM is not covered",
		"llama-rope-yarn":    `rope type "yarn" is not covered`,
		"llama-rope-dynamic": "40 tokens exceed the model's context",              // as with the engine's arithmetic
		"olmo3":              "architecture Olmo3ForCausalLM is not covered",      // sliding windows and yarn: not reproduced
		"ministral3":         "architecture Ministral3ForCausalLM is not covered", // yarn and the query scale: not reproduced
	}
	exact := 0
	files := forEachGGUFFamily(t, func(t *testing.T, name, file string, llama map[string]*reference.Tensor) {
		if llamaCppExact(t, file, ints(hffixture.MustReference(t, name).InputIDs), llama["logits"].F32, refused[name]) != nil {
			exact++
		}
	})
	if want := files - len(refused); exact != want {
		t.Errorf("%d files bit for bit, want %d", exact, want)
	}
}

// llamaCppExact opens file with Arithmetic llama.cpp (a float32 cache, as the fixtures were made) and requires the
// logits of ids equal to want as floats, returning the engine (closed when the test ends); or, where refusal is not empty, requires it refused
// with an error saying so, returning nil.
func llamaCppExact(t *testing.T, file string, ids []int, want []float32, refusal string) *Engine {
	t.Helper()
	var got [][]float32
	e, err := Open(context.Background(), file, Options{ShardDir: t.TempDir(), Arithmetic: ArithmeticLlamaCpp, KVCache: KVCacheF32})
	if err == nil {
		t.Cleanup(func() { e.Close() })
		got, err = e.Logits(context.Background(), ids)
	}
	if refusal != "" {
		if err == nil || !strings.Contains(err.Error(), refusal) {
			t.Fatalf("%v; want it refused saying %q", err, refusal)
		}
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	for p, row := range got {
		for j, v := range row {
			if v != want[p*len(row)+j] {
				t.Fatalf("position %d, token %d: logit %.9g, llama.cpp %.9g (largest difference %.2g)", p, j, v, want[p*len(row)+j], maxLogitDiff(got, want))
			}
		}
	}
	return e
}

// TestLlamaCppArithmeticBatched: a sequence computed in a batch with others (continuous batching, prompts of
// several lengths, a 65-token prompt joining while another sequence decodes, which the prefill budget cuts) gets
// the bits it gets alone, which are llama.cpp's: each op reproduces llama.cpp evaluating that sequence by itself,
// its prompt in one batch (a float32 matrix takes ggml_vec_dot_f32 for a decode step however many sequences
// share it, and tinyBLAS for every chunk of a prompt, which the budget never cuts down to one token).
func TestLlamaCppArithmeticBatched(t *testing.T) {
	long := []int{1}
	for i := range 64 {
		long = append(long, 10+i)
	}
	for _, file := range []string{"tiny-llama-F32.gguf", "tiny-llama-Q4_1.gguf"} {
		cache := KVCacheF32
		if file == "tiny-llama-F32.gguf" {
			cache = KVCacheF16 // whose products change with the batch in llama.cpp
		}
		e, err := Open(context.Background(), filepath.Join("..", "gguf", "testdata", "tiny", file),
			Options{ShardDir: t.TempDir(), Arithmetic: ArithmeticLlamaCpp, KVCache: cache, MaxBatch: 3, PrefillBudget: 64})
		if err != nil {
			t.Fatal(err)
		}
		reqs := []Request{
			{PromptIDs: []int{1, 403, 407, 261}, MaxNewTokens: 2},
			{PromptIDs: []int{1, 320}, MaxNewTokens: 30},
			{PromptIDs: []int{1, 449, 300, 301, 302, 303, 304}, MaxNewTokens: 15},
			{PromptIDs: long, MaxNewTokens: 5}, // joins when the first ends, while the others decode
		}
		batchedAsAlone(t, file, e, reqs)
		e.Close()
	}
}

// batchedAsAlone generates reqs (no stop tokens, with log-probabilities) in one batch on e, then each alone, and
// requires every token and log-probability equal.
func batchedAsAlone(t *testing.T, file string, e *Engine, reqs []Request) {
	t.Helper()
	for i := range reqs {
		reqs[i].StopIDs, reqs[i].Logprobs = []int{-1}, true
	}
	batched := make([][]Token, len(reqs))
	if _, err := e.GenerateBatch(context.Background(), reqs, func(seq int, tk Token) error {
		batched[seq] = append(batched[seq], tk)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		var alone []Token
		if _, err := e.Generate(context.Background(), r, func(tk Token) error { alone = append(alone, tk); return nil }); err != nil {
			t.Fatal(err)
		}
		if len(alone) != len(batched[i]) {
			t.Fatalf("%s request %d: %d tokens alone, %d batched", file, i, len(alone), len(batched[i]))
		}
		for j := range alone {
			if alone[j].ID != batched[i][j].ID || alone[j].Logprob != batched[i][j].Logprob {
				t.Fatalf("%s request %d token %d: alone %d (%v), batched %d (%v)", file, i, j, alone[j].ID, alone[j].Logprob, batched[i][j].ID, batched[i][j].Logprob)
			}
		}
	}
}

// TestLlamaCppArithmeticDecode: generation as llama.cpp runs it when it keeps only the last position's logits
// (gguf/testdata/llamacpp/decode.json: the prompt as one batch, then 16 greedy steps) gives llama.cpp's tokens
// and every step's log-probabilities to 1e-9 (the float64 log-sum-exps), the first step included, with a float32
// and a float16 cache, on the tiny files and on a family file of every covered architecture: the decode steps'
// single-row products, the last layer's MLP, which llama.cpp multiplies by the last row alone (a float32 matrix:
// ggml_vec_dot_f32, not tinyBLAS), and the float16 cache's products.
func TestLlamaCppArithmeticDecode(t *testing.T) {
	var ref struct {
		Files map[string]map[string]json.RawMessage `json:"files"`
	}
	readJSON(t, "../gguf/testdata/llamacpp/decode.json", &ref)
	archs := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(ref.Files)) {
		f := ref.Files[name]
		var file string
		if err := json.Unmarshal(f["file"], &file); err != nil {
			t.Fatal(err)
		}
		for _, cache := range []KVCache{KVCacheF32, KVCacheF16} {
			t.Run(name+"/"+string(cache), func(t *testing.T) {
				var c llamaCppCase
				if err := json.Unmarshal(f[string(cache)], &c); err != nil {
					t.Fatal(err)
				}
				e, err := Open(context.Background(), filepath.Join("..", file), Options{ShardDir: t.TempDir(), Arithmetic: ArithmeticLlamaCpp, KVCache: cache})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				archs[e.Config().Architectures[0]] = true
				ids, lp := generateGreedy(t, e, c)
				if a := compare(c, ids, lp); a.equal != len(c.IDs) || a.maxLogprobDx > 1e-9 {
					t.Errorf("%d of %d tokens equal to llama.cpp's (parting at a margin of %.3g); log-probabilities up to %.3g apart", a.equal, len(c.IDs), a.partMargin, a.maxLogprobDx)
				}
			})
		}
	}
	for a := range llamaCppGraphs {
		if !archs[a] {
			t.Errorf("no decode reference of a covered architecture, %s", a)
		}
	}
}

// TestLlamaCppArithmeticSmolLM2Mixes: SmolLM2-135M-Instruct as llama.cpp's Q4_K_M (Q5_0 and Q8_0 where the
// K-quants do not fit its 576-wide rows, Q4_K and Q6_K elsewhere), Q3_K_M (Q3_K, Q4_K, Q5_K, Q6_K and the fallbacks
// Q4_0, Q5_0, Q5_1, Q8_0), Q5_K_M (Q5_K, Q6_K, Q5_1, Q8_0), pure Q2_K (Q2_K ffn_down, the rest Q4_0) and IQ4_XS
// (IQ4_XS ffn_down, IQ4_NL elsewhere, some Q5_K) and IQ3_M (IQ3_S ffn_down, IQ4_NL and Q5_0 elsewhere, some Q4_K)
// gives llama.cpp's 8 × 64 greedy tokens, and their log-probabilities to 1e-9, with its default float16 cache and
// with a float32 one. The files are made by scripts/fixtures/llama_cpp_refs.py --only smollm2-q4km (q3km, q5km,
// q2k, iq4xs, iq3m);
// each subtest skips without its file.
// smolMixRef is llama.cpp's generations on one of SmolLM2's mixes (llama_cpp_refs.py --only smollm2-<mix>).
type smolMixRef struct {
	SHA256 string         `json:"sha256"`
	F16    []llamaCppCase `json:"f16"`
	F32    []llamaCppCase `json:"f32"`
}

// smolMix returns the path of SmolLM2's mix file (skipping the test without it, or when it is not the file the
// references were made on) and the references; only is the script step that makes it.
func smolMix(t *testing.T, mix, only string) (string, smolMixRef) {
	t.Helper()
	path := hffixture.ModelPath(t, "smollm2-135m-instruct-"+mix+".gguf", "scripts/fixtures/llama_cpp_refs.py --only "+only)
	var ref smolMixRef
	readJSON(t, "../gguf/testdata/llamacpp/smollm2-"+mix+".json", &ref)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if sum := fmt.Sprintf("%x", sha256.Sum256(b)); sum != ref.SHA256 {
		t.Skipf("%s has sha256 %s, the fixture's file %s: not the file the references were made on (run the script again)", path, sum, ref.SHA256)
	}
	return path, ref
}

func TestLlamaCppArithmeticSmolLM2Mixes(t *testing.T) {
	for mix, only := range map[string]string{"q4_k_m": "smollm2-q4km", "q3_k_m": "smollm2-q3km", "q5_k_m": "smollm2-q5km", "q2_k-pure": "smollm2-q2k", "iq4_xs": "smollm2-iq4xs",
		"iq3_m": "smollm2-iq3m"} {
		t.Run(mix, func(t *testing.T) {
			path, ref := smolMix(t, mix, only)
			shards := t.TempDir()
			for cache, cases := range map[KVCache][]llamaCppCase{KVCacheF16: ref.F16, KVCacheF32: ref.F32} {
				e, err := Open(context.Background(), path, Options{ShardDir: shards, Arithmetic: ArithmeticLlamaCpp, KVCache: cache})
				if err != nil {
					t.Fatal(err)
				}
				equal, dx := 0, 0.0
				for _, c := range cases {
					ids, lp := generateGreedy(t, e, c)
					a := compare(c, ids, lp)
					equal, dx = equal+a.equal, max(dx, a.maxLogprobDx)
					if a.equal != len(c.IDs) || a.maxLogprobDx > 1e-9 {
						t.Errorf("%s cache, %q: %d of %d tokens equal to llama.cpp's (parting at a margin of %.3g), log-probabilities up to %.3g apart",
							cache, c.Prompt, a.equal, len(c.IDs), a.partMargin, a.maxLogprobDx)
					}
				}
				e.Close()
				t.Logf("%s cache: %d of %d tokens equal to llama.cpp's; log-probabilities up to %.2g apart", cache, equal, 64*len(cases), dx)
			}
		})
	}
}
