package engine

import (
	"fmt"
	"log/slog"
	"strconv"

	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/memavail"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/shards"
)

// DirectIOMode says when streamed shards are read with O_DIRECT (Options.DirectIO). As a flag.Value it reads
// "auto", or a boolean ("true", "false", "on", "off"); a bare boolean flag means "true".
type DirectIOMode int8

const (
	// DirectIOAuto (the zero value) reads with O_DIRECT when the shard files take more than nine tenths of the
	// memory available to the process (memavail: MemAvailable, bounded by a cgroup's limit), the rest being
	// left to the engine's own buffers, the KV cache and everything else. A page cache too small for the model
	// evicts each layer before its next use, so every token reads the whole model through the cache anyway, and
	// evicts whatever else the machine had cached: a 2.2 GB model under a 1.2 GB limit decoded at 1.78 s/token
	// mapped from the page cache, 1.17 with O_DIRECT. Resident engines read each shard once and keep the page
	// cache.
	DirectIOAuto DirectIOMode = iota
	// DirectIOOn always reads with O_DIRECT.
	DirectIOOn
	// DirectIOOff always reads through the page cache.
	DirectIOOff
)

func (m DirectIOMode) String() string {
	switch m {
	case DirectIOOn:
		return "true"
	case DirectIOOff:
		return "false"
	}
	return "auto"
}

// Set parses a flag value.
func (m *DirectIOMode) Set(s string) error {
	switch s {
	case "auto":
		*m = DirectIOAuto
		return nil
	case "on":
		s = "true"
	case "off":
		s = "false"
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("%q is not auto, true or false", s)
	}
	*m = DirectIOOff
	if b {
		*m = DirectIOOn
	}
	return nil
}

// IsBoolFlag lets the flag stand alone (--direct-io) for true.
func (m *DirectIOMode) IsBoolFlag() bool { return true }

// availableMemory is memavail.Get; tests replace it.
var availableMemory = memavail.Get

// chooseDirectIO resolves DirectIOAuto for set: DirectIOOn when its shard files do not fit in nine tenths of the
// available memory, else DirectIOOff (also where the available memory is unknown).
func chooseDirectIO(set *shards.Set, opts Options) DirectIOMode {
	if opts.Resident {
		return DirectIOOff
	}
	need := set.FileBytes()
	avail, err := availableMemory()
	if err != nil {
		slog.Debug("engine: available memory unknown; shards read through the page cache", "err", err)
		return DirectIOOff
	}
	if need <= avail.Bytes/10*9 {
		return DirectIOOff
	}
	slog.Info("the shards do not fit in the memory available: reading them with O_DIRECT, past the page cache (--direct-io=false to keep it)",
		"shards_MB", need>>20, "available_MB", avail.Bytes>>20, "bound", avail.Source, "see", sections.Anchor(sections.LargerThanRAM))
	return DirectIOOn
}

// residentFits refuses Options.Resident when the units the engine would hold (every shard, as loaded) do not
// fit in nine tenths of the memory available: loading them anyway drives a machine, or a container under its
// cgroup limit, into reclaiming and re-reading pages without end (a 2.2 GB model under a 1.2 GB cgroup limit
// never finished loading, and did not answer SIGTERM meanwhile). Where the available memory is unknown the
// engine tries.
func residentFits(set *shards.Set, opts Options) error {
	if !opts.Resident {
		return nil
	}
	var need int64
	for _, u := range set.Units() {
		need += u.BufferSize()
	}
	avail, err := availableMemory()
	if err != nil || need <= avail.Bytes/10*9 {
		return nil
	}
	return fmt.Errorf("--resident: the model takes %s loaded, but only %s of memory is available (%s); drop --resident to stream the layers, which needs a few layers' worth (see %s)",
		bytesize.Format(need), bytesize.Format(avail.Bytes), avail.Source, sections.Anchor(sections.ResidentTooLarge))
}
