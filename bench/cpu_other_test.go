//go:build !unix

package bench

import "time"

// cpuTime is 0 here (no getrusage): the CPU-time figures read 0.
func cpuTime() time.Duration { return 0 }
