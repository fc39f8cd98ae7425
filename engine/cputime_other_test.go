//go:build !unix

package engine

import "time"

// cpuTime is unavailable here: 0, and BenchmarkTreePass reports wall time only.
func cpuTime() time.Duration { return 0 }
