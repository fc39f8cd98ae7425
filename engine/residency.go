package engine

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/kvcache"
)

// Memory-aware residency. A model streamed from disk (past the page cache: Options.DirectIO) reads every layer
// for every token, although part of it could stay in memory between tokens. Under Options.MemoryBudget the
// store keeps as many decoder layers resident as the budget holds, loaded once, and streams the others; the
// resident ones are spread among the streamed (layer i of n is resident when ⌊(i+1)·k/n⌋ > ⌊i·k/n⌋ for k
// resident layers), so that the disk reads the next streamed layer while resident layers compute.

// MemoryBudget values besides a size in bytes: MemoryBudgetAuto (0, the default) and MemoryBudgetOff.
const (
	MemoryBudgetAuto int64 = 0
	MemoryBudgetOff  int64 = -1
)

// residencyMargin is the memory the automatic budget leaves free beside the engine's buffers, at most a quarter
// of the memory available: the key/value cache, activations, the Go runtime and the rest of the machine.
const residencyMargin = 512 << 20

// residentBudget resolves Options.MemoryBudget: the bytes of decoder layers the store may keep resident beside
// its stream, or 0 for none. Resident layers pay only where the stream does not map the shards from the page
// cache (DirectIO, or NoMap); the automatic budget applies when the model is larger than memory (DirectIOAuto
// chose O_DIRECT): nine tenths of the memory available, less the stream's host buffers (expertStore.footprint where
// layers stream their routed experts) and residencyMargin.
func (s *weightStore) residentBudget() int64 {
	o := s.opts
	switch {
	case o.Resident || o.MemoryBudget == MemoryBudgetOff || o.GraphDecode:
		return 0
	case o.MemoryBudget > 0 && (o.DirectIO == DirectIOOn || o.NoMap):
		return o.MemoryBudget
	case o.MemoryBudget > 0:
		slog.Debug("memory budget: the shards are mapped from the page cache, which keeps what fits; no layer is held apart")
		return 0
	case !o.largerThanMemory:
		return 0
	}
	avail, err := availableMemory()
	if err != nil {
		return 0
	}
	// The stream's own footprint: its Prefetch+1 host buffers of a layer each, counted three times over (measured
	// on the Llama-3-70B shape's q4 shards, 480 MB a layer: 4.75 GB resident while streaming every layer with
	// three buffers, the Go heap's growth beside its live buffers included).
	stream := 3 * int64(o.Prefetch+1) * s.layerBytes()
	if s.experts != nil {
		stream = s.experts.footprint()
	}
	return max(0, avail.Bytes/10*9-stream-s.kvEstimate()-min(residencyMargin, avail.Bytes/4))
}

// residencyKVPositions is the context the automatic budget keeps room for in the key/value cache: one
// sequence of the model's context, at most this many positions.
const residencyKVPositions = 4096

// kvEstimate is the memory of one sequence's key/value cache at min(context, residencyKVPositions) positions,
// every layer full (the batch loop allocates its cache after the budget is spent).
func (s *weightStore) kvEstimate() int64 {
	p := s.plan
	c := kvcache.Config{Layers: len(p.Layers), Batch: 1, KVHeads: p.KVHeads, Capacity: min(p.Context, residencyKVPositions),
		HeadDim: p.HeadDim, Half: s.opts.KVCache == KVCacheF16, Latent: latentLayers(p)}
	c.Dims, c.Share = cacheLayout(p)
	return c.Bytes()
}

// residentLayers returns which decoder layers the store keeps resident for a budget of bytes: as many as fit,
// spread evenly among the streamed ones.
func (s *weightStore) residentLayers(budget int64) []bool {
	n := s.cfg.NumHiddenLayers
	per := s.layerBytes()
	if budget <= 0 || per <= 0 {
		return make([]bool, n)
	}
	return spread(n, int(min(budget/per, int64(n))))
}

// spread returns which of n layers to keep when keeping k, spread evenly: layer i when ⌊(i+1)·k/n⌋ > ⌊i·k/n⌋.
func spread(n, k int) []bool {
	keep := make([]bool, n)
	for i := range n {
		keep[i] = (i+1)*k/n > i*k/n
	}
	return keep
}

// describeResidency logs what the store keeps and streams.
func (s *weightStore) describeResidency(keep []bool, budget int64) {
	var resident, streamed int
	var marks strings.Builder
	for _, r := range keep {
		if r {
			resident++
			marks.WriteByte('R')
		} else {
			streamed++
			marks.WriteByte('.')
		}
	}
	if resident == 0 {
		return
	}
	per := s.layerBytes()
	slog.Info(fmt.Sprintf("memory budget %s: %d decoder layers resident (%s), %d streamed from disk per token (%s)",
		bytesize.Format(budget), resident, bytesize.Format(int64(resident)*per), streamed, bytesize.Format(int64(streamed)*per)),
		"layers", marks.String())
}
