package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/kvcache"
	"github.com/layerstream/layerstream/shards"
)

// hybridCheckpoint is the qwen3_5 fixture (Gated DeltaNet layers 0-2, full attention on layer 3) and its prompt.
func hybridCheckpoint(t *testing.T) (dir string, prompt []int) {
	t.Helper()
	ref := hffixture.MustReference(t, "qwen3_5")
	return hffixture.Checkpoint(t, "qwen3_5", hffixture.V5), ints(ref.InputIDs)
}

// hybridIDs is the fixture's 80-token prompt continued with seeded ids to n positions.
func hybridIDs(prompt []int, n int) []int {
	r := rand.New(rand.NewPCG(35, 5))
	ids := slices.Clone(prompt)
	for len(ids) < n {
		ids = append(ids, 3+r.IntN(250))
	}
	return ids[:n]
}

// TestRecurrentDecodeMatchesLogits: 150 positions decoded one at a time on the host kernels (the recurrent state
// carried through 150 steps, streamed and resident) give the logits of one Engine.Logits pass (the graphs' scan
// over the whole sequence) within the hybrid tolerance.
func TestRecurrentDecodeMatchesLogits(t *testing.T) {
	dir, prompt := hybridCheckpoint(t)
	ids := hybridIDs(prompt, 150)
	for _, resident := range []bool{false, true} {
		e := open(t, dir, Options{Resident: resident})
		want, err := e.Logits(context.Background(), ids)
		if err != nil {
			t.Fatal(err)
		}
		got := tokenByToken(t, e, ids)
		if d := maxDiff(got, want); d > hybridTolerance {
			t.Errorf("resident %v: token-by-token decode of %d positions differs from one pass by %.3g", resident, len(ids), d)
		} else {
			t.Logf("resident %v: token by token vs one pass over %d positions: max |logit diff| %.2g", resident, len(ids), d)
		}
		chunked := prefillDecode(t, e, ids, 100)
		if d := maxDiff(chunked[99:], want[99:]); d > hybridTolerance {
			t.Errorf("resident %v: 100-token prefill then decode differs from one pass by %.3g", resident, d)
		}
	}
}

