package engine

import (
	"context"
	"math"
	"testing"

	"github.com/layerstream/layerstream/internal/hffixture"
)

// smolLM2Tolerance is how far the engine's float32 logits may be from transformers' float32 logits on the real
// SmolLM2-135M (30 layers): both round differently in every sum, and the differences measured were 5e-5 to 9e-5
// (transformers' own cached decode differs from its one-pass forward by up to 8.9e-5 on these prompts).
const smolLM2Tolerance = 2e-4

// TestSmolLM2MatchesTransformers: on the real SmolLM2-135M-Instruct checkpoint saved by transformers 5 (config in
// the transformers-5 spelling, rope theta 100000), greedy generation reproduces transformers' 64 ids for all 12
// reference prompts (chat-templated and plain), and one forward pass over each prompt and its greedy ids gives
// transformers' argmax wherever its margin is clear, the maximum logit, the top-20 logits and the full rows within
// smolLM2Tolerance (for the prompts the reference has top-20 logits or full rows of). Issue 13 found 0/12 generations equal when the engine ignored the transformers-5 spelling.
func TestSmolLM2MatchesTransformers(t *testing.T) {
	dir := hffixture.SmolLM2Checkpoint(t, "f32")
	if testing.Short() {
		t.Skip("skipping: 12 generations of 64 tokens on a 135M model (-short)")
	}
	ref, err := hffixture.LoadSmolLM2Reference()
	if err != nil {
		t.Fatal(err)
	}
	e := open(t, dir, Options{ShardDir: t.TempDir()})
	ctx := context.Background()
	equal, positions := 0, 0
	worst := 0.0
	for _, p := range ref.Prompts {
		prompt := ints(p.PromptIDs)
		res, err := e.Generate(ctx, Request{PromptIDs: prompt, MaxNewTokens: len(p.GreedyIDs), StopIDs: []int{}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := ints(p.GreedyIDs)
		same := len(res.GeneratedIDs) == len(want)
		for i := range min(len(res.GeneratedIDs), len(want)) {
			if res.GeneratedIDs[i] != want[i] {
				same = false
				t.Errorf("prompt %d (%s): greedy id %d is %d, transformers %d (its margin there %.2e)",
					p.Index, p.Kind, i, res.GeneratedIDs[i], want[i], p.Margin[len(prompt)+i-1])
				break
			}
		}
		if same {
			equal++
		}

		if p.TopIDs == nil && !hasFullRow(ref, p.Index) {
			continue // one forward pass over every position: for the prompts with top-20 logits or full rows
		}
		seq := append(append([]int(nil), prompt...), want...)
		logits, err := e.Logits(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		k := ref.TopK
		for pos, row := range logits {
			positions++
			best := argmax(row)
			if best != int(p.Argmax[pos]) && float64(p.Margin[pos]) > 2*smolLM2Tolerance {
				t.Errorf("prompt %d position %d: argmax %d, transformers %d (margin %.2e)", p.Index, pos, best, p.Argmax[pos], p.Margin[pos])
			}
			d := math.Abs(float64(row[best] - p.MaxLogit[pos]))
			if p.TopIDs != nil {
				for j := range k {
					id, v := p.TopIDs[pos*k+j], p.TopValues[pos*k+j]
					d = max(d, math.Abs(float64(row[id]-v)))
				}
			}
			if full, ok := ref.FullRows[[2]int{p.Index, pos}]; ok {
				for j, v := range full {
					d = max(d, math.Abs(float64(row[j]-v)))
				}
			}
			worst = max(worst, d)
			if d > smolLM2Tolerance {
				t.Errorf("prompt %d position %d: logits differ from transformers by %.2e (tolerance %.0e)", p.Index, pos, d, smolLM2Tolerance)
			}
		}
	}
	t.Logf("greedy generations equal to transformers: %d/%d; max |logit diff| over %d teacher-forced positions: %.2e",
		equal, len(ref.Prompts), positions, worst)
}

func argmax(row []float32) int {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return best
}

// hasFullRow reports whether the reference holds a full logit row of prompt i.
func hasFullRow(ref *hffixture.SmolLM2Reference, i int) bool {
	for k := range ref.FullRows {
		if k[0] == i {
			return true
		}
	}
	return false
}
