package shards

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
)

// planeInputs returns test inputs for planes: bf16-like weights (a low-entropy high byte over a random
// mantissa), random bytes (no plane shrinks), one repeated byte (every plane RLE) and sizes around the block
// and element boundaries.
func planeInputs() map[string][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	weights := func(n int) []byte {
		b := make([]byte, 0, n+1)
		for len(b) < n {
			b = binary.LittleEndian.AppendUint16(b, uint16(math.Float32bits(float32(r.NormFloat64()*0.02))>>16))
		}
		return b[:n]
	}
	random := make([]byte, 3*planeBlock+5)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	return map[string][]byte{
		"empty":           nil,
		"one byte":        {7},
		"weights small":   weights(40),
		"weights block":   weights(2 * planeBlock),
		"weights odd":     weights(2*planeBlock*2 + 2*333 + 1),
		"random":          random,
		"constant":        bytes.Repeat([]byte{0x3c}, 5*planeBlock+3),
		"weights 1 frame": weights(frameSize),
	}
}

func TestPlanesRoundTrip(t *testing.T) {
	s := new(planeScratch)
	for name, src := range planeInputs() {
		for _, tc := range []struct {
			w    int
			fast bool
		}{{1, false}, {2, false}, {2, true}, {3, false}, {4, false}, {4, true}} {
			w := tc.w
			enc := encodePlanes(nil, src, w, s, tc.fast)
			dst := make([]byte, len(src))
			if err := decodePlanes(enc, dst, w); err != nil {
				t.Fatalf("%s, width %d, fast %v: %v", name, w, tc.fast, err)
			}
			if !bytes.Equal(dst, src) {
				t.Fatalf("%s, width %d, fast %v: round trip differs", name, w, tc.fast)
			}
			// bf16 N(0, 0.02): the high plane Huffman-codes to ~2.7 bits a byte, or 4-bit codes with few exceptions.
			if want := map[bool]float64{false: 0.70, true: 0.78}[tc.fast]; name == "weights block" && w == 2 && float64(len(enc)) > want*float64(len(src)) {
				t.Fatalf("bf16 weights, fast %v: %d bytes stored for %d, want under %.0f%%", tc.fast, len(enc), len(src), 100*want)
			}
			if name == "constant" && len(enc) > len(src)/1000 {
				t.Fatalf("constant bytes: %d stored for %d, want RLE", len(enc), len(src))
			}
			if name == "random" && len(enc) > len(src)+8*w*(len(src)/(w*planeBlock)+1) {
				t.Fatalf("random bytes: %d stored for %d: more than the plane headers added", len(enc), len(src))
			}
		}
	}
}

// TestInterleave2 checks the AVX2 interleave against the portable one at every length around its 32-byte step.
func TestInterleave2(t *testing.T) {
	for n := range 200 {
		p0, p1 := make([]byte, n), make([]byte, n)
		for i := range n {
			p0[i], p1[i] = byte(i), byte(255-3*i)
		}
		want, got := make([]byte, 2*n+2), make([]byte, 2*n+2)
		interleave2Go(want, p0, p1)
		interleave2(got, p0, p1)
		if !bytes.Equal(got, want) {
			t.Fatalf("n=%d: %x, want %x", n, got, want)
		}
		for i := range n {
			if want[2*i] != p0[i] || want[2*i+1] != p1[i] {
				t.Fatalf("n=%d: element %d is %x%x", n, i, want[2*i+1], want[2*i])
			}
		}
	}
}

// TestInterleave4 checks the AVX2 four-plane interleave against the portable one around its 32-element step.
func TestInterleave4(t *testing.T) {
	for n := range 200 {
		var p [4][]byte
		for k := range p {
			p[k] = make([]byte, n)
			for i := range n {
				p[k][i] = byte(i*7 + k*61)
			}
		}
		want, got := make([]byte, 4*n+4), make([]byte, 4*n+4)
		interleave4Go(want, p[0], p[1], p[2], p[3])
		interleave4(got, p[0], p[1], p[2], p[3])
		if !bytes.Equal(got, want) {
			t.Fatalf("n=%d: %x, want %x", n, got, want)
		}
		for i := range n {
			for k := range 4 {
				if want[4*i+k] != p[k][i] {
					t.Fatalf("n=%d: element %d byte %d is %x", n, i, k, want[4*i+k])
				}
			}
		}
	}
}

// TestPlanesCorrupt: every truncation and many single-byte changes of a frame are errors or decode to some
// bytes, never a panic or a write outside dst; a changed plane header is always an error.
func TestPlanesCorrupt(t *testing.T) {
	for _, fast := range []bool{false, true} {
		corruptPlanes(t, encodePlanes(nil, planeInputs()["weights odd"], 2, new(planeScratch), fast))
	}
}

func corruptPlanes(t *testing.T, enc []byte) {
	src := planeInputs()["weights odd"]
	guard := make([]byte, len(src)+64)
	dst := guard[:len(src)]
	for n := range len(enc) {
		if n%97 != 0 && n > 64 && n < len(enc)-64 {
			continue
		}
		if err := decodePlanes(enc[:n], dst, 2); err == nil {
			t.Fatalf("frame cut to %d of %d bytes decoded", n, len(enc))
		}
	}
	if err := decodePlanes(append(enc[:len(enc):len(enc)], 0), dst, 2); err == nil {
		t.Fatal("frame with a trailing byte decoded")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		bad := bytes.Clone(enc)
		bad[r.IntN(len(bad))] ^= byte(1 + r.IntN(255))
		_ = decodePlanes(bad, dst, 2)
	}
	for _, v := range guard[len(src):] {
		if v != 0 {
			t.Fatal("decodePlanes wrote past dst")
		}
	}
	// The first plane header: another mode or length is always refused.
	for _, h := range []uint32{planeRaw | 5<<2, planeRLE | 2<<2, planeNibble | 3<<2, planeHuff | uint32(planeBlock)<<2, planeHuff} {
		bad := bytes.Clone(enc)
		binary.LittleEndian.PutUint32(bad, h)
		if err := decodePlanes(bad, dst, 2); err == nil || !strings.Contains(err.Error(), "plane 0") {
			t.Fatalf("plane header %#x: %v", h, err)
		}
	}
}

