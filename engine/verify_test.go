package engine

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
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
	rows := []int{1, 8, MaxDraftTokens + 1}
	times, err := e.PassTime(ctx, req.PromptIDs, rows, 2)
	if err != nil || len(times) != len(rows) {
		t.Fatalf("%v, %v", times, err)
	}
	for i, ts := range times {
		if len(ts) != 2 || ts[0] <= 0 || ts[1] <= 0 {
			t.Fatalf("%d rows: %v", rows[i], ts)
		}
	}
	for _, rows := range []int{0, MaxDraftTokens + 2} {
		if _, err := e.PassTime(ctx, req.PromptIDs, []int{1, rows}, 1); err == nil {
			t.Errorf("%d rows: accepted", rows)
		}
	}
	got, err := e.Generate(ctx, req, nil)
	if err != nil || fmt.Sprint(got.GeneratedIDs) != fmt.Sprint(want.GeneratedIDs) {
		t.Errorf("after PassTime: %v (%v), before %v", got.GeneratedIDs, err, want.GeneratedIDs)
	}
}

// TestVerifyTreeMatchesDecode: a pass over a draft tree (a chain, and leaves beside it) gives each leaf's logits
// bit for bit as decode steps along its own path (the chain up to its parent, then the leaf) do, and the chain's
// as before; the cache then holds the last token and the chain only. Full and sliding-window layers, float32 and
// float16 caches, float and block-quantized weights, a tree inside a 64-key block and one across two.
func TestVerifyTreeMatchesDecode(t *testing.T) {
	mistral := familyBase("MistralForCausalLM", "mistral")
	mistral["sliding_window"] = 5
	mistral["max_position_embeddings"] = 1024
	models := map[string]string{
		"mistral-sliding": writeFamily(t, mistral, nil),
		"gguf-q4_k":       filepath.Join("..", "gguf", "testdata", "tiny", "tiny-llama-Q4_K.gguf"),
	}
	for name, model := range models {
		for _, cache := range []KVCache{KVCacheF32, KVCacheF16} {
			t.Run(fmt.Sprintf("%s/%s", name, cache), func(t *testing.T) {
				e := open(t, model, Options{KVCache: cache, ShardDir: filepath.Join(t.TempDir(), "s")})
				v := e.cfg.VocabSize
				ids := make([]int, 90)
				for i := range ids {
					ids[i] = (i*7919 + 13) % v
				}
				// After 58 prompt tokens the tree straddles a 64-key block: the chain ends at 63, and the last leaf
				// (the child of the chain's last token) is alone in the block from 64.
				for _, n := range []int{80, 58} {
					last, chain := ids[n], ids[n+1:n+6]
					leaves := []int{(chain[0] + 1) % v, (chain[2] + 5) % v, (last + 3) % v, (chain[4] + 2) % v}
					tree := draftTree{ids: append(slices.Clone(chain), leaves...), chain: len(chain), leafParent: []int{-1, 1, 0, 4}}
					checkTreePass(t, e, ids[:n], last, tree, nil)
				}
			})
		}
	}
}

// checkTreePass checks a pass over last and tree after prompt against decode steps along each draft token's path
// (those of tree.ids at check; nil: every one), bit for bit.
func checkTreePass(t *testing.T, e *Engine, prompt []int, last int, tree draftTree, check []int) {
	t.Helper()
	v := e.cfg.VocabSize
	chain := tree.ids[:tree.chain]
	if check == nil {
		for i := range tree.ids {
			check = append(check, i)
		}
	}
	got := treePass(t, e, prompt, last, tree)
	for _, i := range check {
		path := []int{last}
		if i < tree.chain {
			path = append(path, chain[:i+1]...)
		} else {
			p := tree.leafParent[i-tree.chain]
			path = append(append(path, chain[:p+1]...), tree.ids[i])
		}
		want := verifyPass(t, e, prompt, append(path, 0), 1)
		row := got[(i+1)*v : (i+2)*v]
		for j, x := range want[len(want)-1] {
			if math.Float32bits(row[j]) != math.Float32bits(x) {
				t.Fatalf("prompt of %d, draft token %d (path %v): logit %d %v, decode steps %v", len(prompt), i, path, j, row[j], x)
			}
		}
	}
}

// TestVerifyLongTreeOnRing: a tree of 65 rows (a chain of 32 and 32 leaves, --draft-tokens 32 --draft-leaves 32)
// is longer than a sliding-window layer's ring may take before its queries attend (ringSlack), so the pass
// attends to its new keys beside the cache rather than writing them first: each leaf still sees its ancestors
// in the chain, and the leaves and the chain's last token give the decode steps' logits bit for bit.
func TestVerifyLongTreeOnRing(t *testing.T) {
	mistral := familyBase("MistralForCausalLM", "mistral")
	mistral["sliding_window"] = 5
	mistral["max_position_embeddings"] = 1024
	model := writeFamily(t, mistral, nil)
	for _, cache := range []KVCache{KVCacheF32, KVCacheF16} {
		t.Run(string(cache), func(t *testing.T) {
			e := open(t, model, Options{KVCache: cache, ShardDir: filepath.Join(t.TempDir(), "s")})
			v := e.cfg.VocabSize
			ids := make([]int, 103)
			for i := range ids {
				ids[i] = (i*7919 + 13) % v
			}
			tree := draftTree{ids: slices.Clone(ids[71:103]), chain: MaxDraftTokens}
			for i := range MaxDraftTokens {
				tree.ids = append(tree.ids, (tree.ids[i]+1)%v)
				tree.leafParent = append(tree.leafParent, i-1)
			}
			checkTreePass(t, e, ids[:70], ids[70], tree, []int{31, 32, 40, 63})
		})
	}
}

// treePass computes prompt, then one verification pass of last and the tree, and returns that pass's logits (every
// row), checking the cache committed the last token and the chain only.
func treePass(t *testing.T, e *Engine, prompt []int, last int, tree draftTree) []float32 {
	t.Helper()
	ctx := context.Background()
	kv, err := e.run.kvStore(bucket(len(prompt)+1+len(tree.ids)), true)
	if err != nil {
		t.Fatal(err)
	}
	st := e.store.newStream(ctx, -1, false)
	if st != nil {
		defer st.stop()
	}
	if _, err := e.run.forward(ctx, st, kv, []feed{{row: 0, ids: prompt}}, false); err != nil {
		t.Fatal(err)
	}
	out, err := e.run.forward(ctx, st, kv, []feed{{row: 0, ids: append([]int{last}, tree.ids...), every: true, tree: &tree}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := kv.Len(0); got != len(prompt)+1+tree.chain {
		t.Fatalf("the cache holds %d positions after the tree, want %d", got, len(prompt)+1+tree.chain)
	}
	return out[0]
}
