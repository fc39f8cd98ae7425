package engine

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/quant"
)

// TestPanelsResident: a resident engine (Options.NoPanels unset), whose decoder layers and output projection the store
// packs in panels for the host kernels (weightStore.packPanels), gives a streamed engine's logits bit for bit,
// over a prompt and verifications of 1, 5 and 8 positions, for K-quant GGUFs (the tied one keeps its embedding
// in rows).
func TestPanelsResident(t *testing.T) {
	for _, name := range []string{"Q4_K", "Q4_K_M", "Q6_K", "Q4_K-tied"} {
		t.Run(name, func(t *testing.T) {
			model := filepath.Join("..", "gguf", "testdata", "tiny", "tiny-llama-"+name+".gguf")
			dir := filepath.Join(t.TempDir(), "s")
			streamed := open(t, model, Options{ShardDir: dir})
			resident := open(t, model, Options{ShardDir: dir, Resident: true})
			packed := 0
			for _, w := range append(resident.store.resident, resident.store.head) {
				if w != nil && w.panelled {
					packed++
				}
			}
			if want := kernels.Packs(quant.Q4_K); want != (packed > 0) {
				t.Fatalf("%d units packed in panels; this CPU packs: %v", packed, want)
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
