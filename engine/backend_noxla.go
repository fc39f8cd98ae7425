//go:build !xla

package engine

import (
	"github.com/gomlx/gomlx/backends"

	"github.com/layerstream/layerstream/guard"
)

// xlaBuilt reports whether this binary has the XLA backend (the xla build tag).
const xlaBuilt = false

func newXLABackend(o Options) (backends.Backend, guard.DeviceCaps, error) {
	return nil, guard.DeviceCaps{}, errNoXLA(o.Device)
}
