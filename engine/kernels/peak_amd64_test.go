package kernels

import (
	"runtime"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
)

//go:noescape
func peakVPDPBUSD(n int)

//go:noescape
func peakVPDPBUSDBcst(n int, x *byte, eight bool)

//go:noescape
func peakGather(n int, src *byte, stride int)

//go:noescape
func peakClock(n int)

// BenchmarkVPDPBUSDPeak measures one core's rate of the instruction every rows and tiled kernel spends its time
// on, VPDPBUSD on 512-bit registers (16 independent accumulators, register and broadcast operands; and 8, as the
// transposing kernels have), of 16-dword gathers (the other way to put 16 weight rows in the lanes), and the
// clock (a chain of dependent adds, one per cycle): the bound of a k-row product is k·params/64 VPDPBUSD
// (docs/performance-log.md, issue 40). The rates are per second of the thread's CPU time (a shared machine's
// time slices do not count), and per cycle.
func BenchmarkVPDPBUSDPeak(b *testing.B) {
	if !useVNNI {
		b.Skip("no AVX-512 VNNI")
	}
	const iters = 1 << 16
	ghz := 0.0
	// rate runs loop (per instructions) and reports its instructions per ns of CPU time, and per cycle.
	rate := func(name string, per int, loop func()) {
		b.Run(name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			start, n := testutil.ThreadCPU(), 0
			for b.Loop() {
				loop()
				n++
			}
			r := float64(n*iters*per) / float64(testutil.ThreadCPU()-start)
			if name == "clock" {
				ghz = r
				b.ReportMetric(r, "GHz")
				return
			}
			b.ReportMetric(r, "Ginstr/s")
			b.ReportMetric(r/ghz, "instr/cycle")
		})
	}
	rate("clock", 16, func() { peakClock(iters) })
	rate("vpdpbusd", 16, func() { peakVPDPBUSD(iters) })
	var x [64]byte
	rate("vpdpbusd-bcst", 16, func() { peakVPDPBUSDBcst(iters, &x[0], false) })
	rate("vpdpbusd-bcst-8acc", 16, func() { peakVPDPBUSDBcst(iters, &x[0], true) })
	const stride = 144 * 6 // a Q4_K row of 1536 columns
	rows := make([]byte, 16*stride)
	rate("gather16", 8, func() { peakGather(iters, &rows[0], stride) })
}
