package engine

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/reference"
)

// TestGemma4SharedKVRing checks Gemma 4's shared keys and values where the sliding layers keep a ring (240
// positions: a ring of 192 slots in a cache of 256) against the float64 reference: a 20-token prompt, then a
// 190-token chunk whose keys wrap the ring over positions its first queries see (the layers sharing the ring
// must attend to it as it was before the chunk), then decode steps, on the host kernels and the graphs.
func TestGemma4SharedKVRing(t *testing.T) {
	dir := hffixture.Checkpoint(t, "gemma4_text", hffixture.V5)
	rng := rand.New(rand.NewPCG(4, 35))
	ids := make([]int, 240)
	for i := range ids {
		ids[i] = 3 + rng.IntN(253)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := reference.Forward(ck, ids)
	if err != nil {
		t.Fatal(err)
	}
	cuts := []int{20, 210}
	for i := 211; i <= len(ids); i++ {
		cuts = append(cuts, i)
	}
	for _, graph := range []bool{false, true} {
		opts := Options{GraphDecode: graph}
		if !graph { // every position's logits from the host kernels (Options.ObserveInputs keeps Logits' passes there)
			opts.ObserveInputs = func(string, []float32, int) {}
		}
		got := passesAt(t, open(t, dir, opts), ids, cuts)
		var worst float64
		for p, l := range got {
			for j, v := range l {
				worst = max(worst, abs(float64(v)-ref.Logits[p][j]))
			}
		}
		t.Logf("graphs %v: max |logit diff| %.2g over %d positions in %d passes", graph, worst, len(got), len(cuts))
		if worst > hfTolerance {
			t.Errorf("graphs %v: logits differ from the reference by %.2g (> %g)", graph, worst, hfTolerance)
		}
	}
}

// passesAt feeds ids in passes ending at each of cuts and returns the logits of every position.
func passesAt(t *testing.T, e *Engine, ids, cuts []int) [][]float32 {
	t.Helper()
	ctx := context.Background()
	kv, err := e.run.kvStore(bucket(len(ids)), e.run.onHost(false))
	if err != nil {
		t.Fatal(err)
	}
	st := e.store.newStream(ctx, len(cuts), e.opts.GraphDecode)
	if st != nil {
		defer st.stop()
	}
	var out [][]float32
	from := 0
	for _, c := range cuts {
		l, err := e.run.pass(ctx, st, kv, ids[from:c], true)
		if err != nil {
			t.Fatalf("pass to %d: %v", c, err)
		}
		out, from = append(out, l...), c
	}
	return out
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestGemma4DraftBatch: greedy output with an n-gram draft (its verifications computing the shared layers over
// draft trees) is the output without, alone, batched and in a session's next turn, on the dense and the MoE
// fixture.
func TestGemma4DraftBatch(t *testing.T) {
	for _, name := range []string{"gemma4_text", "gemma4_text-moe"} {
		t.Run(name, func(t *testing.T) { checkDraftGreedy(t, hffixture.Checkpoint(t, name, hffixture.V5), DraftNgram) })
	}
}

// TestGemma4ConditionalGeneration: Gemma 4's multimodal checkpoints (Gemma4ForConditionalGeneration, its decoder
// in text_config and under model.language_model.*, towers beside it) run as the text model, their image, video and
// audio placeholders embedded as the pad token, as Gemma4Model.forward does without images (checked against
// transformers 5.24 when this was written: the wrapper's logits on ids holding placeholders equal
// Gemma4ForCausalLM's on the same ids with the pad token in their place, to 3.3e-6), in the engine and the
// reference alike.
func TestGemma4ConditionalGeneration(t *testing.T) {
	ctx := context.Background()
	dir := hffixture.Checkpoint(t, "gemma4_text", hffixture.V5)
	ids := ints(hffixture.MustReference(t, "gemma4_text").InputIDs)
	ids[3], ids[10], ids[11], ids[30] = 5, 6, 7, 5
	padded := slices.Clone(ids)
	for _, p := range []int{3, 10, 11, 30} {
		padded[p] = 0 // pad_token_id
	}
	want, err := open(t, dir, Options{}).Logits(ctx, padded)
	if err != nil {
		t.Fatal(err)
	}
	relayout(t, dir, func(name string) string { return "model.language_model." + strings.TrimPrefix(name, "model.") },
		map[string][]int{"model.vision_tower.encoder.weight": {4, 4}, "model.embed_audio.weight": {4}})
	editConfig(t, dir, func(cfg map[string]any) {
		text := maps.Clone(cfg)
		delete(text, "architectures")
		clear(cfg)
		cfg["architectures"], cfg["model_type"], cfg["text_config"] = []string{"Gemma4ForConditionalGeneration"}, "gemma4", text
		cfg["image_token_id"], cfg["video_token_id"], cfg["audio_token_id"], cfg["vision_config"] = 5, 6, 7, nil
	})
	got, err := open(t, dir, Options{}).Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(got, want); d > 1e-6 {
		t.Errorf("wrapper logits differ from the text model's with pad tokens by %g", d)
	}
	if d := maxDiff(referenceLogits(t, dir, ids), want); d > hfTolerance {
		t.Errorf("the float64 reference differs by %g", d)
	}
}

// TestGemma4Refusals: tensors Gemma 4's config gives no role (keys and values of a layer that shares them, a
// v_proj where attention_k_eq_v takes the values from k_proj) and config values it does not implement are
// refused by name, by the engine and the reference.
func TestGemma4Refusals(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		fixture string
		extra   map[string][]int
		edit    func(cfg map[string]any)
		want    string
	}{
		{fixture: "gemma4_text", extra: map[string][]int{"model.layers.2.self_attn.k_proj.weight": {32, 64}}, want: "model.layers.2.self_attn.k_proj.weight"},
		{fixture: "gemma4_text-moe", extra: map[string][]int{"model.layers.2.self_attn.v_proj.weight": {32, 64}}, want: "model.layers.2.self_attn.v_proj.weight"},
		{fixture: "gemma4_text", edit: func(cfg map[string]any) { cfg["use_bidirectional_attention"] = "all" }, want: `use_bidirectional_attention "all"`},
		{fixture: "gemma4_text", edit: func(cfg map[string]any) {
			cfg["per_layer_config"].(map[string]any)["1"].(map[string]any)["rope_theta"] = 1
		}, want: "per_layer_config.1.rope_theta"},
		{fixture: "gemma4_text", edit: func(cfg map[string]any) { cfg["num_kv_shared_layers"] = 3 }, want: "no earlier layer of its type"},
		{fixture: "gemma4_text", edit: func(cfg map[string]any) { cfg["query_pre_attn_scalar"] = 16 }, want: "query_pre_attn_scalar"},
	} {
		dir := hffixture.Checkpoint(t, tc.fixture, hffixture.V5)
		if tc.extra != nil {
			relayout(t, dir, func(name string) string { return name }, tc.extra)
		}
		if tc.edit != nil {
			editConfig(t, dir, tc.edit)
		}
		e, err := Open(ctx, dir, Options{})
		if err == nil {
			e.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %s", tc.want, err, tc.want)
		}
		ck, err := checkpoint.Open(dir)
		if err == nil {
			_, err = reference.Forward(ck, []int{3, 4, 5})
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("reference, %s: got %v, want an error naming it", tc.want, err)
		}
	}
}

// TestGemma4WeightModes: the per-layer inputs' tensors travel with the embedding unit however it reaches the
// passes (streamed with the embedding under StreamAll, every layer resident, graphs' device buffers): the same
// greedy tokens as transformers'.
func TestGemma4WeightModes(t *testing.T) {
	ref := hffixture.MustReference(t, "gemma4_text")
	dir := hffixture.Checkpoint(t, "gemma4_text", hffixture.V5)
	for _, opts := range []Options{{StreamAll: true, Prefetch: 1, MaxLayerBuffers: 1}, {Resident: true}, {GraphDecode: true, StreamAll: true}} {
		res, err := open(t, dir, opts).Generate(context.Background(), Request{PromptIDs: ints(ref.InputIDs), MaxNewTokens: len(ref.GreedyIDs), StopIDs: []int{}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.GeneratedIDs, ints(ref.GreedyIDs)) {
			t.Errorf("%+v: greedy %v, transformers %v", opts, res.GeneratedIDs, ref.GreedyIDs)
		}
	}
}
