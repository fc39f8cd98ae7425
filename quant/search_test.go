package quant

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// blockErrs returns each block's weighted squared error of enc against x.
func blockErrs(t *testing.T, enc []byte, x, w []float32, cols int) []float64 {
	t.Helper()
	y := make([]float32, len(x))
	if err := Dequantize(Q8_0, y, enc); err != nil {
		t.Fatal(err)
	}
	errs := make([]float64, len(x)/QK)
	for i := range x {
		wi := 1.0
		if w != nil {
			wi = float64(w[i%cols])
		}
		d := float64(x[i]) - float64(y[i])
		errs[i/QK] += wi * d * d
	}
	return errs
}

// TestQuantizeQ8_0Search checks the search against Quantize's round-to-nearest: never a larger error in any
// block, a smaller total (by a clear margin, so that a search that does nothing fails), the same bytes for an
// all-zero block, and with importances, the heavily weighted column much closer than round-to-nearest has it.
func TestQuantizeQ8_0Search(t *testing.T) {
	const rows, cols = 64, 256
	r := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.02)
	}
	clear(x[:QK]) // an all-zero block
	rtn := make([]byte, len(x)/QK*34)
	if err := Quantize(Q8_0, rtn, x); err != nil {
		t.Fatal(err)
	}
	imp := make([]float32, cols)
	for i := range imp {
		imp[i] = 1
	}
	imp[37] = 1e4 // an outlier input channel
	for _, w := range [][]float32{nil, imp} {
		got := make([]byte, len(rtn))
		if err := QuantizeQ8_0Search(got, x, cols, w); err != nil {
			t.Fatal(err)
		}
		if string(got[:34]) != string(rtn[:34]) {
			t.Errorf("all-zero block: % x, want % x", got[:34], rtn[:34])
		}
		eg, er := blockErrs(t, got, x, w, cols), blockErrs(t, rtn, x, w, cols)
		var sg, sr float64
		for b := range eg {
			if eg[b] > er[b]*(1+1e-9) {
				t.Fatalf("weights %v: block %d: error %g, round-to-nearest's %g", w != nil, b, eg[b], er[b])
			}
			sg += eg[b]
			sr += er[b]
		}
		t.Logf("importances %v: weighted squared error %.3g, round-to-nearest %.3g (%.2f)", w != nil, sg, sr, sg/sr)
		if goal := map[bool]float64{false: 0.82, true: 0.2}[w != nil]; sg > goal*sr {
			t.Errorf("importances %v: error %.3g is %.2f of round-to-nearest's, want ≤ %.2f", w != nil, sg, sg/sr, goal)
		}
	}
	// Uneven importances that sum to zero in a block fall back to uniform weights.
	zero := make([]float32, cols)
	a, b := make([]byte, len(rtn)), make([]byte, len(rtn))
	if err := QuantizeQ8_0Search(a, x, cols, zero); err != nil {
		t.Fatal(err)
	}
	if err := QuantizeQ8_0Search(b, x, cols, nil); err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Error("all-zero importances encode differently from none")
	}
	for _, c := range []struct {
		dst, n, cols, imp int
		want              string
	}{
		{34, 32, 48, 0, "rows of 48"},
		{34, 64, 64, 0, "into 34 bytes"},
		{34, 32, 32, 1, "1 importances"},
	} {
		var w []float32
		if c.imp > 0 {
			w = make([]float32, c.imp)
		}
		err := QuantizeQ8_0Search(make([]byte, c.dst), make([]float32, c.n), c.cols, w)
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
		if err := QuantizeQ8_0Search(dst, x, cols, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(x)), "ns/weight")
}