// TestRecurrentBatchesAndSessions: sequences of a recurrent model batched together (different lengths, joining
// the running batch) generate what each generates alone, on the host kernels and the graphs; a session whose
// next prompt extends what its row holds continues its recurrent state (its cached tokens counted), and one that
// diverges is computed again (Truncate cannot cut a recurrent state back: kvcache.ErrRecurrent).
func TestRecurrentBatchesAndSessions(t *testing.T) {
	dir, prompt := hybridCheckpoint(t)
	ctx := context.Background()
	reqs := []Request{
		{PromptIDs: prompt[:80], MaxNewTokens: 12, StopIDs: []int{}},
		{PromptIDs: prompt[:23], MaxNewTokens: 20, StopIDs: []int{}},
		{PromptIDs: prompt[40:47], MaxNewTokens: 16, StopIDs: []int{}},
	}
	for _, opts := range []Options{{PrefixCache: true}, {GraphDecode: true}} {
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
			if !slices.Equal(batch[i].GeneratedIDs, alone.GeneratedIDs) {
				t.Errorf("graphs %v: sequence %d batched %v, alone %v", opts.GraphDecode, i, batch[i].GeneratedIDs, alone.GeneratedIDs)
			}
		}
	}
	e := open(t, dir, Options{PrefixCache: true})
	first, err := e.Generate(ctx, Request{PromptIDs: prompt[:30], MaxNewTokens: 8, StopIDs: []int{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	held := append(slices.Clone(prompt[:30]), first.GeneratedIDs[:7]...) // what the freed row holds
	longer := append(slices.Clone(held), prompt[50:60]...)
	got, err := e.Generate(ctx, Request{PromptIDs: longer, MaxNewTokens: 6, StopIDs: []int{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.CachedPromptTokens != len(held) {
		t.Errorf("prefix cache: a prompt extending a free row's %d positions reused %d", len(held), got.CachedPromptTokens)
	}
	s := e.NewSession()
	defer s.Close()
	first, err = e.Generate(ctx, Request{PromptIDs: prompt[:30], MaxNewTokens: 8, StopIDs: []int{}, Session: s}, nil)
	if err != nil {
		t.Fatal(err)
	}
	turn := append(append(slices.Clone(prompt[:30]), first.GeneratedIDs...), prompt[60:70]...)
	got, err = e.Generate(ctx, Request{PromptIDs: turn, MaxNewTokens: 10, StopIDs: []int{}, Session: s}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := e.Generate(ctx, Request{PromptIDs: turn, MaxNewTokens: 10, StopIDs: []int{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.GeneratedIDs, want.GeneratedIDs) || got.CachedPromptTokens != 30+8-1 {
		t.Errorf("session's second turn: %v (%d cached), alone: %v", got.GeneratedIDs, got.CachedPromptTokens, want.GeneratedIDs)
	}
	diverged := append(slices.Clone(prompt[:12]), 7, 9, 11)
	got, err = e.Generate(ctx, Request{PromptIDs: diverged, MaxNewTokens: 8, StopIDs: []int{}, Session: s}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err = e.Generate(ctx, Request{PromptIDs: diverged, MaxNewTokens: 8, StopIDs: []int{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.GeneratedIDs, want.GeneratedIDs) || got.CachedPromptTokens != 0 {
		t.Errorf("diverging session: %v (%d cached), alone: %v", got.GeneratedIDs, got.CachedPromptTokens, want.GeneratedIDs)
	}
}

// TestRecurrentDraft: speculative decoding on the Gated DeltaNet hybrids (qwen3_5, qwen3_next) leaves greedy
// output unchanged, token for token: alone, batched and in a session's next turn (checkDraftGreedyOn), drafted by
// the context's n-grams and by the same model's q8 shards (which disagree now and then, so that rejected drafts
// restore the recurrent states: stateJournal); a generation ending mid-verification leaves its row's states at
// its history for the session and the prefix cache (checkDraftEndsMid). Draft trees are refused by name.
func TestRecurrentDraft(t *testing.T) {
	for _, name := range []string{"qwen3_5", "qwen3_next"} {
		dir := hffixture.Checkpoint(t, name, hffixture.V5)
		writeTokenizer(t, dir, 256)
		q8 := q8Shards(t, dir)
		prompt := ints(hffixture.MustReference(t, name).InputIDs)
		// {1, 138, 139...}: a prompt whose continuation qwen3_5's random weights repeat (found by a search), so
		// that n-grams draft some accepted tokens.
		prompts := [][]int{prompt[:20], {1, 138, 139, 138, 139, 138, 139}, {1, 17}, prompt[40:44]}
		t.Run(name+"/ngram", func(t *testing.T) { checkDraftGreedyOn(t, dir, DraftNgram, prompts) })
		t.Run(name+"/model", func(t *testing.T) { checkDraftGreedyOn(t, dir, q8, prompts) })
		t.Run(name+"/ends", func(t *testing.T) { checkDraftEndsMid(t, dir, q8, prompt[:11]) })
		_, err := Open(context.Background(), dir, Options{Draft: q8, DraftLeaves: 2})
		if err == nil || !strings.Contains(err.Error(), "ForCausalLM") || !strings.Contains(err.Error(), "--draft-leaves") {
			t.Errorf("draft tree on %s: %v", name, err)
		}
	}
}

// writeTokenizer writes into dir a tokenizer.json of n tokens ("<0>", "<1>"...: a BPE without merges), which a
// draft model's vocabulary check compares.
func writeTokenizer(t *testing.T, dir string, n int) {
	t.Helper()
	vocab := map[string]int{}
	for i := range n {
		vocab[fmt.Sprintf("<%d>", i)] = i
	}
	b, err := json.Marshal(map[string]any{"version": "1.0", "model": map[string]any{"type": "BPE", "vocab": vocab, "merges": []string{}}})
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "tokenizer.json"), b, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestRecurrentStateConstant: a recurrent layer's cache is the same size at 1k and 16k positions (the full
// layer's keys and values grow), on a synthetic Qwen3.5-like shape (16 key heads of 128, 32 value heads of 128,
// kernel 4); and Engine.CacheFootprint of the qwen3_5 fixture at 16 and 256 positions.
func TestRecurrentStateConstant(t *testing.T) {
	state := kvcache.State{K: 3 * (2*16*128 + 32*128), V: 32 * 128 * 128}
	bytes := func(capacity int) (recurrent, full int64) {
		c := kvcache.Config{Layers: 2, Batch: 1, KVHeads: 2, Capacity: capacity, HeadDim: 256, State: []kvcache.State{state, {}}}
		all := c.Bytes()
		c.State, c.Layers = nil, 1
		return all - c.Bytes(), c.Bytes()
	}
	r1, f1 := bytes(1024)
	r16, f16 := bytes(16384)
	t.Logf("recurrent layer state: %d bytes at 1k and %d at 16k positions; full layer: %d and %d", r1, r16, f1, f16)
	if r1 != r16 || r1 != 4*int64(state.K+state.V) || f16 != 16*f1 {
		t.Errorf("recurrent state %d → %d bytes, full layer %d → %d", r1, r16, f1, f16)
	}
	kv, err := kvcache.New(kvcache.Config{Layers: 1, Batch: 1, KVHeads: 1, Capacity: 16384, HeadDim: 8, State: []kvcache.State{{K: 4, V: 6}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := kv.View(0).Layer(0); len(s.K)+len(s.V) != 10 {
		t.Errorf("a recurrent layer of a 16k-position store holds %d elements, want 10", len(s.K)+len(s.V))
	}
	if err := kv.Advance(0, 5); err != nil {
		t.Fatal(err)
	}
	if err := kv.Truncate(0, 3); !errors.Is(err, kvcache.ErrRecurrent) || !errors.Is(err, kvcache.ErrRingOverwritten) {
		t.Errorf("truncating a recurrent store: %v", err)
	}
	dir, _ := hybridCheckpoint(t) // 3 Gated DeltaNet layers, 1 attention layer, context 256
	e := open(t, dir, Options{})
	short, err := e.CacheFootprint(16)
	if err != nil {
		t.Fatal(err)
	}
	long, err := e.CacheFootprint(256)
	if err != nil {
		t.Fatal(err)
	}
	if short.State != 3*4*int64(3*128+4*16*16) || long.State != short.State || long.KV != 16*short.KV || short.KV != 2*4*16*2*32 {
		t.Errorf("cache footprint at 16 positions %+v, at 256 %+v", short, long)
	}
}

// qwen3NextDense writes the qwen3_5 fixture as a dense Qwen3-Next checkpoint (every layer in mlp_only_layers):
// the same weights, in_proj_qkv/z and in_proj_b/a regrouped per key head into in_proj_qkvz and in_proj_ba. Its
// logits are the fixture's.
func qwen3NextDense(t *testing.T) string {
	t.Helper()
	src, _ := hybridCheckpoint(t)
	ck, err := checkpoint.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Config
	ts, sh := map[string][]float32{}, map[string][]int{}
	for _, ti := range ck.Tensors {
		v, err := ck.ReadF32(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		ts[ti.Name], sh[ti.Name] = v, ints64(ti.Shape)
	}
	nk, nv, dk, dv, h := c.LinearNumKeyHeads, c.LinearNumValueHeads, c.LinearKeyHeadDim, c.LinearValueHeadDim, c.HiddenSize
	per := nv / nk
	rows := func(name string, from, n int) []float32 { return ts[name][from*h : (from+n)*h] }
	for l, lt := range c.LayerTypes {
		if lt != "linear_attention" {
			continue
		}
		p := fmt.Sprintf("model.layers.%d.linear_attn.", l)
		var qkvz, ba []float32
		for g := range nk {
			qkvz = append(qkvz, rows(p+"in_proj_qkv.weight", g*dk, dk)...)
			qkvz = append(qkvz, rows(p+"in_proj_qkv.weight", nk*dk+g*dk, dk)...)
			qkvz = append(qkvz, rows(p+"in_proj_qkv.weight", 2*nk*dk+g*per*dv, per*dv)...)
			qkvz = append(qkvz, rows(p+"in_proj_z.weight", g*per*dv, per*dv)...)
			ba = append(append(ba, rows(p+"in_proj_b.weight", g*per, per)...), rows(p+"in_proj_a.weight", g*per, per)...)
		}
		for _, n := range []string{"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"} {
			delete(ts, p+n+".weight")
		}
		ts[p+"in_proj_qkvz.weight"], sh[p+"in_proj_qkvz.weight"] = qkvz, []int{len(qkvz) / h, h}
		ts[p+"in_proj_ba.weight"], sh[p+"in_proj_ba.weight"] = ba, []int{2 * nv, h}
	}
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	maps.Copy(cfg, map[string]any{"architectures": []string{"Qwen3NextForCausalLM"}, "model_type": "qwen3_next",
		"num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": []int{0, 1, 2, 3},
		"moe_intermediate_size": 32, "shared_expert_intermediate_size": 48, "norm_topk_prob": true})
	dir := t.TempDir()
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	writeSafetensors(t, filepath.Join(dir, "model.safetensors"), ts, sh)
	return dir
}

func ints64(s []int64) []int {
	out := make([]int, len(s))
	for i, v := range s {
		out[i] = int(v)
	}
	return out
}

// TestQwen3NextLayout: Qwen3-Next's grouped in_proj_qkvz / in_proj_ba (dense layers) compute what Qwen3.5's
// separate projections do: the qwen3_5 fixture regrouped gives transformers' logits and greedy ids, on the graphs
// and the host kernels.
func TestQwen3NextLayout(t *testing.T) {
	dir := qwen3NextDense(t)
	ref := hffixture.MustReference(t, "qwen3_5")
	ids := ints(ref.InputIDs)
	want := ref.Rows()
	e := open(t, dir, Options{})
	if d := maxDiff(tokenByToken(t, e, ids), want); d > hybridTolerance {
		t.Errorf("decode: %.3g from transformers' qwen3_5", d)
	}
	checkTransformers(t, "Qwen3-Next's layout", e, dir, ref)
}

// checkTransformers checks e (opened on dir) against transformers' reference ref of a hybrid fixture within the
// hybrid tolerance: Engine.Logits, the greedy ids, and the float64 reference.
func checkTransformers(t *testing.T, label string, e *Engine, dir string, ref *hffixture.Reference) {
	t.Helper()
	ctx := context.Background()
	ids := ints(ref.InputIDs)
	want := ref.Rows()
	got, err := e.Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(got, want); d > hybridTolerance {
		t.Errorf("%s: logits differ from transformers' by %.3g", label, d)
	}
	res, err := e.Generate(ctx, Request{PromptIDs: ids, MaxNewTokens: len(ref.GreedyIDs), StopIDs: []int{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.GeneratedIDs, ints(ref.GreedyIDs)) {
		t.Errorf("%s: greedy %v, transformers %v", label, res.GeneratedIDs, ref.GreedyIDs)
	}
	if d := maxDiff(referenceLogits(t, dir, ids), want); d > hybridTolerance {
		t.Errorf("%s: the float64 reference differs from transformers' by %.3g", label, d)
	}
}

// q8Shards splits the checkpoint in dir into q8 shards in a temporary folder, and returns it.
func q8Shards(t *testing.T, dir string) string {
	t.Helper()
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	q8 := filepath.Join(t.TempDir(), "q8")
	if _, err := shards.Split(context.Background(), ck, shards.SplitOptions{Out: q8, Quantize: shards.Q8}); err != nil {
		t.Fatal(err)
	}
	return q8
}

// TestHybridMoEBatchMatchesAlone: the Gated DeltaNet hybrids with a mixture of experts on every layer (the
// qwen3_next and qwen3_5_moe fixtures), from the checkpoint and from q8 shards (the routed experts bound one by
// one, LayerWeights.Experts), generate in a batch bit for bit what each sequence generates alone.
func TestHybridMoEBatchMatchesAlone(t *testing.T) {
	for _, name := range []string{"qwen3_next", "qwen3_5_moe"} {
		dir := hffixture.Checkpoint(t, name, hffixture.V5)
		prompt := ints(hffixture.MustReference(t, name).InputIDs)
		q8 := q8Shards(t, dir)
		reqs := []Request{
			{PromptIDs: prompt[:40], MaxNewTokens: 7, StopIDs: []int{}, Logprobs: true},
			{PromptIDs: prompt[:3], MaxNewTokens: 12, StopIDs: []int{}, Logprobs: true},
			{PromptIDs: prompt[50:70], MaxNewTokens: 5, StopIDs: []int{}, Logprobs: true, PrefillChunk: 8},
		}
		for _, model := range []string{dir, q8} {
			batchedAsAlone(t, model, open(t, model, Options{}), reqs)
		}
	}
}

// TestQwen35VisionLanguage: the released Qwen3.5 checkpoints are Qwen3_5ForConditionalGeneration and
// Qwen3_5MoeForConditionalGeneration, laid out as transformers 5.24's save_pretrained writes them (checked on the
// qwen3_5_moe fixture's weights: the decoder under model.language_model.*, lm_head.weight, the vision tower
// under model.visual.*, the decoder's config in text_config beside vision_config and the image/video token ids;
// its text-only logits are Qwen3_5MoeForCausalLM's, 0 difference), and carry multi-token-prediction layers
// (mtp.*) that transformers does not load. The qwen3_5 and qwen3_5_moe fixtures rewritten so compute
// transformers' logits and greedy ids as text models, and the float64 reference agrees.
func TestQwen35VisionLanguage(t *testing.T) {
	for name, wrapper := range map[string][2]string{"qwen3_5": {"Qwen3_5ForConditionalGeneration", "qwen3_5"},
		"qwen3_5_moe": {"Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe"}} {
		ref := hffixture.MustReference(t, name)
		dir := hffixture.Checkpoint(t, name, hffixture.V5)
		relayout(t, dir, func(n string) string {
			if rest, ok := strings.CutPrefix(n, "model."); ok {
				return "model.language_model." + rest
			}
			return n
		}, map[string][]int{"model.visual.patch_embed.proj.weight": {32, 3, 2, 4, 4}, "model.visual.merger.linear_fc2.weight": {64, 128},
			"mtp.fc.weight": {64, 128}, "mtp.layers.0.mlp.gate_proj.weight": {128, 64}})
		editConfig(t, dir, func(cfg map[string]any) {
			text := maps.Clone(cfg)
			for _, k := range []string{"architectures", "transformers_version", "dtype"} {
				delete(text, k)
			}
			clear(cfg)
			maps.Copy(cfg, map[string]any{"architectures": []string{wrapper[0]}, "model_type": wrapper[1], "dtype": "float32",
				"text_config": text, "tie_word_embeddings": false, "image_token_id": 248056, "video_token_id": 248057,
				"vision_start_token_id": 248053, "vision_end_token_id": 248054, "transformers_version": "5.24.0",
				"vision_config": map[string]any{"depth": 1, "hidden_size": 32, "model_type": wrapper[1] + "_vision"}})
		})
		checkTransformers(t, wrapper[0], open(t, dir, Options{}), dir, ref)
	}
}

// TestQwen35GGUF: the qwen3_5 fixture converted by llama.cpp's converter (gguf/testdata/families/qwen3_5.gguf:
// value heads tiled, A_log as -exp(A_log), norms plus one; TestGGUFFamilies checks its Engine.Logits against
// llama.cpp's and transformers') decodes on the host kernels position by position within the hybrid tolerance
// of transformers' logits, and generates transformers' 20 greedy ids, with and without an n-gram draft.
func TestQwen35GGUF(t *testing.T) {
	ref := hffixture.MustReference(t, "qwen3_5")
	ids := ints(ref.InputIDs)
	want := ref.Rows()
	file := filepath.Join("..", "gguf", "testdata", "families", "qwen3_5.gguf")
	for _, draft := range []string{"", DraftNgram} {
		e := open(t, file, Options{ShardDir: filepath.Join(t.TempDir(), "s"), Draft: draft})
		if draft == "" {
			if d := maxDiff(tokenByToken(t, e, ids), want); d > hybridTolerance {
				t.Errorf("decode: %.3g from transformers' logits", d)
			}
		}
		res, err := e.Generate(context.Background(), Request{PromptIDs: ids, MaxNewTokens: len(ref.GreedyIDs), StopIDs: []int{}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.GeneratedIDs, ints(ref.GreedyIDs)) {
			t.Errorf("draft %q: greedy %v, transformers %v", draft, res.GeneratedIDs, ref.GreedyIDs)
		}
	}
}
