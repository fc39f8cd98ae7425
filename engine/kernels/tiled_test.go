package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// randomKBlocks makes a [rows, cols] matrix of block type typ from random bytes, its float16 scales set to sane
// values: every bit of the codes and scale fields is exercised.
func randomKBlocks(t *testing.T, rng *rand.Rand, typ quant.Type, rows, cols int) QuantMatrix {
	t.Helper()
	f, _ := typ.Format()
	data := make([]byte, rows*cols/f.BlockElems*f.BlockBytes)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	for b := 0; b < len(data); b += f.BlockBytes {
		setScales(typ, data[b:b+f.BlockBytes], func() float32 { return float32(1e-4 + rng.Float64()*1e-2) })
	}
	m, err := NewQuantMatrix(typ, data, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tiledRef is one output of the tiled products, from the portable decoders (not the tiled unpackers): the
// integer sums of tiled.go's formula, then its float operations in its order.
func tiledRef(typ quant.Type, w []byte, x qActRow) float32 {
	if widen := map[quant.Type]func(dst, src []byte){quant.Q8_0: func(dst, src []byte) { copy(dst, src) },
		quant.Q4_0: widenQ4_0, quant.Q5_0: widenQ5_0, quant.IQ4_NL: widenIQ4_NL}[typ]; widen != nil {
		// 32-element blocks, as Q8_0 (TestWiden checks the widening against the portable products).
		b8 := make([]byte, len(x.d)*34)
		widen(b8, w)
		var acc float32
		for b := range len(x.d) {
			var isum int32
			for i := range 32 {
				isum += int32(int8(b8[34*b+2+i])) * int32(x.qs[32*b+i])
			}
			t := float32(float32(isum) * halfAt(b8, 34*b))
			acc += float32(t * x.d[b])
		}
		return acc
	}
	if typ == quant.Q4_1 || typ == quant.Q5_1 {
		bb := len(w) / len(x.d)
		var acc float32
		for b := range len(x.d) {
			blk := w[b*bb : (b+1)*bb]
			var isum int32
			for i := range 32 {
				var q int32
				if typ == quant.Q4_1 {
					q = int32(blk[4+i%16] >> (4 * (i / 16)) & 0xf)
				} else {
					q = int32(blk[8+i%16]>>(4*(i/16))&0xf) | int32(binary.LittleEndian.Uint32(blk[4:])>>i&1)<<4
				}
				isum += q * int32(x.qs[32*b+i])
			}
			t := float32(float32(isum) * halfAt(blk, 0))
			t = float32(t * x.d[b])
			u := float32(halfAt(blk, 2) * x.s[b])
			acc += float32(t + u)
		}
		return acc
	}
	var k kInts
	var acc float32
	bb := len(w) / len(x.d)
	for b := range len(x.d) {
		kDecode(typ, &k, w[b*bb:(b+1)*bb])
		var isb, imin int32
		for j := range 16 { // sixteenths: a 32-element sub-block's scale is its two sixteenths' (equal) scale
			var isum int32
			for e := 16 * j; e < 16*j+16; e++ {
				code := int32(k.q[e])
				switch {
				case typ == quant.Q3_K:
					code += 4 // the tiled codes are unsigned; the −4 is in the minimum term
				case typ == quant.IQ4_XS || quant.IsGrid(typ):
					code += 128
				}
				isum += code * int32(x.qs[quant.QKK*b+e])
			}
			isb += k.sc[j] * isum
			mi := k.mn[j]
			switch {
			case typ == quant.Q6_K:
				mi = 32 * k.sc[j]
			case typ == quant.Q3_K:
				mi = 4 * k.sc[j]
			case typ == quant.IQ4_XS || quant.IsGrid(typ):
				mi = 128 * k.sc[j]
			}
			imin += mi * int32(x.bsums[16*b+j])
		}
		dm := k.d
		if k.hasMin {
			dm = k.dmin
		}
		t := float32(float32(isb) * k.d)
		u := float32(float32(imin) * dm)
		v := float32(t - u)
		acc += float32(v * x.d[b])
	}
	return acc
}

// TestLinearQuantPrompt checks the tiled prompt products of every tiled type, through the Go kernel and the
// assembly one: bit for bit against tiledRef for every row count (a row's bits do not depend on the rows beside
// it or on the padding of the last tile), and within float rounding of LinearQuant's order.
func TestLinearQuantPrompt(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for typ := range quantKernels {
		if tiledFormats[typ] == nil {
			t.Errorf("%v has no tiled format: its prompts would take another float order than the other types'", typ)
		}
	}
	if tileK == nil || tileQ8 == nil || tileQ81 == nil {
		t.Log("no tiled assembly kernels on this CPU: the Go ones only")
	}
	for typ, f := range tiledFormats {
		kernels := map[string]quantTile{"go": f.goKernel}
		if f.asmKernel != nil {
			kernels["asm"] = f.asmKernel
		}
		for _, shape := range [][2]int{{16, 256}, {37, 512}, {50, 1024}} {
			out, in := shape[0], shape[1]
			w := randomKBlocks(t, rng, typ, out, in)
			bias := make([]float32, out)
			for i := range bias {
				bias[i] = float32(rng.NormFloat64())
			}
			for _, rows := range []int{1, 5, 12, 13, 29} {
				x := make([]float32, rows*in)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				var a qAct
				a.quantize(w.k.act, x, in)
				lane := make([]float32, rows*out)
				linearQuant(lane, x, w, nil)
				for name, kernel := range kernels {
					y := make([]float32, rows*out)
					linearTiled(y, x, w, nil, f, kernel)
					yb := make([]float32, rows*out)
					linearTiled(yb, x, w, bias, f, kernel)
					bad := 0
					for r := range rows {
						for o := range out {
							i := r*out + o
							want := tiledRef(typ, w.Row(o), a.row(r))
							if math.Float32bits(y[i]) != math.Float32bits(want) || yb[i] != want+bias[o] {
								if bad++; bad <= 3 {
									t.Errorf("%s %v [%d×%d] rows %d: y[%d][%d] = %v (with bias %v), want %v (+%v)", name, typ, out, in, rows, r, o, y[i], yb[i], want, bias[o])
								}
							}
							if d := math.Abs(float64(y[i] - lane[i])); d > 1e-5*magnitude(w, o, a.row(r)) {
								if bad++; bad <= 3 {
									t.Errorf("%s %v: y[%d][%d] = %v, LinearQuant %v: differ by %g", name, typ, r, o, y[i], lane[i], d)
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestLinearQuantPromptExtremes: blocks of all-equal bytes (the largest codes and scales, the most negative ones)
// against inputs of ±1 (quantized to ±127): the tiled integer sums stay within int32 and int16 where LinearQuant's
// do (tiledRef sums as the kernels do, so only LinearQuant can tell an overflow).
func TestLinearQuantPromptExtremes(t *testing.T) {
	const out, in, rows = 16, 512, 12
	for typ, f := range tiledFormats {
		kernels := map[string]quantTile{"go": f.goKernel}
		if f.asmKernel != nil {
			kernels["asm"] = f.asmKernel
		}
		for _, fill := range []byte{0xff, 0x80, 0x7f, 0x00} {
			w := filledMatrix(t, typ, fill, out, in)
			for _, sign := range []float32{1, -1} {
				x := make([]float32, rows*in)
				for i := range x {
					x[i] = sign
				}
				var a qAct
				a.quantize(w.k.act, x, in)
				lane := make([]float32, rows*out)
				linearQuant(lane, x, w, nil)
				for name, kernel := range kernels {
					y := make([]float32, rows*out)
					linearTiled(y, x, w, nil, f, kernel)
					for i := range y {
						if d := math.Abs(float64(y[i] - lane[i])); d > 1e-5*magnitude(w, i%out, a.row(i/out)) {
							t.Errorf("%s %v, bytes %#x, inputs %v: y[%d] = %v, LinearQuant %v", name, typ, fill, sign, i, y[i], lane[i])
							break
						}
					}
				}
			}
		}
	}
}

// BenchmarkLinearQuantPrompt times the prompt products against LinearQuant's, [2048×2048] weights.
func BenchmarkLinearQuantPrompt(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const out, in = 2048, 2048
	for _, typ := range quantTypes {
		w := randomQuantMatrix(b, rng, typ, out, in)
		for _, rows := range []int{4, 8, 16, 32, 128, 512} {
			x := make([]float32, rows*in)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			y := make([]float32, rows*out)
			for _, name := range []string{"lanes", "tiled"} {
				fn := LinearQuant
				if name == "tiled" {
					fn = LinearQuantPrompt
				}
				b.Run(fmt.Sprintf("%v/rows=%d/%s", typ, rows, name), func(b *testing.B) {
					for b.Loop() {
						fn(y, x, w, nil)
					}
					b.ReportMetric(2*float64(rows*out*in)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// TestCodes16: the assembly unpackers of 16 rows (codes16, scales16) write the codes and the meta the Go ones do,
// byte for byte, for every type that has them (an odd last 32-element block included).
func TestCodes16(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for typ, f := range tiledFormats {
		if f.codes16 == nil {
			continue
		}
		for _, cols := range []int{3 * quant.QKK, 9 * quant.QK} { // 9: an odd last 32-element block
			if cols%f.block != 0 {
				continue
			}
			w := randomKBlocks(t, rng, typ, 2*tileRows, cols)
			asm := &tiledPanel{f: f}
			asm.fill(w, tileRows, tileRows)
			g := *f
			g.codes16, g.scales16 = nil, nil
			ref := &tiledPanel{f: &g}
			ref.fill(w, tileRows, tileRows)
			for i := range ref.codes {
				if asm.codes[i] != ref.codes[i] {
					t.Fatalf("%v: byte %d (super-block %d, quad %d, row %d): %d, want %d", typ, i, i/4096, i%4096/64, i%64/4, asm.codes[i], ref.codes[i])
				}
			}
			for i := range ref.meta {
				if asm.meta[i] != ref.meta[i] {
					mb := f.metaBytes()
					t.Fatalf("%v: meta byte %d (block %d, field %d, row %d): %d, want %d", typ, i, i/mb, i%mb/64, i%64/4, asm.meta[i], ref.meta[i])
				}
			}
		}
	}
}
