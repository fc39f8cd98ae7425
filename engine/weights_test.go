package engine

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
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
