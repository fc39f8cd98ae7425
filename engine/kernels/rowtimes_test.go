package kernels

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/layerstream/layerstream/engine/kernels/ggml"
	"github.com/layerstream/layerstream/quant"
)

// TestRowTimes prints the thread CPU time of one product of a [8960×1536] matrix (12 of them in turn, so that the
// weights come from memory) by 1 to 32 input rows, median of LAYERSTREAM_ROWTIMES_REPS (default 7), for the
// cases named in LAYERSTREAM_ROWTIMES (comma-separated: a block type, "ggml:" and a type for LinearQuantGGML with
// a batch of the row count, "mxfp4", "ggml:f32" for LinearGGMLF32 and "ggml:f32rows" for its loops before
// issue 40, one input row after another) and the row counts in LAYERSTREAM_ROWTIMES_ROWS (comma-separated); run it with GOMAXPROCS=1 (docs/performance-log.md, issue 40). Skipped
// without LAYERSTREAM_ROWTIMES.
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
	const in, out, mats = 1536, 8960, 12
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range strings.Split(names, ",") {
		typName, ggmlArith := strings.CutPrefix(name, "ggml:")
		if typName == "f32" || typName == "f32rows" {
			rowTimesF32(t, rng, name, typName == "f32rows", rowCounts, reps)
			continue
		}
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
		line := name
		for _, rows := range rowCounts {
			x, y := make([]float32, rows*in), make([]float32, rows*out)
			for i := range x {
				x[i] = rng.Float32() - 0.5
			}
			var times []time.Duration
			for range reps {
				t0 := threadCPU(t)
				for _, w := range ws {
					if ggmlArith {
						LinearQuantGGML(y, x, w, nil, rows, false)
					} else {
						LinearQuant(y, x, w, nil)
					}
				}
				times = append(times, (threadCPU(t)-t0)/mats)
			}
			slices.Sort(times)
			line += fmt.Sprintf(" %d:%.3f", rows, float64(times[len(times)/2].Nanoseconds())/1e6)
		}
		fmt.Println(line)
	}
}

// threadCPU is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID: getrusage counts in ticks).
func threadCPU(t *testing.T) time.Duration {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		t.Fatal(errno)
	}
	return time.Duration(ts.Nano())
}

// rowTimesF32 is TestRowTimes of LinearGGMLF32 (rowwise: its loops before issue 40, one input row after another),
// on two float32 [8960×1536] matrices (55 MB each: from memory either way).
func rowTimesF32(t *testing.T, rng *rand.Rand, name string, rowwise bool, rowCounts []int, reps int) {
	const in, out, mats = 1536, 8960, 2
	ws := make([][]float32, mats)
	for i := range ws {
		ws[i] = make([]float32, in*out)
		for j := range ws[i] {
			ws[i][j] = rng.Float32() - 0.5
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
			t0 := threadCPU(t)
			for _, w := range ws {
				if !rowwise {
					LinearGGMLF32(y, x, w, nil, in, rows)
					continue
				}
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
			times = append(times, (threadCPU(t)-t0)/mats)
		}
		slices.Sort(times)
		line += fmt.Sprintf(" %d:%.3f", rows, float64(times[len(times)/2].Nanoseconds())/1e6)
	}
	fmt.Println(line)
}
