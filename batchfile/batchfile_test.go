package batchfile

import (
	"strings"
	"testing"

	"github.com/layerstream/layerstream/engine"
)

// TestParseAndSeeds: blank lines are skipped but counted, errors name the file's line, and a line samples with
// its own seed or the run's plus its number less one.
func TestParseAndSeeds(t *testing.T) {
	lines, err := Parse([]byte("{\"ids\": [1, 2]}\n\n{\"prompt\": \"x\", \"seed\": 9, \"max_new_tokens\": 3}\r\n"), "f.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 || lines[0].Number != 1 || lines[1].Number != 3 {
		t.Fatalf("lines %+v", lines)
	}
	if lines[0].SeedFor(100) != 100 || lines[1].SeedFor(100) != 9 {
		t.Errorf("seeds %d, %d; want 100 and 9", lines[0].SeedFor(100), lines[1].SeedFor(100))
	}
	r, err := lines[0].Request(Settings{MaxNewTokens: 5, Sampling: engine.Sampling{Seed: 41, Temperature: 0.5}}, nil, nil)
	if err != nil || r.MaxNewTokens != 5 || r.Sampling.Seed != 41 || r.Sampling.Temperature != 0.5 {
		t.Errorf("request %+v, %v", r, err)
	}
	if _, err := lines[1].Request(Settings{}, nil, nil); err == nil || !strings.Contains(err.Error(), "needs the tokenizer") {
		t.Errorf("a text prompt without a tokenizer: %v", err)
	}
	if _, err := Parse([]byte("{\"ids\": [1]}\n{\"ids\": [1], \"prompt\": \"x\"}\n"), "f.jsonl"); err == nil ||
		!strings.Contains(err.Error(), "--batch-file f.jsonl line 2: give exactly one of") {
		t.Errorf("a line with both: %v", err)
	}
}
