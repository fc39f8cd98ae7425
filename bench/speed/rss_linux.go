package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// resetPeakRSS resets the process's peak resident set size (VmHWM) to its current one by writing 5 to
// /proc/self/clear_refs (Linux 4.0 and later), and reports whether it could.
func resetPeakRSS() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// peakRSS is the process's peak resident set size in bytes since the last resetPeakRSS (VmHWM in
// /proc/self/status), or 0 where it cannot be read.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
