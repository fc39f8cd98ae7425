package engine

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/layerstream/layerstream/internal/sections"
)

// Streamed shards are mapped (shards.Set.Map): if a shard file is truncated, or its storage goes away, while
// compute reads it, the read faults (SIGBUS). Compute that reads weights runs under guardMapped, which turns
// such a fault into an error naming the shard, instead of the crash Go makes of it by default.

// mappedFault is the error of a fault reading a mapped shard.
type mappedFault struct {
	unit string
	addr uintptr
}

func (f *mappedFault) Error() string {
	return fmt.Sprintf("reading shard %s faulted at %#x: its file was truncated or its storage went away while mapped; "+
		"run layerstream split again, and see TROUBLESHOOTING.md %q", f.unit, f.addr, sections.SIGBUS)
}

// guardMapped runs fn with faults turned into panics (debug.SetPanicOnFault, here and in kernels.ParallelFor's workers)
// and returns fn's error, or a fault at an address inside one of the set's shard mappings as a *mappedFault.
// Any other panic goes on up.
func (s *weightStore) guardMapped(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if re, ok := r.(runtime.Error); ok {
			if a, ok := re.(interface{ Addr() uintptr }); ok {
				if unit, ok := s.set.MappedAt(a.Addr()); ok {
					err = &mappedFault{unit: unit, addr: a.Addr()}
					return
				}
			}
		}
		panic(r)
	}()
	return fn()
}
