package kernels

import (
	"testing"
)

//go:noescape
func peakVPDPBUSD(n int)

//go:noescape
func peakVPDPBUSDBcst(n int, x *byte)

//go:noescape
func peakGather(n int, src *byte, stride int)

//go:noescape
func peakClock(n int)

// BenchmarkVPDPBUSDPeak measures one core's rate of the instruction every rows and tiled kernel spends its time
// on, VPDPBUSD on 512-bit registers (16 independent accumulators, register and broadcast operands), of 16-dword
// gathers (the other way to put 16 weight rows in the lanes), and the clock (a chain of dependent adds, one per
// cycle): the bound of a k-row product is k·params/64 VPDPBUSD (docs/performance-log.md, issue 40).
func BenchmarkVPDPBUSDPeak(b *testing.B) {
	if !useVNNI {
		b.Skip("no AVX-512 VNNI")
	}
	const iters = 1 << 16
	b.Run("clock", func(b *testing.B) {
		for b.Loop() {
			peakClock(iters)
		}
		b.ReportMetric(float64(b.N)*iters*16/b.Elapsed().Seconds()/1e9, "GHz")
	})
	b.Run("vpdpbusd", func(b *testing.B) {
		for b.Loop() {
			peakVPDPBUSD(iters)
		}
		b.ReportMetric(float64(b.N)*iters*16/b.Elapsed().Seconds()/1e9, "Ginstr/s")
	})
	var x [64]byte
	b.Run("vpdpbusd-bcst", func(b *testing.B) {
		for b.Loop() {
			peakVPDPBUSDBcst(iters, &x[0])
		}
		b.ReportMetric(float64(b.N)*iters*16/b.Elapsed().Seconds()/1e9, "Ginstr/s")
	})
	const stride = 144 * 6 // a Q4_K row of 1536 columns
	rows := make([]byte, 16*stride)
	b.Run("gather16", func(b *testing.B) {
		for b.Loop() {
			peakGather(iters, &rows[0], stride)
		}
		b.ReportMetric(float64(b.N)*iters*8/b.Elapsed().Seconds()/1e9, "Ginstr/s")
	})
}
