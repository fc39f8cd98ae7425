package reference

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
)

// Tolerance is what a comparison must meet. A zero field is not checked.
type Tolerance struct {
	// MaxAbs bounds the largest absolute difference.
	MaxAbs float64
	// MinCosine bounds the cosine similarity from below.
	MinCosine float64
}

// String describes the tolerance for reports, e.g. "|d|<=1e-04 cos>=0.99999".
func (t Tolerance) String() string {
	var parts []string
	if t.MaxAbs > 0 {
		parts = append(parts, fmt.Sprintf("|d|<=%.0e", t.MaxAbs))
	}
	if t.MinCosine > 0 {
		parts = append(parts, fmt.Sprintf("cos>=%g", t.MinCosine))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

// QuantizedLogitTolerance is the agreement verify demands of the logits of a checkpoint holding block-quantized
// matrices (a GGUF file): the reference multiplies the dequantized weights in float64, while the engine, as
// llama.cpp does, rounds each product's activations to 8 bits, which moves logits by up to a few units
// (SmolLM2-135M, five prompts: Q8_0 cosine 0.99943-0.99992, max |d| 0.93-1.49; Q4_K_M 0.99814-0.99952, 1.39-4.03),
// so only the direction is checked, tighter than bf16's.
var QuantizedLogitTolerance = Tolerance{MinCosine: 0.995}

// QuantizedDecodeTolerance is how far verify lets a decode step's log-probabilities be from one full forward pass
// over a block-quantized checkpoint: the attention sums in another order, and where a sum moves by one ulp an
// activation's 8-bit rounding can flip, so the same engine parts from itself by up to about half a nat (SmolLM2-135M
// Q4_K_M and Q8_0, six prompts: 0 to 0.46), where a key/value cache that is not filled moves them by several.
var QuantizedDecodeTolerance = Tolerance{MaxAbs: 1}

// LogitTolerance is the agreement verify demands of the logits computed in dtype: float32 matches the float64
// reference to 1e-4 absolute (and cosine 0.99999); bf16 and f16 round every weight and activation to 8 or 11
// mantissa bits, so only the direction is checked: cosine ≥ 0.99.
func LogitTolerance(dtype checkpoint.DType) Tolerance {
	if dtype == checkpoint.F32 {
		return Tolerance{MaxAbs: 1e-4, MinCosine: 0.99999}
	}
	return Tolerance{MinCosine: 0.99}
}

// Diff summarises how far one tensor (rows of values, e.g. positions × vocab) is from another.
type Diff struct {
	Name    string // e.g. "logits" or "layer.3"
	Against string // what was compared, e.g. "streamed vs reference"
	Cosine  float64
	MaxAbs  float64
	// Row and Col locate the largest difference, or the first NaN/Inf: position and token id for logits.
	Row, Col int
	// NonFinite counts NaN and ±Inf values in got; any makes the comparison fail.
	NonFinite int
	Tol       Tolerance
}

// OK reports whether the comparison meets its tolerance and every value is finite.
func (d Diff) OK() bool {
	if d.NonFinite > 0 || math.IsNaN(d.Cosine) || math.IsNaN(d.MaxAbs) {
		return false
	}
	if d.Tol.MaxAbs > 0 && d.MaxAbs > d.Tol.MaxAbs {
		return false
	}
	return d.Tol.MinCosine <= 0 || d.Cosine >= d.Tol.MinCosine
}

// Compare measures got against want (same shape: rows × columns) over all values together: the cosine similarity
// of the flattened tensors and the largest absolute difference, located.
func Compare[G, W float32 | float64](name, against string, got [][]G, want [][]W, tol Tolerance) (Diff, error) {
	d := Diff{Name: name, Against: against, Tol: tol, Row: -1, Col: -1}
	if len(got) != len(want) {
		return d, fmt.Errorf("%s (%s): %d rows, want %d", name, against, len(got), len(want))
	}
	var dot, gg, ww float64
	firstR, firstC := -1, -1
	for r := range got {
		if len(got[r]) != len(want[r]) {
			return d, fmt.Errorf("%s (%s): row %d has %d values, want %d", name, against, r, len(got[r]), len(want[r]))
		}
		for c, gv := range got[r] {
			g, w := float64(gv), float64(want[r][c])
			if math.IsNaN(g) || math.IsInf(g, 0) {
				if d.NonFinite == 0 {
					firstR, firstC = r, c
				}
				d.NonFinite++
				continue
			}
			dot += g * w
			gg += g * g
			ww += w * w
			if diff := math.Abs(g - w); diff > d.MaxAbs || d.Row < 0 {
				d.MaxAbs, d.Row, d.Col = diff, r, c
			}
		}
	}
	if d.NonFinite > 0 { // located at the first NaN/Inf
		d.MaxAbs, d.Row, d.Col = math.NaN(), firstR, firstC
	}
	switch {
	case d.NonFinite > 0:
		d.Cosine = math.NaN()
	case gg == 0 && ww == 0:
		d.Cosine = 1
	case gg == 0 || ww == 0:
		d.Cosine = 0
	default:
		d.Cosine = dot / math.Sqrt(gg*ww)
	}
	return d, nil
}

// WriteTable prints diffs of logits as an aligned table, one line each, ending with a verdict line. It returns whether every
// diff is within its tolerance.
func WriteTable(w io.Writer, diffs []Diff) (bool, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-26s %-12s %-10s %-14s %-24s %s\n", "stage", "compared", "cosine", "max|diff|", "at", "tolerance", "result")
	all := true
	for _, d := range diffs {
		result := "ok"
		if !d.OK() {
			result, all = "FAIL", false
			if d.NonFinite > 0 {
				result = fmt.Sprintf("FAIL (%d NaN/Inf)", d.NonFinite)
			}
		}
		at := "-"
		if d.Row >= 0 {
			at = fmt.Sprintf("pos %d id %d", d.Row, d.Col)
		}
		fmt.Fprintf(&b, "%-10s %-26s %-12.8f %-10.2e %-14s %-24s %s\n", d.Name, d.Against, d.Cosine, d.MaxAbs, at, d.Tol, result)
	}
	if all {
		b.WriteString("verify: all comparisons within tolerance\n")
	} else {
		b.WriteString("verify: MISMATCH beyond tolerance\n")
	}
	_, err := io.WriteString(w, b.String())
	return all, err
}
