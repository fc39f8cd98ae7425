package hffixture

import "testing"

// TestSmolLM2Reference checks the committed SmolLM2 references are complete and self-consistent: 12 prompts, 64
// greedy ids each, per-position summaries covering prompt + greedy ids, the argmax at the position before each greedy
// id equal to it wherever the margin is clear, top-k rows sorted, full rows agreeing with the summaries.
func TestSmolLM2Reference(t *testing.T) {
	ref, err := LoadSmolLM2Reference()
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Prompts) != 12 {
		t.Fatalf("%d prompts, want 12", len(ref.Prompts))
	}
	for _, p := range ref.Prompts {
		if len(p.GreedyIDs) != 64 || len(p.PromptIDs) == 0 {
			t.Fatalf("prompt %d: %d prompt ids, %d greedy ids", p.Index, len(p.PromptIDs), len(p.GreedyIDs))
		}
		n := len(p.PromptIDs)
		for j, g := range p.GreedyIDs {
			if pos := n - 1 + j; p.Margin[pos] > 1e-3 && p.Argmax[pos] != g {
				t.Errorf("prompt %d: greedy id %d is %d but the teacher-forced argmax is %d (margin %g)", p.Index, j, g, p.Argmax[pos], p.Margin[pos])
			}
		}
		if p.TopIDs != nil {
			k := ref.TopK
			if len(p.TopIDs) != k*(n+64) || len(p.TopValues) != len(p.TopIDs) {
				t.Fatalf("prompt %d: top-k tensors of %d entries", p.Index, len(p.TopIDs))
			}
			for pos := 0; pos < n+64; pos++ {
				row := p.TopValues[pos*k : (pos+1)*k]
				if p.TopIDs[pos*k] != p.Argmax[pos] || row[0] != p.MaxLogit[pos] || row[0]-row[1] != p.Margin[pos] {
					t.Fatalf("prompt %d position %d: top-k row disagrees with argmax/max/margin", p.Index, pos)
				}
			}
		}
	}
	if len(ref.FullRows) != 3 {
		t.Fatalf("%d full rows, want 3", len(ref.FullRows))
	}
	for rc, row := range ref.FullRows {
		p := ref.Prompts[rc[0]]
		if got := argmax(row); int64(got) != p.Argmax[rc[1]] || row[got] != p.MaxLogit[rc[1]] {
			t.Errorf("full row %v: argmax %d (%g), summary %d (%g)", rc, got, row[got], p.Argmax[rc[1]], p.MaxLogit[rc[1]])
		}
	}
}
