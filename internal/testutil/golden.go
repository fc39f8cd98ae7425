package testutil

import (
	"encoding/json"
	"os"
	"testing"
)

// GoldenCase is one case of golden/stories260K.generate.json, produced by llama2.c's run.c (float32, greedy).
type GoldenCase struct {
	Prompt       string `json:"prompt"`
	PromptIDs    []int  `json:"prompt_ids"` // BOS first
	GeneratedIDs []int  `json:"generated_ids"`
	StoppedOnBOS bool   `json:"stopped_on_bos"`
	// Text is what llama2.c printed, its own final "\n" included.
	Text string `json:"text"`
	// FirstLogits are the logits at the last prompt position and the next two steps.
	FirstLogits [][]float64 `json:"first_logits"`
}

// StoriesGolden loads every case of the stories260K golden generations, skipping the test when ../shared is
// absent and failing it when the file has no case.
func StoriesGolden(t testing.TB) []GoldenCase {
	t.Helper()
	b, err := os.ReadFile(SharedPath(t, "golden", "stories260K.generate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases []GoldenCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("stories260K.generate.json: %v", err)
	}
	if len(g.Cases) == 0 {
		t.Fatal("stories260K.generate.json has no cases")
	}
	return g.Cases
}
