package quant

import (
	"math/rand/v2"
	"slices"
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
	if err := QuantizeQ8_0Search(got, x, cols, nil); err != nil {
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
		err := QuantizeQ8_0Search(make([]byte, c.dst), make([]float32, c.n), c.cols, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c, err, c.want)
		}
	}
}

// TestQuantizeQ8_0SearchImportance: with one column 10⁴ times as important as the others, its weights land much
// closer than round-to-nearest and the unweighted search put them, no block's weighted error exceeds
// round-to-nearest's, all-zero importances encode as none do, and a wrong count is an error.
func TestQuantizeQ8_0SearchImportance(t *testing.T) {
	const rows, cols, hot = 64, 256, 37
	r := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, rows*cols)
	for i := range x {
		x[i] = float32(r.NormFloat64() * 0.02)
	}
	imp := make([]float32, cols)
	for i := range imp {
		imp[i] = 1
	}
	imp[hot] = 1e4
	enc := func(w []float32) []float32 {
		b := make([]byte, len(x)/QK*34)
		if err := QuantizeQ8_0Search(b, x, cols, w); err != nil {
			t.Fatal(err)
		}
		y := make([]float32, len(x))
		if err := Dequantize(Q8_0, y, b); err != nil {
			t.Fatal(err)
		}
		return y
	}
	rtnB := make([]byte, len(x)/QK*34)
	if err := Quantize(Q8_0, rtnB, x); err != nil {
		t.Fatal(err)
	}
	rtn := make([]float32, len(x))
	if err := Dequantize(Q8_0, rtn, rtnB); err != nil {
		t.Fatal(err)
	}
	weighted, plain := enc(imp), enc(nil)
	hotErr := func(y []float32) (e float64) {
		for r := range rows {
			d := float64(x[r*cols+hot] - y[r*cols+hot])
			e += d * d
		}
		return e
	}
	blockErr := func(y []float32, b int) (e float64) {
		for i := b * QK; i < (b+1)*QK; i++ {
			d := float64(x[i] - y[i])
			e += float64(imp[i%cols]) * d * d
		}
		return e
	}
	for b := range len(x) / QK {
		if blockErr(weighted, b) > blockErr(rtn, b)*(1+1e-9) {
			t.Fatalf("block %d: weighted error %g, round-to-nearest's %g", b, blockErr(weighted, b), blockErr(rtn, b))
		}
	}
	hw, hp, hr := hotErr(weighted), hotErr(plain), hotErr(rtn)
	t.Logf("the important column's squared error: weighted %.3g, unweighted %.3g, round-to-nearest %.3g", hw, hp, hr)
	if hw > 0.1*hr || hw > 0.1*hp {
		t.Errorf("the important column's squared error %.3g, want ≤ 0.1 of round-to-nearest's %.3g and of the unweighted search's %.3g", hw, hr, hp)
	}
	if !slices.Equal(enc(make([]float32, cols)), plain) {
		t.Error("all-zero importances encode differently from none")
	}
	if err := QuantizeQ8_0Search(make([]byte, 34), make([]float32, 32), 32, []float32{1}); err == nil || !strings.Contains(err.Error(), "1 importances for rows of 32") {
		t.Errorf("one importance for 32 columns: error %v", err)
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
