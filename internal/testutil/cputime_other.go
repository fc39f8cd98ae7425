//go:build !unix

package testutil

import "time"

// ProcessCPU is 0 here (no getrusage): CPU-time figures read 0.
func ProcessCPU() time.Duration { return 0 }

// ThreadCPU is 0 here (no getrusage).
func ThreadCPU() time.Duration { return 0 }
