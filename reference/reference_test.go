package reference

import (
	"math"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/testutil"
)

// TestForwardMatchesLlama2c checks the float64 reference against llama2.c's float32 logits at the last prompt
// position and the next two steps, for every golden case, within 1e-4.
func TestForwardMatchesLlama2c(t *testing.T) {
	ck, err := checkpoint.Open(testutil.SharedPath(t, "models", "stories260K-hf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range testutil.StoriesGolden(t) {
		n := len(c.FirstLogits)
		ids := append(append([]int{}, c.PromptIDs...), c.GeneratedIDs[:n-1]...)
		out, err := Forward(ck, ids)
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Hidden) != ck.Config.NumHiddenLayers || len(out.Hidden[0]) != len(ids) || len(out.Logits) != len(ids) {
			t.Fatalf("output shape: %d layers, %d positions, %d logit rows", len(out.Hidden), len(out.Hidden[0]), len(out.Logits))
		}
		var worst float64
		for s, want := range c.FirstLogits {
			got := out.Logits[len(c.PromptIDs)-1+s]
			for i, w := range want {
				worst = max(worst, math.Abs(got[i]-w))
			}
		}
		if worst > 1e-4 {
			t.Fatalf("%q: logits differ from llama2.c by %g (> 1e-4)", c.Prompt, worst)
		}
		t.Logf("%q: max |reference - llama2.c| = %.2g over %d steps", c.Prompt, worst, n)

		// Greedy argmax at each position reproduces the golden continuation (teacher forcing).
		full := append(append([]int{}, c.PromptIDs...), c.GeneratedIDs...)
		out, err = Forward(ck, full[:len(full)-1])
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range c.GeneratedIDs {
			if got := argmax(out.Logits[len(c.PromptIDs)-1+i]); got != want {
				t.Fatalf("%q: greedy token %d is %d, llama2.c generated %d", c.Prompt, i, got, want)
			}
		}
	}
}

func argmax(x []float64) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
