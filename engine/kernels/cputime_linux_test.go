package kernels

import (
	"runtime"
	"syscall"
)

// threadCPU is the calling thread's CPU time in nanoseconds (it locks the goroutine to its thread).
func threadCPU() int64 {
	runtime.LockOSThread()
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
