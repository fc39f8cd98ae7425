package quant

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"
)

// TestQuantizeWeightedMatchesGGML: Q4_K and Q4_1 with an importance matrix, byte for byte ggml's own
// quantize_q4_K / quantize_q4_1 given the same matrix (scripts/fixtures/ggml_weighted.py: an outlier column, a
// column of huge importance, a block of zero importances, an all-zero row, an all-positive row); the column that
// matters most lands closer than Quantize (no importances) puts it; bad arguments are refused.
func TestQuantizeWeightedMatchesGGML(t *testing.T) {
	var f struct {
		Cases []struct {
			Type                  string
			Rows, Cols            int
			X, Importance, Blocks string
		}
	}
	b, err := os.ReadFile("testdata/ggml_weighted.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	floats := func(s string) []float32 {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v
	}
	if len(f.Cases) != 2 {
		t.Fatalf("%d cases, want Q4_K and Q4_1", len(f.Cases))
	}
	for _, c := range f.Cases {
		typ, err := Parse(c.Type)
		if err != nil {
			t.Fatal(err)
		}
		x, imp := floats(c.X), floats(c.Importance)
		want, _ := base64.StdEncoding.DecodeString(c.Blocks)
		got := make([]byte, len(want))
		if err := QuantizeWeighted(typ, got, x, c.Cols, imp); err != nil {
			t.Fatal(err)
		}
		bf, _ := typ.Format()
		for i := range got {
			if got[i] != want[i] {
				blk := i / bf.BlockBytes
				t.Fatalf("%s: block %d byte %d = %#02x, ggml %#02x\n got %x\nwant %x", c.Type, blk, i%bf.BlockBytes, got[i], want[i],
					got[blk*bf.BlockBytes:(blk+1)*bf.BlockBytes], want[blk*bf.BlockBytes:(blk+1)*bf.BlockBytes])
			}
		}
		// The most important column (37) against the unweighted encoder.
		plain := make([]byte, len(want))
		if err := Quantize(typ, plain, x); err != nil {
			t.Fatal(err)
		}
		yw, yp := make([]float32, len(x)), make([]float32, len(x))
		if err := Dequantize(typ, yw, got); err != nil {
			t.Fatal(err)
		}
		if err := Dequantize(typ, yp, plain); err != nil {
			t.Fatal(err)
		}
		var ew, ep float64
		for r := range c.Rows {
			i := r*c.Cols + 37
			ew += math.Pow(float64(x[i]-yw[i]), 2)
			ep += math.Pow(float64(x[i]-yp[i]), 2)
		}
		t.Logf("%s: the important column's squared error %.3g weighted, %.3g unweighted", c.Type, ew, ep)
		if ew > 0.25*ep {
			t.Errorf("%s: the important column's squared error %.3g, want well under the unweighted %.3g", c.Type, ew, ep)
		}
	}
	for _, c := range []struct {
		t          Type
		dst, n     int
		cols, imps int
		want       string
	}{
		{Q8_0, 34, 32, 32, 32, "only Q4_K and Q4_1"},
		{Q4_1, 20, 32, 48, 48, "rows of 48"},
		{Q4_1, 19, 32, 32, 32, "into 19 bytes"},
		{Q4_K, 144, 256, 256, 255, "255 importances"},
	} {
		err := QuantizeWeighted(c.t, make([]byte, c.dst), make([]float32, c.n), c.cols, make([]float32, c.imps))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c, err, c.want)
		}
	}
}
