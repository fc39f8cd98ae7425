package kernels

import (
	"syscall"
	"time"
)

// threadCPU is the CPU time the calling thread has used (getrusage RUSAGE_THREAD), for benchmarks that run on
// one locked thread: unlike wall time, it does not count the time other work on a shared machine takes the
// core.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
