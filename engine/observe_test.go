package engine

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/shards"
)

// TestObserveInputs: Options.ObserveInputs sees the input rows of every matrix product under its checkpoint name,
// in Logits (which then runs on the host kernels) and in generation: the first layer's q_proj input equals the
// RMS-normalized embeddings computed here from the checkpoint, q/k/v and gate/up share their inputs, every
// matrix sees every position once per pass, and graph decode is refused.
func TestObserveInputs(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	type seen struct {
		rows, cols int
		first      []float32 // the first row observed
	}
	var mu sync.Mutex
	obs := map[string]*seen{}
	observe := func(name string, x []float32, cols int) {
		mu.Lock()
		defer mu.Unlock()
		s := obs[name]
		if s == nil {
			s = &seen{cols: cols, first: slices.Clone(x[:cols])}
			obs[name] = s
		}
		if s.cols != cols {
			t.Errorf("%s: rows of %d, then of %d", name, s.cols, cols)
		}
		s.rows += len(x) / cols
	}
	ids := []int{1, 403, 407, 280, 300, 411, 290, 350, 420, 299}
	// Streaming the head and embedding too (their weights then come through the staging copies).
	if _, err := open(t, model, Options{ObserveInputs: observe, StreamAll: true}).Logits(context.Background(), ids); err != nil {
		t.Fatal(err)
	}
	if s := obs["model.embed_tokens.weight"]; s == nil || s.rows != len(ids) {
		t.Fatalf("streamed head: observed %+v, want %d rows", s, len(ids))
	}
	clear(obs)
	e := open(t, model, Options{ObserveInputs: observe})
	if _, err := e.Logits(context.Background(), ids); err != nil {
		t.Fatal(err)
	}
	const layers, hidden, inter = 5, 64, 172
	want := map[string]int{"model.embed_tokens.weight": hidden} // the tied head
	for l := range layers {
		for _, m := range []string{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj"} {
			want[fmt.Sprintf("model.layers.%d.%s.weight", l, m)] = hidden
		}
		want[fmt.Sprintf("model.layers.%d.mlp.down_proj.weight", l)] = inter
	}
	if len(obs) != len(want) {
		t.Errorf("observed %d matrices, want %d", len(obs), len(want))
	}
	for name, cols := range want {
		s := obs[name]
		if s == nil || s.cols != cols || s.rows != len(ids) {
			t.Errorf("%s: observed %+v, want %d rows of %d", name, s, len(ids), cols)
		}
	}
	for l := range layers {
		p := fmt.Sprintf("model.layers.%d.", l)
		if !slices.Equal(obs[p+"self_attn.q_proj.weight"].first, obs[p+"self_attn.v_proj.weight"].first) ||
			!slices.Equal(obs[p+"mlp.gate_proj.weight"].first, obs[p+"mlp.up_proj.weight"].first) {
			t.Errorf("layer %d: q/v or gate/up saw different inputs", l)
		}
	}
	// The first position's q_proj input: RMSNorm(embedding of BOS) · input_layernorm.
	ck, err := checkpoint.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) []float32 {
		ti, ok := ck.Tensor(name)
		if !ok {
			t.Fatalf("no tensor %s", name)
		}
		b := make([]byte, ti.Length)
		if err := checkpoint.ReadTensorAt(ti, b); err != nil {
			t.Fatal(err)
		}
		v := make([]float32, ti.NumElements())
		if err := checkpoint.ToF32(v, b, ti.DType); err != nil {
			t.Fatal(err)
		}
		return v
	}
	emb, norm := read("model.embed_tokens.weight")[ids[0]*hidden:][:hidden], read("model.layers.0.input_layernorm.weight")
	ss := 0.0
	for _, v := range emb {
		ss += float64(v) * float64(v)
	}
	inv := 1 / math.Sqrt(ss/hidden+1e-5)
	for j, v := range obs["model.layers.0.self_attn.q_proj.weight"].first {
		if w := float64(emb[j]) * inv * float64(norm[j]); math.Abs(float64(v)-w) > 1e-5*(1+math.Abs(w)) {
			t.Fatalf("layer 0 q_proj input [%d] = %g, RMSNorm of the embedding %g", j, v, w)
		}
	}
	// Generation: the prompt's positions, then one row per step.
	before := obs["model.layers.2.mlp.down_proj.weight"].rows
	req := Request{PromptIDs: ids[:4], MaxNewTokens: 3, StopIDs: []int{-1}}
	if _, err := e.Generate(context.Background(), req, func(Token) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := obs["model.layers.2.mlp.down_proj.weight"].rows - before; got != 4+2 {
		t.Errorf("generating 3 tokens after a 4-token prompt: down_proj saw %d rows, want 6 (the prompt, then two steps)", got)
	}
	if _, err := Open(context.Background(), model, Options{ObserveInputs: observe, GraphDecode: true}); err == nil || !strings.Contains(err.Error(), "host kernels") {
		t.Errorf("ObserveInputs with graph decode: error %v, want a refusal naming the host kernels", err)
	}
}

// TestTwoPartOwnShards: the Q8_0 matrices of shards layerstream quantized (split --quantize) take two-part
// inputs; a GGUF file's Q8_0 matrices keep llama.cpp's 8-bit inputs.
func TestTwoPartOwnShards(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	ck, err := checkpoint.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	q8 := filepath.Join(t.TempDir(), "q8")
	if _, err := shards.Split(context.Background(), ck, shards.SplitOptions{Out: q8, Quantize: shards.Q8}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model string
		want  bool
	}{{q8, true}, {"../gguf/testdata/tiny/tiny-llama-Q8_0.gguf", false}} {
		e := open(t, c.model, Options{ShardDir: filepath.Join(t.TempDir(), "s")})
		if e.store.ownQuantized != c.want {
			t.Errorf("%s: two-part inputs %v, want %v", c.model, e.store.ownQuantized, c.want)
		}
		if _, err := e.Logits(context.Background(), []int{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
}