// TestSplitStoresSlowTensorsRaw: with a disk faster than any decoder, every encoded tensor is stored raw (and
// still loads); with a slow one, they stay encoded.
func TestSplitStoresSlowTensorsRaw(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	for _, tc := range []struct {
		rate    float64
		encoded bool
	}{{1e18, false}, {1, true}} {
		out := filepath.Join(t.TempDir(), "s")
		s, err := Split(context.Background(), ck, SplitOptions{Out: out, Encoding: Planes, DiskRate: tc.rate})
		if err != nil {
			t.Fatal(err)
		}
		checkIdentical(t, s, ck)
		var encoded int
		for _, u := range s.Units() {
			for _, ti := range u.Tensors {
				if ti.Encoding == Planes {
					encoded++
				}
			}
		}
		if (encoded > 0) != tc.encoded {
			t.Fatalf("disk rate %g B/s: %d tensors stored planes, want encoded=%v", tc.rate, encoded, tc.encoded)
		}
	}
}

// TestSplitFallsBackToFastPlanes: a tensor whose Huffman planes decode too slowly for the disk is stored with
// 4-bit codes when those keep up (bigger than Huffman's, smaller than raw), and raw when neither does.
func TestSplitFallsBackToFastPlanes(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	defer func() { testHookDecodeRate = nil }()
	stored := map[string]float64{}
	for _, tc := range []struct {
		name       string
		huff, fast float64 // decode rates, bytes per second per core
	}{{"huffman", 1e12, 1e12}, {"4-bit", 1e3, 1e12}, {"raw", 1e3, 1e3}} {
		testHookDecodeRate = func(fast bool) float64 { return map[bool]float64{false: tc.huff, true: tc.fast}[fast] }
		s, err := Split(context.Background(), ck, SplitOptions{Out: filepath.Join(t.TempDir(), "s"), Encoding: Planes, DiskRate: 1e9})
		if err != nil {
			t.Fatal(err)
		}
		checkIdentical(t, s, ck)
		var raw, enc int64
		for _, u := range s.Units() {
			for _, ti := range u.Tensors {
				if ti.Name == "model.layers.0.mlp.up_proj.weight" {
					raw, enc = ti.Length, ti.EncodedLength
					if (ti.Encoding == Raw) != (tc.name == "raw") {
						t.Fatalf("%s: %s stored %s", tc.name, ti.Name, ti.Encoding)
					}
				}
			}
		}
		stored[tc.name] = float64(enc) / float64(raw)
	}
	if !(stored["huffman"] < stored["4-bit"] && stored["4-bit"] < 0.8 && stored["raw"] == 1) {
		t.Fatalf("stored fractions %v: want Huffman < 4-bit < 0.8, raw 1", stored)
	}
}

// TestSplitSlowPlanesOfQuantizedBlocks: Q8_0 blocks whose Huffman planes decode too slowly for the disk, and
// whose 4-bit codes do not shrink them, are stored raw with a raw table entry (the entry kept the Huffman
// lengths once: Split succeeded and every layer then failed to load).
func TestSplitSlowPlanesOfQuantizedBlocks(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	defer func() { testHookDecodeRate = nil }()
	testHookDecodeRate = func(fast bool) float64 { return map[bool]float64{false: 1e3, true: 1e12}[fast] }
	s, err := Split(context.Background(), ck, SplitOptions{Out: filepath.Join(t.TempDir(), "s"), Quantize: Q8, Encoding: Planes, DiskRate: 1e9})
	if err != nil {
		t.Fatal(err)
	}
	buf := NewBuffer(0)
	for _, u := range s.Units() {
		l, err := s.Load(context.Background(), u.Name, buf)
		if err != nil {
			t.Fatalf("%s: %v", u.Name, err)
		}
		if w, ok := l.Tensors["model.layers.0.mlp.up_proj.weight"]; ok && w.DType != checkpoint.Q8_0 {
			t.Errorf("up_proj stored as %s, want Q8_0", w.DType)
		}
	}
}

// FuzzDecodePlanes: any bytes as a planes frame of any width and size decode or fail, never panic, never
// write outside dst; what encodePlanes made decodes back.
func FuzzDecodePlanes(f *testing.F) {
	s := new(planeScratch)
	for _, src := range planeInputs() {
		if len(src) > 1<<18 {
			continue
		}
		for _, w := range []int{1, 2, 4} {
			f.Add(encodePlanes(nil, src, w, s, false), uint8(w), uint32(len(src)))
			f.Add(encodePlanes(nil, src, w, s, true), uint8(w), uint32(len(src)))
		}
	}
	f.Fuzz(func(t *testing.T, stored []byte, w uint8, n uint32) {
		width := 1 + int(w)%4
		size := int(n % (1 << 20))
		buf := make([]byte, size+16)
		if err := decodePlanes(stored, buf[:size], width); err == nil {
			again := encodePlanes(nil, buf[:size], width, s, w >= 128)
			out := make([]byte, size)
			if err := decodePlanes(again, out, width); err != nil || !bytes.Equal(out, buf[:size]) {
				t.Fatalf("re-encoded frame does not round trip: %v", err)
			}
		}
		for _, v := range buf[size:] {
			if v != 0 {
				t.Fatal("wrote past dst")
			}
		}
	})
}
