//go:build unix

package testutil

import (
	"syscall"
	"time"
)

// ProcessCPU is the process's user+system CPU time: on a shared, loaded machine it is steadier than wall time.
func ProcessCPU() time.Duration { return rusage(syscall.RUSAGE_SELF) }

// ThreadCPU is the calling thread's user+system CPU time (getrusage RUSAGE_THREAD: Linux and FreeBSD; 0
// elsewhere), for a benchmark that locks its goroutine to a thread and runs its kernels there.
func ThreadCPU() time.Duration { return rusage(1) }

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
