package reference

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
)

func TestCompare(t *testing.T) {
	want := [][]float64{{1, 2, 3}, {-1, 0, 4}}
	got := [][]float32{{1, 2, 3.00005}, {-1, 0, 4}}
	f32 := LogitTolerance(checkpoint.F32)
	d, err := Compare("logits", "engine vs reference", got, want, f32)
	if err != nil {
		t.Fatal(err)
	}
	if !d.OK() || d.Row != 0 || d.Col != 2 || math.Abs(d.MaxAbs-5e-5) > 1e-6 || d.Cosine < 0.99999 {
		t.Fatalf("close values: %+v", d)
	}
	got[1][1] = 0.01 // beyond 1e-4 but the direction barely moves: fails f32, passes bf16
	d, _ = Compare("logits", "x", got, want, f32)
	if d.OK() || d.Row != 1 || d.Col != 1 {
		t.Fatalf("f32 should fail: %+v", d)
	}
	if d, _ = Compare("logits", "x", got, want, LogitTolerance(checkpoint.BF16)); !d.OK() {
		t.Fatalf("bf16 should pass: %+v", d)
	}
	got[1][0] = float32(math.NaN())
	d, _ = Compare("logits", "x", got, want, Tolerance{})
	if d.OK() || d.NonFinite != 1 || d.Row != 1 || d.Col != 0 {
		t.Fatalf("NaN must fail even without a tolerance: %+v", d)
	}
	if _, err := Compare("logits", "x", got[:1], want, f32); err == nil {
		t.Fatal("row count mismatch accepted")
	}
	if _, err := Compare("logits", "x", [][]float32{{1}, {2}}, want, f32); err == nil {
		t.Fatal("column mismatch accepted")
	}

	var buf bytes.Buffer
	ok, err := WriteTable(&buf, []Diff{{Name: "layer.0", Against: "a vs b", Cosine: 1, Tol: LogitTolerance(checkpoint.F32)}, d})
	if err != nil || ok {
		t.Fatalf("table ok=%v err=%v", ok, err)
	}
	out := buf.String()
	for _, s := range []string{"layer.0", "FAIL (1 NaN/Inf)", "pos 1 id 0", "MISMATCH"} {
		if !strings.Contains(out, s) {
			t.Fatalf("table lacks %q:\n%s", s, out)
		}
	}
}
