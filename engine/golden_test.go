package engine

import (
	"context"
	"math"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
)

func maxAbsDiff(a []float32, b []float64) float64 {
	m := 0.0
	for i := range a {
		m = max(m, math.Abs(float64(a[i])-b[i]))
	}
	return m
}

// TestGoldenStories260K reproduces llama2.c's greedy generations and logits on the real stories260K weights.
func TestGoldenStories260K(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	ctx := context.Background()
	for _, mode := range []struct {
		name string
		opts Options
	}{
		{"streamed", Options{}},
		{"resident", Options{Resident: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e, err := Open(ctx, model, mode.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			checkGolden(t, e)
		})
	}
}

// checkGolden runs every golden case on e: greedy generations must match llama2.c's ids exactly and the logits
// of the first steps within 1e-4.
func checkGolden(t *testing.T, e *Engine) {
	t.Helper()
	ctx := context.Background()
	for _, c := range testutil.StoriesGolden(t) {
		// llama2.c runs 200 steps counted from position 0: the last prompt position predicts the first token.
		res, err := e.Generate(ctx, Request{PromptIDs: c.PromptIDs, MaxNewTokens: len(c.GeneratedIDs)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range c.GeneratedIDs {
			if i >= len(res.GeneratedIDs) || res.GeneratedIDs[i] != id {
				t.Fatalf("%q: generated ids diverge at %d:\n got %v\nwant %v", c.Prompt, i, res.GeneratedIDs, c.GeneratedIDs)
			}
		}
		if len(res.GeneratedIDs) != len(c.GeneratedIDs) {
			t.Fatalf("%q: %d tokens, want %d", c.Prompt, len(res.GeneratedIDs), len(c.GeneratedIDs))
		}
		// first_logits: the last prompt position, then the next positions fed the generated ids.
		seq := append(append([]int(nil), c.PromptIDs...), c.GeneratedIDs...)
		all, err := e.Logits(ctx, seq[:len(c.PromptIDs)+len(c.FirstLogits)-1])
		if err != nil {
			t.Fatal(err)
		}
		for j, want := range c.FirstLogits {
			got := all[len(c.PromptIDs)-1+j]
			d := maxAbsDiff(got, want)
			t.Logf("%q: logits %d: max abs diff vs llama2.c %.2g", c.Prompt, j, d)
			if d > 1e-4 {
				t.Errorf("%q: logits %d differ from llama2.c by %g (> 1e-4)", c.Prompt, j, d)
			}
		}
	}
}
