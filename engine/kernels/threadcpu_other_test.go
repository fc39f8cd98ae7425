//go:build !linux

package kernels

import "time"

// threadCPU is unavailable here: benchmarks report wall time only.
func threadCPU() (time.Duration, bool) { return 0, false }
