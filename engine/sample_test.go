package engine

import (
	"math"
	"slices"
	"testing"
)

func TestSampling(t *testing.T) {
	logits := []float32{0.1, 2.0, 1.9, -1, 2.0}
	greedy, _ := newSampler(Sampling{})
	if got := greedy.next(logits, nil); got != 1 {
		t.Errorf("greedy picked %d, want 1 (the first maximum)", got)
	}
	// Repetition penalty moves greedy off a token already seen.
	pen, _ := newSampler(Sampling{RepetitionPenalty: 1.3})
	if got := pen.next(logits, []int{1, 4}); got != 2 {
		t.Errorf("with tokens 1 and 4 penalised greedy picked %d, want 2", got)
	}
	// top-k 1 and a tiny top-p reduce sampling to the argmax.
	// An explicit top-p of 0 keeps the most likely token alone, as OpenAI's API and transformers read it.
	for _, s := range []Sampling{{Temperature: 1, TopK: 1, Seed: 7}, {Temperature: 5, TopP: 0.01, Seed: 7},
		{Temperature: 5, TopP: ExplicitTopP(0), Seed: 7}} {
		sm, _ := newSampler(s)
		for range 50 {
			if got := sm.next(logits, nil); got != 1 {
				t.Fatalf("%+v picked %d, want 1", s, got)
			}
		}
	}
	// top-k 2 never leaves the two best; the same seed repeats the same draws; all candidates appear.
	draw := func(seed uint64) []int {
		sm, _ := newSampler(Sampling{Temperature: 1, TopK: 3, Seed: seed})
		out := make([]int, 200)
		for i := range out {
			out[i] = sm.next(logits, nil)
		}
		return out
	}
	a, b := draw(42), draw(42)
	if !slices.Equal(a, b) {
		t.Error("the same seed gave different draws")
	}
	seen := map[int]int{}
	for _, id := range a {
		seen[id]++
	}
	if len(seen) != 3 || seen[1] == 0 || seen[4] == 0 || seen[2] == 0 {
		t.Errorf("top-k 3 draws %v, want ids 1, 2 and 4 only", seen)
	}
	if slices.Equal(a, draw(43)) {
		t.Error("different seeds gave the same 200 draws")
	}
	if got := ExplicitTopP(0.5); got != 0.5 {
		t.Errorf("ExplicitTopP(0.5) = %v", got)
	}
	for _, bad := range []Sampling{{Temperature: -1}, {TopK: -1}, {TopP: 1.5}, {RepetitionPenalty: -2},
		{Temperature: math.Inf(1)}, {Temperature: math.NaN()}, {RepetitionPenalty: math.Inf(1)}} {
		if _, err := newSampler(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
