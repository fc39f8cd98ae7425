package engine

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/kvcache"
)

// llama4Fixture is the llama4_text fixture (v5 spelling) with its config.json changed by edit.
func llama4Fixture(t *testing.T, edit func(c map[string]any)) string {
	t.Helper()
	dir := hffixture.Checkpoint(t, "llama4_text", hffixture.V5)
	editConfig(t, dir, edit)
	return dir
}

// llama4Long is the llama4_text fixture (chunks of 16 positions on layers 0-2) with room for 512 positions, so
// that a chunked layer's ring (kvcache.RingSlots(16, ringSlack) = 192 slots) is smaller than the cache of a
// sequence past 192 positions: a long sequence wraps the ring and crosses many chunk boundaries.
func llama4Long(t *testing.T) string {
	return llama4Fixture(t, func(c map[string]any) { c["max_position_embeddings"] = 512 })
}

// llama4IDs is n token ids: the fixture's prompt repeated (which the n-gram draft continues).
func llama4IDs(t *testing.T, n int) []int {
	ids := ints(hffixture.MustReference(t, "llama4_text").InputIDs)
	out := make([]int, n)
	for i := range out {
		out[i] = ids[i%len(ids)]
	}
	return out
}

// TestLlama4ChunksAcrossTheRing: a sequence of 250 positions on the chunked layers' ring of 192 slots (it wraps
// past position 191, and chunks restart every 16 positions) gives the float64 reference's logits at every
// position, decoded token by token, after a prefill of 150 positions (longer than the ring's slack: attended
// beside the cache), and in one pass of the graphs.
func TestLlama4ChunksAcrossTheRing(t *testing.T) {
	dir := llama4Long(t)
	ids := llama4IDs(t, 250)
	want := referenceLogits(t, dir, ids)
	e := open(t, dir, Options{})
	if k := e.run.plan.Layers[0]; k.Chunk != 16 || k.Window != 0 {
		t.Fatalf("layer 0: %+v, want chunks of 16", k)
	}
	cfg := e.run.kvConfig(1, bucket(len(ids)), true)
	if s := cfg.Slots(0); s != kvcache.RingSlots(16, ringSlack) || s >= len(ids) {
		t.Fatalf("layer 0 keeps %d slots for %d positions: want a ring that wraps", s, len(ids))
	}
	check := func(what string, got [][]float32, from int) {
		t.Helper()
		if d := maxDiff(got[from:], want[from:]); d > hfTolerance {
			t.Errorf("%s: logits differ from the reference's by %g (> %g)", what, d, hfTolerance)
		} else {
			t.Logf("%s: max |logit diff| %.2g", what, d)
		}
	}
	check("decode (host kernels)", tokenByToken(t, e, ids), 0)
	check("prefill 150 + decode (host kernels)", prefillDecode(t, e, ids, 150), 149)
	got, err := e.Logits(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	check("Engine.Logits (graphs)", got, 0)
}

// TestLlama4DraftAndSessions: speculative decoding (n-gram drafts, verified over positions that cross chunk
// boundaries and wrap the chunked layers' ring) leaves greedy output unchanged; a session's next turn continues
// from the cache the first left; and a next turn that shares only an early prefix with a session the ring has
// moved past is computed again, with the result of a request without a session.
func TestLlama4DraftAndSessions(t *testing.T) {
	dir := llama4Long(t)
	ctx := context.Background()
	plain := open(t, dir, Options{})
	drafted := open(t, dir, Options{Draft: DraftNgram})
	generate := func(e *Engine, ids []int, n int, s *Session) *Result {
		t.Helper()
		res, err := e.Generate(ctx, Request{PromptIDs: ids, MaxNewTokens: n, StopIDs: []int{}, Session: s}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	prompt := llama4IDs(t, 100)
	want, got := generate(plain, prompt, 120, nil), generate(drafted, prompt, 120, nil)
	if !slices.Equal(got.GeneratedIDs, want.GeneratedIDs) {
		t.Errorf("with n-gram drafts: %v, without: %v", got.GeneratedIDs, want.GeneratedIDs)
	}
	t.Logf("drafts: %d proposed, %d accepted; %d passes for %d tokens", got.Draft.Proposed, got.Draft.Accepted, got.Passes, len(got.GeneratedIDs))
	if got.Draft.Proposed == 0 {
		t.Errorf("no draft token proposed: the verification was not exercised")
	}

	for _, e := range []*Engine{plain, drafted} {
		s := e.NewSession()
		first := generate(e, prompt, 30, s)
		next := slices.Concat(prompt, first.GeneratedIDs, llama4IDs(t, 7))
		turn, alone := generate(e, next, 70, s), generate(plain, next, 70, nil) // to 207 positions: past the ring
		if turn.CachedPromptTokens == 0 || !slices.Equal(turn.GeneratedIDs, alone.GeneratedIDs) {
			t.Errorf("session's next turn: %v (%d cached), alone: %v", turn.GeneratedIDs, turn.CachedPromptTokens, alone.GeneratedIDs)
		}
		diverging := append(slices.Clone(prompt[:6]), 9, 8, 7)
		turn, alone = generate(e, diverging, 6, s), generate(plain, diverging, 6, nil)
		if turn.CachedPromptTokens != 0 || !slices.Equal(turn.GeneratedIDs, alone.GeneratedIDs) {
			t.Errorf("diverging turn: %v (%d cached), alone: %v", turn.GeneratedIDs, turn.CachedPromptTokens, alone.GeneratedIDs)
		}
		s.Close()
	}
}

// TestLlama4ReleasedConfig: Llama 4 Scout's config.json as published (Llama4ForConditionalGeneration, its
// attn_temperature_tuning written as 4) builds the model: chunked rotary layers, every fourth layer without
// rotary embeddings and with full attention and the query temperature, experts on every layer.
func TestLlama4ReleasedConfig(t *testing.T) {
	noRope := strings.Repeat("1, 1, 1, 0, ", 11) + "1, 1, 1, 0"
	moe := make([]string, 48)
	for i := range moe {
		moe[i] = strconv.Itoa(i)
	}
	scout := `{"architectures": ["Llama4ForConditionalGeneration"], "boi_token_index": 200080, "eoi_token_index": 200081,
		"image_token_index": 200092, "model_type": "llama4", "text_config": {"attention_bias": false, "attention_chunk_size": 8192,
		"attention_dropout": 0.0, "attn_scale": 0.1, "attn_temperature_tuning": 4, "bos_token_id": 200000,
		"cache_implementation": "hybrid", "eos_token_id": [200001, 200007, 200008], "floor_scale": 8192, "for_llm_compressor": false,
		"head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02, "interleave_moe_layer_step": 1,
		"intermediate_size": 8192, "intermediate_size_mlp": 16384, "max_position_embeddings": 262144, "model_type": "llama4_text",
		"moe_layers": [` + strings.Join(moe, ", ") + `], "no_rope_layers": [` + noRope + `], "num_attention_heads": 40,
		"num_experts_per_tok": 1, "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
		"output_router_logits": false, "pad_token_id": 200018, "rms_norm_eps": 1e-05, "rope_scaling": {"factor": 8.0,
		"high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
		"rope_theta": 500000.0, "router_aux_loss_coef": 0.001, "router_jitter_noise": 0.0, "torch_dtype": "bfloat16",
		"use_cache": true, "use_qk_norm": true, "vocab_size": 202048}, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
		"transformers_version": "4.51.0", "vision_config": {"attention_dropout": 0.0, "hidden_act": "gelu", "hidden_size": 1408,
		"image_size": 336, "model_type": "llama4_vision_model", "num_hidden_layers": 34, "patch_size": 14}}`
	c, err := checkpoint.ParseConfig([]byte(scout))
	if err != nil {
		t.Fatal(err)
	}
	a, err := model.For(c)
	if err != nil {
		t.Fatal(err)
	}
	p := a.Plan()
	temperature := model.QueryScale{Beta: 0.1, Floor: 8192, Shift: 1}
	for i, k := range p.Layers {
		rotary := (i+1)%4 != 0
		if want := (model.LayerKind{Chunk: 8192, MoE: true}); !rotary {
			want = model.LayerKind{Rope: model.NoRope, QueryScale: temperature, MoE: true}
			if k != want {
				t.Errorf("layer %d: %+v, want %+v", i, k, want)
			}
		} else if k != want {
			t.Errorf("layer %d: %+v, want %+v", i, k, want)
		}
	}
	if len(p.Layers) != 48 || p.Context != 262144 || p.KVHeads != 8 || p.HeadDim != 128 || p.Ropes[0].Params.Type != "llama3" {
		t.Errorf("plan: %d layers, context %d, %d kv heads of %d, rope %+v", len(p.Layers), p.Context, p.KVHeads, p.HeadDim, p.Ropes[0].Params)
	}
}

// TestLlama4Refused: what transformers' two versions read differently, or what is not implemented, is refused
// by name.
func TestLlama4Refused(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(c map[string]any)
		want string
	}{
		{"attention_bias", func(c map[string]any) { c["attention_bias"] = true }, "attention_bias"},
		{"chunk null", func(c map[string]any) { c["attention_chunk_size"] = nil; delete(c, "layer_types") }, "attention_chunk_size null"},
		{"chunked without a size", func(c map[string]any) { c["attention_chunk_size"] = nil }, "chunked_attention but attention_chunk_size is null"},
		{"layer type", func(c map[string]any) {
			c["layer_types"] = []string{"sliding_attention", "full_attention", "full_attention", "full_attention"}
		}, `layer_types[0] "sliding_attention"`},
		{"no_rope_layers", func(c map[string]any) { c["no_rope_layers"] = []int{1, 2, 1, 0} }, "no_rope_layers[1] is 2"},
		{"moe_layers", func(c map[string]any) { c["moe_layers"] = []int{1, 4} }, "moe_layers lists layer 4"},
	} {
		dir := llama4Fixture(t, tc.edit)
		if _, err := Open(context.Background(), dir, Options{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestLlama4ConditionalGeneration: the llama4_text fixture laid out as Scout's and Maverick's checkpoints are
// (Llama4ForConditionalGeneration: the decoder's config in text_config and its tensors under language_model, a
// vision model and projector beside it), as transformers saves them and as its modules name them, in both
// config spellings, computes transformers' logits and greedy tokens; the vision tensors are left out.
func TestLlama4ConditionalGeneration(t *testing.T) {
	ref := hffixture.MustReference(t, "llama4_text")
	ids := ints(ref.InputIDs)
	want := ref.Rows()
	layouts := []struct {
		name   string
		rename func(string) string
		vision string // the prefix of the vision model and projector
	}{
		{"saved", func(name string) string { return "language_model." + name }, ""},
		{"modules", func(name string) string {
			if rest, ok := strings.CutPrefix(name, "model."); ok {
				return "model.language_model." + rest
			}
			return name // lm_head.weight
		}, "model."},
	}
	for _, spelling := range hffixture.Spellings {
		for _, layout := range layouts {
			t.Run(spelling+"/"+layout.name, func(t *testing.T) {
				dir := hffixture.Checkpoint(t, "llama4_text", spelling)
				relayout(t, dir, layout.rename, map[string][]int{layout.vision + "vision_model.patch_embedding.linear.weight": {8, 12},
					layout.vision + "multi_modal_projector.linear_1.weight": {4, 8}})
				editConfig(t, dir, func(c map[string]any) {
					text := maps.Clone(c)
					clear(c)
					c["architectures"], c["model_type"], c["text_config"] = []string{"Llama4ForConditionalGeneration"}, "llama4", text
					c["boi_token_index"], c["eoi_token_index"], c["image_token_index"] = 200, 201, 202
					c["tie_word_embeddings"], c["vision_config"] = false, map[string]any{"hidden_size": 8, "model_type": "llama4_vision_model"}
				})
				e := open(t, dir, Options{})
				got, err := e.Logits(context.Background(), ids)
				if err != nil {
					t.Fatal(err)
				}
				if d := maxDiff(got, want); d > hfTolerance {
					t.Errorf("logits differ from transformers' by %g", d)
				}
				res, err := e.Generate(context.Background(), Request{PromptIDs: ids, MaxNewTokens: len(ref.GreedyIDs), StopIDs: []int{}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(res.GeneratedIDs, ints(ref.GreedyIDs)) {
					t.Errorf("greedy %v, transformers %v", res.GeneratedIDs, ref.GreedyIDs)
				}
			})
		}
	}
}
