//go:build !linux

package main

// resetPeakRSS reports that the peak resident set size is read on Linux only.
func resetPeakRSS() bool { return false }

// peakRSS is 0: not measured.
func peakRSS() int64 { return 0 }
