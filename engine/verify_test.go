package engine

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
)

// verifyPass computes ids on a fresh cache: the prompt in one pass, then the rest one position per pass (decode
// steps), or, with chunk > 1, in passes of chunk positions whose every logits are kept (a draft's verification).
// It returns the logits of every position after the prompt.
func verifyPass(t *testing.T, e *Engine, prompt, rest []int, chunk int) [][]float32 {
	t.Helper()
	ctx := context.Background()
	kv, err := e.run.kvStore(bucket(len(prompt)+len(rest)), true)
	if err != nil {
		t.Fatal(err)
	}
	st := e.store.newStream(ctx, -1, false)
	if st != nil {
		defer st.stop()
	}
	out, err := e.run.forward(ctx, st, kv, []feed{{row: 0, ids: prompt}}, false)
	if err != nil {
		t.Fatal(err)
	}
	logits := [][]float32{out[0]}
	v := e.cfg.VocabSize
	for i := 0; i < len(rest)-1; i += chunk {
		ids := rest[i:min(i+chunk, len(rest)-1)]
		out, err := e.run.forward(ctx, st, kv, []feed{{row: 0, ids: ids, every: true}}, false)
		if err != nil {
			t.Fatal(err)
		}
		for j := range ids {
			logits = append(logits, out[0][j*v:(j+1)*v])
		}
	}
	return logits
}

// TestVerifyMatchesDecode: a pass over several new positions of a sequence (a draft's verification) gives each
// position's logits bit for bit as decode steps, one position per pass, do: the host kernels write a short
// pass's keys and values first and sum attention in blocks aligned to key positions (hostOps.Attention,
// kernels.Attention). So speculative decoding cannot change greedy output. Checked for full and sliding-window
// layers (a ring that wraps many times), float32 and float16 caches, float and block-quantized weights, chunks of
// 2 to 33 positions.
func TestVerifyMatchesDecode(t *testing.T) {
	mistral := familyBase("MistralForCausalLM", "mistral")
	mistral["sliding_window"] = 5
	mistral["max_position_embeddings"] = 1024
	gemma := familyBase("Gemma2ForCausalLM", "gemma2")
	for k, v := range map[string]any{"query_pre_attn_scalar": 8, "attn_logit_softcapping": 5.0, "final_logit_softcapping": 6.0,
		"sliding_window": 7, "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 1024} {
		gemma[k] = v
	}
	models := map[string]string{
		"mistral-sliding": writeFamily(t, mistral, nil),
		"gemma2":          writeFamily(t, gemma, nil),
		"gguf-q4_k":       filepath.Join("..", "gguf", "testdata", "tiny", "tiny-llama-Q4_K.gguf"),
	}
	for name, model := range models {
		for _, cache := range []KVCache{KVCacheF32, KVCacheF16} {
			t.Run(fmt.Sprintf("%s/%s", name, cache), func(t *testing.T) {
				e := open(t, model, Options{KVCache: cache, ShardDir: filepath.Join(t.TempDir(), "s")})
				n := min(e.ContextLength()-8, 300)
				ids := make([]int, n)
				for i := range ids {
					ids[i] = (i*7919 + 13) % e.cfg.VocabSize
				}
				prompt, rest := ids[:9], ids[9:]
				want := verifyPass(t, e, prompt, rest, 1)
				for _, chunk := range []int{2, 5, 33} {
					got := verifyPass(t, e, prompt, rest, chunk)
					for p := range want {
						for j := range want[p] {
							if math.Float32bits(got[p][j]) != math.Float32bits(want[p][j]) {
								t.Fatalf("chunks of %d: position %d, logit %d: %v, decode steps %v", chunk, len(prompt)+p, j, got[p][j], want[p][j])
							}
						}
					}
				}
			})
		}
	}
}

// TestPassTime: PassTime times passes of 1 to 33 new positions and leaves the cache as it found it (a generation
// afterwards is unchanged); bad arguments are refused.
func TestPassTime(t *testing.T) {
	e := open(t, filepath.Join("..", "gguf", "testdata", "tiny", "tiny-llama-Q4_K.gguf"), Options{ShardDir: filepath.Join(t.TempDir(), "s")})
	ctx := context.Background()
	req := Request{PromptIDs: []int{1, 403, 407, 261}, MaxNewTokens: 8, StopIDs: []int{}}
	want, err := e.Generate(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, rows := range []int{1, 8, MaxDraftTokens + 1} {
		times, err := e.PassTime(ctx, req.PromptIDs, rows, 2)
		if err != nil || len(times) != 2 || times[0] <= 0 {
			t.Fatalf("%d rows: %v, %v", rows, times, err)
		}
	}
	for _, rows := range []int{0, MaxDraftTokens + 2} {
		if _, err := e.PassTime(ctx, req.PromptIDs, rows, 1); err == nil {
			t.Errorf("%d rows: accepted", rows)
		}
	}
	got, err := e.Generate(ctx, req, nil)
	if err != nil || fmt.Sprint(got.GeneratedIDs) != fmt.Sprint(want.GeneratedIDs) {
		t.Errorf("after PassTime: %v (%v), before %v", got.GeneratedIDs, err, want.GeneratedIDs)
	}
}
