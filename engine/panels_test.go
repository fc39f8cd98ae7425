package engine

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/quant"
)

// TestPanelsResident: a resident engine (by default: Options.NoPanels unset), whose decoder layers and output
// projection the store packs in panels for the host kernels (weightStore.packPanels), gives a streamed engine's
// logits bit for bit, over a prompt and verifications of 1, 5 and 8 positions, for K-quant GGUFs (the tied one
// keeps its embedding in rows). A streamed engine packs nothing (its output projection stays mapped), nor does a
// resident one with NoPanels.
func TestPanelsResident(t *testing.T) {
	packed := func(e *Engine) int {
		n := 0
		for _, w := range append(e.store.resident, e.store.head) {
			if w != nil && w.panelled {
				n++
			}
		}
		return n
	}
	for _, name := range []string{"Q4_K", "Q4_K_M", "Q6_K", "Q4_K-tied"} {
		t.Run(name, func(t *testing.T) {
			model := filepath.Join("..", "gguf", "testdata", "tiny", "tiny-llama-"+name+".gguf")
			dir := filepath.Join(t.TempDir(), "s")
			streamed := open(t, model, Options{ShardDir: dir})
			resident := open(t, model, Options{ShardDir: dir, Resident: true})
			rows := open(t, model, Options{ShardDir: dir, Resident: true, NoPanels: true})
			if n, want := packed(resident), kernels.Packs(quant.Q4_K); want != (n > 0) {
				t.Fatalf("%d units packed in panels; this CPU packs: %v", n, want)
			}
			if n, m := packed(streamed), packed(rows); n+m > 0 {
				t.Fatalf("units packed in panels: %d streamed, %d resident with NoPanels; want none", n, m)
			}
			ids := make([]int, 40)
			for i := range ids {
				ids[i] = (i*7919 + 13) % streamed.cfg.VocabSize
			}
			for _, chunk := range []int{1, 5, 8} {
				want, got := verifyPass(t, streamed, ids[:9], ids[9:], chunk), verifyPass(t, resident, ids[:9], ids[9:], chunk)
				for p := range want {
					for j := range want[p] {
						if math.Float32bits(got[p][j]) != math.Float32bits(want[p][j]) {
							t.Fatalf("chunks of %d: position %d, logit %d: resident %v, streamed %v", chunk, p, j, got[p][j], want[p][j])
						}
					}
				}
			}
		})
	}
}
