package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Sampling chooses the next token from the logits. The zero value is greedy decoding.
//
// The steps follow Hugging Face's order: repetition penalty, temperature, top-k, top-p, then a draw from
// the remaining distribution (or the argmax when Temperature is 0).
type Sampling struct {
	// Temperature divides the logits; 0 means greedy (argmax, the first one on ties).
	Temperature float64
	// TopK keeps the k most likely tokens; 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability reaches p; 0 or 1 keeps all (the zero
	// value). A top-p given by a user, where 0 means the most likely token alone, goes through ExplicitTopP.
	TopP float64
	// RepetitionPenalty divides positive (multiplies negative) logits of tokens already in the sequence;
	// 0 or 1 is off.
	RepetitionPenalty float64
	// Seed makes sampling reproducible.
	Seed uint64
}

// DefaultSampling is the model's own sampling settings from generation_config.json: its temperature, top-k and
// top-p when it sets do_sample (else greedy), and its repetition penalty. Seed is left 0.
func (e *Engine) DefaultSampling() Sampling {
	g := e.gen
	var s Sampling
	if g.DoSample {
		s.Temperature = 1
		if g.Temperature != nil {
			s.Temperature = *g.Temperature
		}
		if g.TopK != nil {
			s.TopK = *g.TopK
		}
		if g.TopP != nil {
			s.TopP = ExplicitTopP(*g.TopP)
		}
	}
	if g.RepetitionPenalty != nil {
		s.RepetitionPenalty = *g.RepetitionPenalty
	}
	return s
}

// ExplicitTopP is the Sampling.TopP for a top-p p that a user gave (a flag, a request field,
// generation_config.json): p itself, except that 0, which OpenAI's API, transformers and llama.cpp read as the
// most likely token alone, becomes the smallest positive float, which keeps just that token (Sampling's own 0
// keeps all).
func ExplicitTopP(p float64) float64 {
	if p == 0 {
		return math.SmallestNonzeroFloat64
	}
	return p
}

func (s Sampling) validate() error {
	switch {
	case s.Temperature < 0 || math.IsNaN(s.Temperature) || math.IsInf(s.Temperature, 0):
		return fmt.Errorf("temperature must be finite and ≥ 0, got %v", s.Temperature)
	case s.TopK < 0:
		return fmt.Errorf("top-k must be ≥ 0, got %d", s.TopK)
	case s.TopP < 0 || s.TopP > 1 || math.IsNaN(s.TopP):
		return fmt.Errorf("top-p must be in [0, 1], got %v", s.TopP)
	case s.RepetitionPenalty < 0 || math.IsNaN(s.RepetitionPenalty) || math.IsInf(s.RepetitionPenalty, 0):
		return fmt.Errorf("repetition penalty must be finite and ≥ 0, got %v", s.RepetitionPenalty)
	}
	return nil
}

// sampler holds the random state and scratch buffers of one generation.
type sampler struct {
	s      Sampling
	rng    *rand.Rand
	scores []float64
	order  []int
}

func newSampler(s Sampling) (*sampler, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	return &sampler{s: s, rng: rand.New(rand.NewPCG(s.Seed, 0x6c617965727374))}, nil
}

// next chooses a token given the logits of the last position and the ids of the sequence so far.
func (sm *sampler) next(logits []float32, history []int) int {
	scores := sm.penalized(logits, history)
	if sm.s.Temperature == 0 {
		return firstMax(scores)
	}
	order, probs, sum := sm.dist(scores)
	return sm.draw(order, probs, sum, -1)
}

// verify chooses the token of a position whose draft proposes x (speculative decoding). Greedy, it is next's
// choice, accepted when it is x. Sampling, it is x with probability p(x) under the distribution next draws from,
// else a draw from that distribution without x: each token comes with probability p all the same.
func (sm *sampler) verify(logits []float32, history []int, x int) (tok int, accepted bool) {
	scores := sm.penalized(logits, history)
	if sm.s.Temperature == 0 {
		tok = firstMax(scores)
		return tok, tok == x
	}
	order, probs, sum := sm.dist(scores)
	at := slices.Index(order, x)
	if at >= 0 && sm.rng.Float64()*sum < probs[at] {
		return x, true
	}
	if at >= 0 {
		sum -= probs[at]
	}
	return sm.draw(order, probs, sum, at), false
}

// penalized returns the logits as float64, with the repetition penalty applied.
func (sm *sampler) penalized(logits []float32, history []int) []float64 {
	scores := sm.scores[:0]
	for _, l := range logits {
		scores = append(scores, float64(l))
	}
	sm.scores = scores
	if p := sm.s.RepetitionPenalty; p > 0 && p != 1 {
		penalize(scores, history, p)
	}
	return scores
}

// dist is the distribution a sampled token is drawn from: the candidates after temperature, top-k and top-p
// (most likely first), their probabilities and the probabilities' sum.
func (sm *sampler) dist(scores []float64) (order []int, probs []float64, sum float64) {
	for i := range scores {
		scores[i] /= sm.s.Temperature
	}
	order = sm.candidates(scores, sm.s.TopK)
	probs, sum = nucleus(scores, order, sm.s.TopP)
	return order[:len(probs)], probs, sum
}

// draw draws a candidate with probability probs[i]/sum, never skip (-1: none; sum excludes its probability).
func (sm *sampler) draw(order []int, probs []float64, sum float64, skip int) int {
	r := sm.rng.Float64() * sum
	last := -1
	for i, p := range probs {
		if i == skip {
			continue
		}
		last = i
		r -= p
		if r < 0 {
			return order[i]
		}
	}
	return order[last]
}

// penalize applies the repetition penalty p to the scores of the tokens in history: positive scores are divided
// by it, negative ones multiplied.
func penalize(scores []float64, history []int, p float64) {
	seen := make(map[int]bool, len(history))
	for _, id := range history {
		if id < 0 || id >= len(scores) || seen[id] {
			continue
		}
		seen[id] = true
		if scores[id] > 0 {
			scores[id] /= p
		} else {
			scores[id] *= p
		}
	}
}

// firstMax is the index of the largest score, the first one on ties.
func firstMax(scores []float64) int {
	best := 0
	for i, v := range scores {
		if v > scores[best] {
			best = i
		}
	}
	return best
}

// candidates returns the token ids by decreasing score (ties: the lower id first), the topK first ones when
// 0 < topK < len(scores).
func (sm *sampler) candidates(scores []float64, topK int) []int {
	order := sm.order[:0]
	for i := range scores {
		order = append(order, i)
	}
	sm.order = order
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case scores[a] > scores[b]:
			return -1
		case scores[a] < scores[b]:
			return 1
		}
		return 0
	})
	if topK > 0 && topK < len(order) {
		order = order[:topK]
	}
	return order
}

// nucleus returns the softmax probabilities of the candidates in order, cut to the smallest prefix whose
// probability reaches topP when 0 < topP < 1, and the sum of those kept.
func nucleus(scores []float64, order []int, topP float64) (probs []float64, sum float64) {
	maxScore := scores[order[0]]
	probs = make([]float64, len(order))
	for i, id := range order {
		probs[i] = math.Exp(scores[id] - maxScore)
		sum += probs[i]
	}
	for i := range probs {
		probs[i] /= sum
	}
	if !(topP > 0 && topP < 1) {
		return probs, 1
	}
	cum := 0.0
	for i, p := range probs {
		cum += p
		if cum >= topP {
			probs = probs[:i+1]
			break
		}
	}
	sum = 0
	for _, p := range probs {
		sum += p
	}
	return probs, sum
}
