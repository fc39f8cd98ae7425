package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/synth"
)

func TestBF16ToF32MatchesCheckpoint(t *testing.T) {
	src := []uint16{0, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x7fc1, 0x0001, 0x4049, 0xc2f7}
	raw := make([]byte, 2*len(src))
	for i, v := range src {
		binary.LittleEndian.PutUint16(raw[2*i:], v)
	}
	want := make([]float32, len(src))
	checkpoint.BF16ToF32(want, raw)
	got := make([]float32, len(src))
	bf16ToF32(got, src)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("%#04x: got %v, want %v", src[i], got[i], want[i])
		}
	}
}

func TestWeightChunks(t *testing.T) {
	defer func(c int) { matvecChunks = c }(matvecChunks)
	matvecChunks = 8
	for out, want := range map[int]int{32000: 8, 5632: 8, 172: 4, 7: 7, 11: 1, 1: 1} {
		if got := weightChunks(out); got != want {
			t.Errorf("weightChunks(%d) = %d, want %d", out, got, want)
		}
	}
	if d := (tensorSpec{shape: []int{5632, 2048}}).deviceDims(); d[0]*d[1] != 5632 || d[2] != 2048 {
		t.Errorf("device dims %v do not hold a [5632, 2048] matrix", d)
	}
}

// On the host-kernel path a streamed layer's weight matrices are read where the shard buffer holds them, in
// their stored dtype (no copy, no widening), the buffer stays out of the pool while the layer is in use, and
// the logits equal those of the graphs computing on the widened f32 copy.
// That holds for both ways of getting a shard: mapped (the default) and read into the buffer (NoMap).
func TestHostKernelsReadShardBufferInPlace(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 21, DType: checkpoint.BF16})
	for _, noMap := range []bool{false, true} {
		testHostKernelsInPlace(t, model, noMap)
	}
}

// mappingOf returns the address range where this process maps path (from /proc/self/maps).
func mappingOf(t *testing.T, path string) (lo, hi uintptr) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if !strings.HasSuffix(strings.TrimSpace(line), path) {
			continue
		}
		var a, z uint64
		if _, err := fmt.Sscanf(line, "%x-%x", &a, &z); err != nil {
			t.Fatal(err)
		}
		return uintptr(a), uintptr(z - 1)
	}
	t.Fatalf("%s is not mapped", path)
	return 0, 0
}

func testHostKernelsInPlace(t *testing.T, model string, noMap bool) {
	ctx := context.Background()
	e := open(t, model, Options{Prefetch: 2, NoMap: noMap, DType: "f32"}) // exact host products (bf16 ones: TestHostDecodeBF16)
	if e.store.dtype != dtypes.Float32 {
		t.Fatalf("compute dtype %s, want f32", e.store.dtype)
	}
	st := e.store.newStream(ctx, 1, false)
	w, err := st.next(layerUnit(0))
	if err != nil {
		st.stop()
		t.Fatal(err)
	}
	mem := w.buf.Bytes()
	lo, hi := uintptr(0), uintptr(0)
	if len(mem) > 0 {
		lo, hi = uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&mem[len(mem)-1]))
	}
	if !noMap { // the set keeps the shard file mapped: the weights must lie in that mapping
		lo, hi = mappingOf(t, filepath.Join(e.store.set.Dir, "layer.0.shard"))
	}
	for i, s := range w.specs {
		switch f := w.hostTensors()[i].flat.(type) {
		case []bfloat16.BFloat16:
			if p := uintptr(unsafe.Pointer(&f[0])); len(s.shape) != 2 || p < lo || p > hi {
				t.Errorf("%s: bf16 view of a %v tensor at %#x, outside the shard buffer or mapping [%#x, %#x]", s.suffix, s.shape, p, lo, hi)
			}
		case []float32:
			if len(s.shape) == 2 {
				t.Errorf("%s: weight matrix widened to f32, want it read in place as bf16", s.suffix)
			}
		}
	}
	if n := len(e.store.pools.host); n > 2 {
		t.Errorf("%d host buffers free while a layer holds one (pool of 3: Prefetch 2 and the computing layer's)", n)
	}
	e.store.releaseSet(w)
	st.stop()
	if n := len(e.store.pools.host); n != 3 {
		t.Errorf("%d host buffers back in the pool after the stream stopped, want 3", n)
	}

	ids := []int{1, 9, 17, 33, 40}
	host := tokenByToken(t, e, ids)
	graph := tokenByToken(t, open(t, model, Options{GraphDecode: true, NoMap: noMap}), ids)
	if d := maxDiff(host, graph); d > 1e-4 {
		t.Errorf("host kernels on the bf16 shard bytes differ from f32 graphs by %g (> 1e-4)", d)
	}
}

// TestLayerBytesAsHeld: the size --device-budget divides by (layerBytes, guard.HeldBytes) and placement's (on
// cpu without --graph-decode, guard.UnitSizes' InPlaceBytes) is what a streamed layer of a bf16 checkpoint
// actually holds: its weight matrices read in place as bf16 on the host kernels' path, widened to f32 for the
// graphs (--graph-decode).
func TestLayerBytesAsHeld(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 21, DType: checkpoint.BF16})
	ck, err := OpenCheckpoint(model)
	if err != nil {
		t.Fatal(err)
	}
	for _, graph := range []bool{false, true} {
		e := open(t, model, Options{GraphDecode: graph})
		st := e.store.newStream(context.Background(), 1, graph)
		w, err := st.next(layerUnit(0))
		if err != nil {
			st.stop()
			t.Fatal(err)
		}
		var held int64
		for _, d := range w.hostTensors() {
			switch f := d.flat.(type) {
			case []bfloat16.BFloat16:
				held += 2 * int64(len(f))
			case []float32:
				held += 4 * int64(len(f))
			default:
				t.Fatalf("graph %v: a %T tensor", graph, f)
			}
		}
		e.store.releaseSet(w)
		st.stop()
		if got := e.store.layerBytes(); got != held {
			t.Errorf("graph %v: layerBytes %d, the layer holds %d", graph, got, held)
		}
		sizes, err := guard.UnitSizes(ck, e.store.computeDType)
		if err != nil {
			t.Fatal(err)
		}
		if got := sizes[1].On(guard.Device{Name: "cpu", InPlace: guard.InPlaceDevice("cpu", graph)}); sizes[1].Name != "layer.0" || got != held {
			t.Errorf("graph %v: placement sizes %s at %d on cpu, the layer holds %d", graph, sizes[1].Name, got, held)
		}
	}
}
