package quant

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// blockErrs returns each block's squared error of enc against x.
func blockErrs(t *testing.T, enc []byte, x []float32) []float64 {
	t.Helper()
	y := make([]float32, len(x))
	if err := Dequantize(Q8_0, y, enc); err != nil {
		t.Fatal(err)
	}
	errs := make([]float64, len(x)/QK)
	for i := range x {
		d := float64(x[i]) - float64(y[i])
		errs[i/QK] += d * d
	}
	return errs
}

// TestQuantizeQ8_0Search checks the search against Quantize's round-to-nearest: never a larger error in any
// block, a smaller total on Gaussian weights by a clear margin (so that a search that does nothing fails), the
// same bytes for an all-zero block, an exact encoding of a block that a coarser grid holds, and clear errors for
// bad sizes.
func TestQuantizeQ8_0Search(t *testing.T) {
	const rows, cols = 64, 256
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.02)
	}
	clear(x[:QK]) // an all-zero block
	for j := range QK {
		x[QK+j] = float32(7*(j-16)) / 32 // multiples of 7/32 up to 3.5: d = 3.5/112 = 1/32 holds them, float16 too
	}
	rtn := make([]byte, len(x)/QK*34)
	if err := Quantize(Q8_0, rtn, x); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(rtn))
	if err := QuantizeQ8_0Search(got, x, cols); err != nil {
		t.Fatal(err)
	}
	if string(got[:34]) != string(rtn[:34]) {
		t.Errorf("all-zero block: % x, want % x", got[:34], rtn[:34])
	}
	eg, er := blockErrs(t, got, x), blockErrs(t, rtn, x)
	if eg[1] != 0 || er[1] == 0 {
		t.Errorf("multiples of 7/32: squared error %g (round-to-nearest %g), want 0", eg[1], er[1])
	}
	var sg, sr float64
	for b := range eg {
		if eg[b] > er[b]*(1+1e-9) {
			t.Fatalf("block %d: error %g, round-to-nearest's %g", b, eg[b], er[b])
		}
		if b >= 2 {
			sg += eg[b]
			sr += er[b]
		}
	}
	t.Logf("squared error %.3g, round-to-nearest %.3g (%.2f)", sg, sr, sg/sr)
	if sg > 0.82*sr {
		t.Errorf("squared error %.3g is %.2f of round-to-nearest's, want ≤ 0.82", sg, sg/sr)
	}
	for _, c := range []struct {
		dst, n, cols int
		want         string
	}{
		{34, 32, 48, "rows of 48"},
		{34, 64, 64, "into 34 bytes"},
		{34, 32, 0, "rows of 0"},
	} {
		err := QuantizeQ8_0Search(make([]byte, c.dst), make([]float32, c.n), c.cols)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c, err, c.want)
		}
	}
}

func BenchmarkQuantizeQ8_0Search(b *testing.B) {
	const cols = 2048
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 64*cols)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	dst := make([]byte, len(x)/QK*34)
	b.SetBytes(int64(len(x)))
	for b.Loop() {
		if err := QuantizeQ8_0Search(dst, x, cols); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/weight")
}
