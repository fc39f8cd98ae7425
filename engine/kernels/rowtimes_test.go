package kernels

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/engine/kernels/ggml"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/quant"
)

// TestRowTimes prints the thread CPU time of one product of a [8960×1536] matrix (12 of them in turn, so that the
// weights come from memory) by each number of input rows in LAYERSTREAM_ROWTIMES_ROWS (comma-separated; default
// 1-32 in steps), median of LAYERSTREAM_ROWTIMES_REPS (default 7), for the cases named in LAYERSTREAM_ROWTIMES
// (comma-separated: a block type or "mxfp4" for LinearQuant; "ggml:" and a type for LinearQuantGGML with a batch
// of the row count; "ggml:f32" for LinearGGMLF32 and "ggml:f32rows" for its loops before issue 40, on two float32
// matrices). Run it with GOMAXPROCS=1 (docs/performance-log.md, issue 40); skipped without LAYERSTREAM_ROWTIMES.
func TestRowTimes(t *testing.T) {
	names := os.Getenv("LAYERSTREAM_ROWTIMES")
	if names == "" {
		t.Skip("LAYERSTREAM_ROWTIMES not set")
	}
	reps := 7
	if v, err := strconv.Atoi(os.Getenv("LAYERSTREAM_ROWTIMES_REPS")); err == nil {
		reps = v
	}
	rowCounts := []int{1, 2, 3, 4, 5, 8, 12, 16, 24, 32}
	if v := os.Getenv("LAYERSTREAM_ROWTIMES_ROWS"); v != "" {
		rowCounts = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			rowCounts = append(rowCounts, n)
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const in, out = 1536, 8960
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range strings.Split(names, ",") {
		typName, ggmlArith := strings.CutPrefix(name, "ggml:")
		var product func(y, x []float32, m int)
		mats := 12
		switch {
		case typName == "f32" || typName == "f32rows":
			mats = 2 // 55 MB each: from memory either way
			ws := make([][]float32, mats)
			for i := range ws {
				ws[i] = make([]float32, in*out)
				for j := range ws[i] {
					ws[i][j] = rng.Float32() - 0.5
				}
			}
			product = func(y, x []float32, m int) {
				if typName == "f32" {
					LinearGGMLF32(y, x, ws[m], nil, in, len(x)/in)
					return
				}
				rowwiseF32(y, x, ws[m], in)
			}
		default:
			ws := make([]QuantMatrix, mats)
			for i := range ws {
				if typName == "mxfp4" {
					ws[i] = randomMXFP4(t, rng, out, in)
					continue
				}
				typ, err := quant.Parse(typName)
				if err != nil {
					t.Fatal(err)
				}
				ws[i] = randomQuantMatrix(t, rng, typ, out, in)
			}
			product = func(y, x []float32, m int) {
				if ggmlArith {
					LinearQuantGGML(y, x, ws[m], nil, len(x)/in, false)
				} else {
					LinearQuant(y, x, ws[m], nil)
				}
			}
		}
		line := name
		for _, rows := range rowCounts {
			x, y := make([]float32, rows*in), make([]float32, rows*out)
			for i := range x {
				x[i] = rng.Float32() - 0.5
			}
			var times []time.Duration
			for range reps {
				t0 := testutil.ThreadCPU()
				for m := range mats {
					product(y, x, m)
				}
				times = append(times, (testutil.ThreadCPU()-t0)/time.Duration(mats))
			}
			slices.Sort(times)
			line += fmt.Sprintf(" %d:%.3f", rows, float64(times[len(times)/2].Nanoseconds())/1e6)
		}
		fmt.Println(line)
	}
}

// rowwiseF32 is LinearGGMLF32's loops before issue 40: one input row after another, each over every weight row.
func rowwiseF32(y, x, w []float32, in int) {
	rows, out := len(x)/in, len(w)/in
	dot := ggml.VecDot
	if rows >= 2 {
		dot = ggml.Dot16
	}
	for r := range rows {
		for j := range out {
			y[r*out+j] = dot(w[j*in:(j+1)*in], x[r*in:(r+1)*in])
		}
	}
}
