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

// TestSamplingPenaltiesAndBias: OpenAI's presence and frequency penalties (counting generated tokens only),
// logit bias and min-p, applied where next and verify (speculative decoding) both see them.
func TestSamplingPenaltiesAndBias(t *testing.T) {
	logits := []float32{0.1, 2.0, 1.9, -1, 2.0}
	// History: the prompt [1], then 4 generated twice and 2 once.
	history := []int{1, 4, 2, 4}
	sm, _ := newSampler(Sampling{PresencePenalty: 0.5, FrequencyPenalty: 0.25})
	sm.prompt = 1
	got := slices.Clone(sm.penalized(logits, history))
	want := []float64{0.1, 2.0, 1.9 - 0.25 - 0.5, -1, 2.0 - 2*0.25 - 0.5}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-6 {
			t.Fatalf("penalized %v, want %v (token 1 is the prompt's: not counted)", got, want)
		}
	}
	// A large bias on one token makes greedy pick it, in next and in verify alike.
	biased, _ := newSampler(Sampling{LogitBias: map[int]float64{3: 100}})
	if got := biased.next(logits, nil); got != 3 {
		t.Errorf("greedy with logit bias 100 on token 3 picked %d", got)
	}
	if tok, which := biased.verify(logits, nil, []int{1}); tok != 3 || which != -1 {
		t.Errorf("verify with logit bias 100 on token 3: %d, candidate %d; want 3 and the draft 1 refused", tok, which)
	}
	banned, _ := newSampler(Sampling{LogitBias: map[int]float64{1: -100, 4: -100}})
	if got := banned.next(logits, nil); got != 2 {
		t.Errorf("greedy with tokens 1 and 4 banned picked %d, want 2", got)
	}
	// min-p 0.5 keeps 1, 4 and 2 (probabilities within half the best's), never 0 or 3.
	mp, _ := newSampler(Sampling{Temperature: 1, MinP: 0.5, Seed: 3})
	for range 200 {
		if got := mp.next(logits, nil); got == 0 || got == 3 {
			t.Fatalf("min-p 0.5 drew %d", got)
		}
	}
	order, probs, sum := mp.dist(mp.penalized(logits, nil))
	if len(order) != 3 || math.Abs(sum-(probs[0]+probs[1]+probs[2])) > 1e-12 {
		t.Errorf("min-p 0.5: candidates %v %v (sum %v), want 3", order, probs, sum)
	}
	for _, bad := range []Sampling{{MinP: 1.5}, {MinP: -0.1}, {PresencePenalty: math.NaN()}, {FrequencyPenalty: math.Inf(-1)},
		{LogitBias: map[int]float64{1: 101}}, {LogitBias: map[int]float64{-1: 1}}} {
		if _, err := newSampler(bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
