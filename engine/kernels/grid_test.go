package kernels

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/layerstream/layerstream/quant"
)

// TestGridKernels checks the codebook i-quants' assembly against quant.GridInts (itself bit-exact with gguf-py's
// decoding), on random super-blocks (any bytes are valid) against random activations and the extremes ±127: each
// format's row kernel bit for bit against the portable gridDot (rows of 1-9 super-blocks), its decoder and
// gridIntsAVX2 (the four-input kernels' parts) against GridInts and gridIntsGo, and its tiled unpacker's codes and
// scales against the portable unpacking's.
func TestGridKernels(t *testing.T) {
	if !useAVX2 {
		t.Skip("no AVX2: the Go kernels only")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for _, typ := range quant.GridTypes {
		f, _ := typ.Format()
		tf := tiledFormats[typ]
		for trial := range 1000 {
			nb := 1 + trial%9
			w := make([]byte, nb*f.BlockBytes)
			for i := range w {
				w[i] = byte(rng.Uint32())
			}
			x := qActRow{qs: make([]int8, nb*quant.QKK), d: make([]float32, nb)}
			for i := range x.qs {
				switch trial % 4 {
				case 0:
					x.qs[i] = 127
				case 1:
					x.qs[i] = -127
				default:
					x.qs[i] = int8(rng.IntN(255) - 127)
				}
			}
			for b := range nb {
				x.d[b] = float32(rng.Float64() * 0.01)
			}
			if got, want := gridDot(typ, true, w, x), gridDot(typ, false, w, x); math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
				t.Fatalf("%s, trial %d (%d super-blocks): the row kernel %g, gridDot %g", typ, trial, nb, got, want)
			}
			// The decoder and the integer product of the four-input kernels, on the first super-block.
			var q, aq [quant.QKK]int8
			var sc [16]int32
			var scv gridScales
			quant.GridInts(typ, &q, &sc, w[:f.BlockBytes])
			gridDecodeAsm(typ, w[:f.BlockBytes], &aq, &scv)
			for s := range 16 {
				if scv.sc(s) != sc[s] {
					t.Fatalf("%s, trial %d: the decoder's scales %v, GridInts's %v", typ, trial, scv, sc)
				}
			}
			if aq != q {
				t.Fatalf("%s, trial %d: the decoder's codes differ from GridInts's", typ, trial)
			}
			if got, want := gridIntsAVX2(&aq, &x.qs[0], &scv), gridIntsGo(&q, x.qs, &sc); got != want {
				t.Fatalf("%s, trial %d: gridIntsAVX2 %d, gridIntsGo %d", typ, trial, got, want)
			}
			// One row's codes and meta of the first super-block, as a panel holds them (quads 64 bytes apart).
			unpack := func(asm bool) (codes, meta []byte) {
				defer func(v bool) { useAVX2 = v }(useAVX2)
				useAVX2 = asm
				codes, meta = make([]byte, 64*tileRows*4), make([]byte, tf.metaBytes())
				tf.unpack(codeDst{unsafe.Pointer(&codes[0])}, metaDst{unsafe.Pointer(&meta[0]), tf.nsub()}, w[:f.BlockBytes])
				return codes, meta
			}
			ac, am := unpack(true)
			gc, gm := unpack(false)
			if !bytes.Equal(ac, gc) || !bytes.Equal(am, gm) {
				t.Fatalf("%s, trial %d: the assembly unpacker's codes or scales differ from the portable unpacking's", typ, trial)
			}
		}
	}
}

// BenchmarkGridDot times one row's product (4096 super-blocks, one core) per codebook i-quant, with the selected
// kernels and the portable ones, as ns per super-block: scripts/llamacpp_vecdot_speed.py times
// llama.cpp's ggml_vec_dot on the same shape.
func BenchmarkGridDot(b *testing.B) {
	const nb = 4096
	rng := rand.New(rand.NewPCG(5, 6))
	for _, typ := range append([]quant.Type{quant.Q4_K, quant.IQ4_XS}, quant.GridTypes...) {
		w := randomQuantMatrix(b, rng, typ, 1, nb*quant.QKK)
		x := make([]float32, nb*quant.QKK)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		var a qAct
		a.quantize(w.k.act, x, len(x))
		for name, k := range map[string]*quantKernel{"selected": w.k, "portable": portableKernels[typ]} {
			b.Run(typ.String()+"/"+name, func(b *testing.B) {
				for b.Loop() {
					k.dot(w.Row(0), a.row(0))
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/nb, "ns/superblock")
			})
		}
	}
}
