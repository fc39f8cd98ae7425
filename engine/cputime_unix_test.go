//go:build unix

package engine

import (
	"syscall"
	"time"
)

// cpuTime is the process's user+system CPU time: on a shared, loaded machine it is steadier than wall time
// (BenchmarkTreePass).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
