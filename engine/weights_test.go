package engine

import (
	"context"
	"encoding/binary"
	"math"
	"testing"
	"unsafe"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"

	"github.com/layerstream/layerstream/checkpoint"
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
func TestHostKernelsReadShardBufferInPlace(t *testing.T) {
	ctx := context.Background()
	model := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 21, DType: checkpoint.BF16})
	e := open(t, model, Options{Prefetch: 2})
	if e.dtype != dtypes.Float32 {
		t.Fatalf("compute dtype %s, want the default f32 on cpu", e.dtype)
	}
	st := e.newStream(ctx, 1, false)
	w, err := st.next(layerUnit(0))
	if err != nil {
		st.stop()
		t.Fatal(err)
	}
	mem := w.buf.Bytes()
	lo, hi := uintptr(unsafe.Pointer(&mem[0])), uintptr(unsafe.Pointer(&mem[len(mem)-1]))
	for i, s := range w.specs {
		switch f := w.hostTensors()[i].flat.(type) {
		case []bfloat16.BFloat16:
			if p := uintptr(unsafe.Pointer(&f[0])); len(s.shape) != 2 || p < lo || p > hi {
				t.Errorf("%s: bf16 view of a %v tensor at %#x, outside the shard buffer [%#x, %#x]", s.suffix, s.shape, p, lo, hi)
			}
		case []float32:
			if len(s.shape) == 2 {
				t.Errorf("%s: weight matrix widened to f32, want it read in place as bf16", s.suffix)
			}
		}
	}
	if n := len(e.pools.host); n > 2 {
		t.Errorf("%d host buffers free while a layer holds one (pool of 3: Prefetch 2 and the computing layer's)", n)
	}
	e.releaseSet(w)
	st.stop()
	if n := len(e.pools.host); n != 3 {
		t.Errorf("%d host buffers back in the pool after the stream stopped, want 3", n)
	}

	ids := []int{1, 9, 17, 33, 40}
	host := tokenByToken(t, e, ids)
	graph := tokenByToken(t, open(t, model, Options{GraphDecode: true}), ids)
	if d := maxDiff(host, graph); d > 1e-4 {
		t.Errorf("host kernels on the bf16 shard bytes differ from f32 graphs by %g (> 1e-4)", d)
	}
}
