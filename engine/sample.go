package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Sampling chooses the next token from the logits. The zero value is greedy decoding.
//
// The steps follow Hugging Face's order: repetition penalty (then OpenAI's presence and frequency penalties
// and logit bias), temperature, top-k, top-p, min-p, then a draw from the remaining distribution (or the argmax
// when Temperature is 0). Speculative decoding verifies drafts against that same distribution.
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
	// PresencePenalty is subtracted once from the logit of every token generated so far (not the prompt's), and
	// FrequencyPenalty as many times as it was generated: OpenAI's presence_penalty and frequency_penalty
	// (logit -= count·frequency + (count > 0)·presence). 0 is off; negative values favour repeating.
	PresencePenalty  float64
	FrequencyPenalty float64
	// LogitBias is added to the logits of its token ids (OpenAI's logit_bias: in [-100, 100]; -100 all but bans
	// a token, 100 all but forces it).
	LogitBias map[int]float64
	// MinP keeps the candidates whose probability is at least MinP times the most likely one's; 0 is off.
	MinP float64
	// Seed makes sampling reproducible.
	Seed uint64
}

// MaxLogitBias bounds the values of Sampling.LogitBias, as OpenAI's API does.
const MaxLogitBias = 100

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
	case math.IsNaN(s.PresencePenalty) || math.IsInf(s.PresencePenalty, 0):
		return fmt.Errorf("presence penalty must be finite, got %v", s.PresencePenalty)
	case math.IsNaN(s.FrequencyPenalty) || math.IsInf(s.FrequencyPenalty, 0):
		return fmt.Errorf("frequency penalty must be finite, got %v", s.FrequencyPenalty)
	case !(s.MinP >= 0 && s.MinP <= 1):
		return fmt.Errorf("min-p must be in [0, 1], got %v", s.MinP)
	}
	for id, b := range s.LogitBias {
		if id < 0 || !(b >= -MaxLogitBias && b <= MaxLogitBias) {
			return fmt.Errorf("logit bias: token id %d: want an id ≥ 0 and a bias in [-%d, %d], got %v", id, MaxLogitBias, MaxLogitBias, b)
		}
	}
	return nil
}

// checkVocab refuses a logit bias for a token id outside a vocabulary of n tokens.
func (s Sampling) checkVocab(n int) error {
	for id := range s.LogitBias {
		if id >= n {
			return fmt.Errorf("logit bias: token id %d is outside the vocabulary (vocab_size %d)", id, n)
		}
	}
	return nil
}

// sampler holds the random state and scratch buffers of one generation.
type sampler struct {
	s      Sampling
	rng    *rand.Rand
	scores []float64
	order  []int
	prompt int // the history's first prompt ids, which the presence and frequency penalties do not count
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

// verify chooses the token of a position whose draft proposes the candidates xs, in order (speculative decoding;
// a draft tree proposes several). Greedy, it is next's choice. Sampling, each candidate in turn is taken with its
// probability under what remains of the distribution next draws from, and removed from it when not taken; with
// none taken, the token is drawn from the rest: each token comes with probability p all the same. which is the
// index of the candidate chosen, -1 for none.
func (sm *sampler) verify(logits []float32, history []int, xs []int) (tok, which int) {
	scores := sm.penalized(logits, history)
	if sm.s.Temperature == 0 {
		tok = firstMax(scores)
		return tok, slices.Index(xs, tok)
	}
	order, probs, sum := sm.dist(scores)
	probs = slices.Clone(probs)
	for i, x := range xs {
		at := slices.Index(order, x)
		if at < 0 || probs[at] == 0 {
			continue
		}
		if sm.rng.Float64()*sum < probs[at] {
			return x, i
		}
		sum -= probs[at]
		probs[at] = 0
	}
	return sm.draw(order, probs, sum, -1), -1
}

// penalized returns the logits as float64, with the repetition penalty, the presence and frequency penalties
// and the logit bias applied: what next and verify sample from alike.
func (sm *sampler) penalized(logits []float32, history []int) []float64 {
	scores := sm.scores[:0]
	for _, l := range logits {
		scores = append(scores, float64(l))
	}
	sm.scores = scores
	if p := sm.s.RepetitionPenalty; p > 0 && p != 1 {
		penalize(scores, history, p)
	}
	if sm.s.PresencePenalty != 0 || sm.s.FrequencyPenalty != 0 {
		penalizeGenerated(scores, history[min(sm.prompt, len(history)):], sm.s.PresencePenalty, sm.s.FrequencyPenalty)
	}
	for id, b := range sm.s.LogitBias {
		if id < len(scores) {
			scores[id] += b
		}
	}
	return scores
}

// penalizeGenerated applies OpenAI's presence and frequency penalties for the tokens generated:
// score -= count·frequency + (count > 0)·presence.
func penalizeGenerated(scores []float64, generated []int, presence, frequency float64) {
	counts := make(map[int]int, len(generated))
	for _, id := range generated {
		if id >= 0 && id < len(scores) {
			counts[id]++
		}
	}
	for id, n := range counts {
		scores[id] -= float64(n)*frequency + presence
	}
}

// dist is the distribution a sampled token is drawn from: the candidates after temperature, top-k and top-p
// (most likely first), their probabilities and the probabilities' sum.
func (sm *sampler) dist(scores []float64) (order []int, probs []float64, sum float64) {
	for i := range scores {
		scores[i] /= sm.s.Temperature
	}
	order = sm.candidates(scores, sm.s.TopK)
	probs, sum = nucleus(scores, order, sm.s.TopP)
	if sm.s.MinP > 0 {
		probs, sum = minP(probs, sm.s.MinP)
	}
	return order[:len(probs)], probs, sum
}

// minP cuts the candidates (most likely first) whose probability is below minP times the first's, and returns
// those kept and the sum of their probabilities.
func minP(probs []float64, minP float64) ([]float64, float64) {
	floor := probs[0] * minP
	n := 1
	for n < len(probs) && probs[n] >= floor {
		n++
	}
	sum := 0.0
	for _, p := range probs[:n] {
		sum += p
	}
	return probs[:n], sum
}

// draw draws a candidate with probability probs[i]/sum, never skip (-1: none; sum excludes its probability).
func (sm *sampler) draw(order []int, probs []float64, sum float64, skip int) int {
	r := sm.rng.Float64() * sum
	last := -1
	for i, p := range probs {
		if i == skip || p == 0 {
			continue
		}
		last = i
		r -= p
		if r < 0 {
			return order[i]
		}
	}
	if last < 0 { // nothing else had any probability
		return order[max(skip, 0)]
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
