package kernels

import (
	"encoding/binary"
	"math"
	"sync"
	"unsafe"

	"github.com/layerstream/layerstream/internal/grow"
	"github.com/layerstream/layerstream/quant"
)

// Prompt products of block-quantized matrices (the K-quants, the IQ1-IQ4 i-quants, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1),
// tiled.
//
// LinearQuant computes every output as the one-row kernels do, in eight lanes of k-positions per super-block
// (llama.cpp's vec_dot order), so a product gives the same bits whatever the number of rows. That order costs a
// scale multiply per 32 products and each output its own register, which caps a prompt's products well below
// the machine's integer rate. LinearQuantPrompt, for the rows of prompts, follows llama.cpp's own batched
// path instead: 16 weight rows are unpacked once into byte codes (one 512-bit register holds four codes of each
// row) and multiplied with 12 input rows at a time, each output a lane of its own:
//
//	isum(sub) = Σ code·x over the sub-block (VPDPBUSD)
//	isb       = Σ_sub sc(sub)·isum(sub)       (integers: exact, any order)
//	imin      = Σ_sub mi(sub)·bsum(sub)       (the minimum, or the code offset, times the input's sums)
//	y        += ((float(isb)·d) − (float(imin)·dm))·dx   once per super-block, no fused operations
//
// where a row's codes are unsigned (Q3_K's −4, Q6_K's −32 and the i-quants' −128 move into mi, as Q4_K's minimum
// is)
// and dx is the input's Q8_K scale. 32-element blocks (Q8_0, and Q4_0, Q5_0, IQ4_NL widened to it) store w + 128 and take one float update per block,
// y += (float(isum − 128·Σx)·d)·dx, against Q8_0 inputs; Q4_1 and Q5_1 store their codes as they are and add their
// minimum, y += ((float(isum)·d)·dx) + m·s, against Q8_1 inputs. Every output's float operations depend on its
// own weight row and input row only, so a prompt gives the same bits alone and batched with others' prompts, and
// the Go kernels (tileGo, tileQ8Go, tileQ81Go) give them too. The order differs from LinearQuant's, so a prompt
// row and a decode row differ in their last bits (as llama.cpp's batched and one-row paths do), except for the
// types of rowsKernels (rows.go), whose LinearQuant products follow this order at any number of rows. The engine
// decides per sequence, never per batch: a prompt of PromptTileRows new tokens or more takes LinearQuantPrompt in
// every pass of it (each chunk, however short), as does any pass feeding that many positions (a Recompute feed);
// shorter prompts, decode steps and the head take LinearQuant.

// PromptTileRows is the prompt length (new tokens of one sequence) from which the engine uses LinearQuantPrompt:
// below it, unpacking the weights costs more than the tiles save (BenchmarkLinearQuantPrompt with the AVX-512
// unpackers: at 16 rows 1.2-3.5× LinearQuant's rate for every type, at 8 rows Q6_K still slower).
const PromptTileRows = 16

// PromptTiled reports whether LinearQuantPrompt tiles here (the CPU has AVX-512 VNNI); when false it is
// LinearQuant.
func PromptTiled() bool { return tileK != nil && tileQ8 != nil && tileQ81 != nil }

const (
	tileRows = 16 // weight rows per panel: the 16 int32 lanes of a 512-bit register
	tileIn   = 12 // input rows per tile (24 of the 32 registers hold their sums)
)

// tiledFormat is how one block type unpacks for the tiled products, block after block: a K-quant super-block
// (256 elements) or a 32-element block.
type tiledFormat struct {
	block  int                                    // elements per block: 256 or 32
	sub    int                                    // K-quants: elements per sub-block, 32 (Q4_K, Q5_K) or 16; else 0
	min    bool                                   // 32-element blocks with a minimum (Q4_1, Q5_1: Q8_1 inputs)
	unpack func(c codeDst, m metaDst, blk []byte) // one row's block (blk: its bytes)
	// packMeta writes input c's parts of block b into the block's input meta m (of inputs inputs).
	packMeta func(m []byte, inputs, c int, x qActRow, b int)
	// goKernel is the kernel in Go; asmKernel the assembly one, nil where the CPU has none.
	goKernel, asmKernel quantTile
	// codes16 and scales16, where the CPU has them, write the codes and the meta of 16 rows' blocks, as unpack
	// would.
	codes16, scales16 unpack16
}

// unpack16 writes the codes or the meta of nb blocks (blockBytes each) of 16 rows (src: the first row, stride bytes
// from one row to the next) into a panel's codes or meta at dst.
type unpack16 func(src *byte, stride int, dst *byte, nb, blockBytes int)

// quantTile adds to acc[c·16 + r] the products of a panel's row r with a tile's input c over nb blocks.
type quantTile func(codes, meta, qs, ameta []byte, nb int, acc *[tileIn * tileRows]float32)

func (f *tiledFormat) nsub() int  { return quant.QKK / f.sub }
func (f *tiledFormat) npair() int { return f.nsub() / 2 }

// metaBytes is the size of a panel's meta per block: K-quants, sc [nsub][16]int32, mi [npair][16][2]int16,
// d [16]float32, dm [16]float32; 32-element blocks, d [16]float32 (and m [16]float32 with a minimum).
func (f *tiledFormat) metaBytes() int {
	if f.min {
		return 128
	}
	if f.sub == 0 {
		return 64
	}
	return (f.nsub() + f.npair() + 2) * 64
}

// actMetaBytes is the size of a tile's input parts per block (of inputs inputs: tileIn, or tiledRowsIn for the
// transposing kernels): K-quants, bsum pairs [npair][inputs][2]int16 and dx [inputs]float32; 32-element blocks,
// 128·Σx [inputs]int32 (with a minimum, Q8_1's s [inputs]float32) and dx [inputs]float32.
func (f *tiledFormat) actMetaBytes(inputs int) int {
	if f.sub == 0 {
		return 2 * 4 * inputs
	}
	return (f.npair() + 1) * 4 * inputs
}

// tiledFormats are the types with a tiled prompt path.
var tiledFormats = func() map[quant.Type]*tiledFormat {
	m := map[quant.Type]*tiledFormat{
		quant.Q4_K:   {sub: 32, unpack: unpackQ4_KTiled},
		quant.Q5_K:   {sub: 32, unpack: unpackQ5_KTiled},
		quant.Q6_K:   {sub: 16, unpack: unpackQ6_KTiled},
		quant.Q3_K:   {sub: 16, unpack: unpackQ3_KTiled},
		quant.Q2_K:   {sub: 16, unpack: unpackQ2_KTiled},
		quant.Q8_0:   {unpack: unpackQ8_0Tiled},
		quant.Q4_0:   {unpack: unpackQ4_0Tiled},
		quant.Q5_0:   {unpack: unpackQ5_0Tiled},
		quant.Q4_1:   {unpack: unpackQ4_1Tiled, min: true},
		quant.Q5_1:   {unpack: unpackQ5_1Tiled, min: true},
		quant.IQ4_NL: {unpack: unpackIQ4_NLTiled},
		quant.IQ4_XS: {sub: 32, unpack: unpackIQ4_XSTiled},
	}
	for t, sub := range gridTiledSub {
		m[t] = &tiledFormat{sub: sub, unpack: unpackGridTiled(t, sub)}
	}
	for typ, c := range codes16 {
		m[typ].codes16, m[typ].scales16 = c, scales16[typ]
	}
	for _, f := range m {
		switch {
		case f.min:
			f.block, f.packMeta = quant.QK, packQ81Meta
			f.goKernel, f.asmKernel = tileQ81Go, tileQ81
		case f.sub == 0:
			f.block, f.packMeta = quant.QK, packQ8Meta
			f.goKernel, f.asmKernel = tileQ8Go, tileQ8
		default:
			nsub := f.nsub()
			f.block, f.packMeta = quant.QKK, f.packKMeta
			f.goKernel = func(codes, meta, qs, ameta []byte, nb int, acc *[tileIn * tileRows]float32) {
				tileGo(codes, meta, qs, ameta, nb, nsub, acc)
			}
			if tileK != nil {
				f.asmKernel = func(codes, meta, qs, ameta []byte, nb int, acc *[tileIn * tileRows]float32) {
					tileK(codes, meta, qs, ameta, nb, nsub, acc)
				}
			}
		}
	}
	return m
}()

// tiledPanel is 16 weight rows unpacked, block after block: codes [nb][block/4 quads][16 rows][4] (the four
// codes of a quad of k-positions of each row side by side), meta [nb][metaBytes].
type tiledPanel struct {
	f           *tiledFormat
	codes, meta []byte

	// acc holds a kernel's sums of a panel's outputs, here rather than on the stack: the kernels are called
	// through function values, which would move a local array to the heap at each call.
	acc [tileIn * tileRows]float32
}

// put32 writes the little-endian value v at byte off of b.
func put32(b []byte, off int, v uint32) { binary.LittleEndian.PutUint32(b[off:], v) }

// codeDst is where one row's codes of one super-block go: quad q at q·64 bytes (the other rows' quads between).
// Its stores are unchecked: fill makes it only for a row and super-block inside the panel, and the unpackers
// write quads 0..63 only.
type codeDst struct{ p unsafe.Pointer }

func (c codeDst) set(q int, v uint32) { *(*uint32)(unsafe.Add(c.p, q*tileRows*4)) = v }

// metaDst is where one row's scales of one super-block go (a panel's meta at the super-block, the row and the
// format's sub-block count): unchecked as codeDst.
type metaDst struct {
	p    unsafe.Pointer
	nsub int
}

func (m metaDst) at(off int) *uint32 { return (*uint32)(unsafe.Add(m.p, off)) }

// scales writes the row's sub-block scales sc, minimum factors mi (one per sub-block; int16) and d, dm.
func (m metaDst) scales(sc, mi *[16]int32, d, dm float32) {
	ns := m.nsub
	for s := range ns {
		*m.at(s * 64) = uint32(sc[s])
	}
	for i := range ns / 2 {
		*m.at((ns + i) * 64) = uint32(uint16(int16(mi[2*i]))) | uint32(uint16(int16(mi[2*i+1])))<<16
	}
	*m.at((ns + ns/2) * 64) = math.Float32bits(d)
	*m.at((ns + ns/2 + 1) * 64) = math.Float32bits(dm)
}

// fill unpacks rows o..o+n of w (n ≤ 16); the panel's other rows get zero codes and scales. A whole panel of a
// matrix in panels is written from the panel itself (panelFormat.tiled).
func (p *tiledPanel) fill(w QuantMatrix, o, n int) {
	nb, cb := w.Cols/p.f.block, p.f.block*tileRows
	p.codes = grow.Slice(p.codes, nb*cb)
	p.meta = grow.Slice(p.meta, nb*p.f.metaBytes())
	if f := w.panels; f != nil {
		if pi := o / tileRows; pi < w.Rows/tileRows { // a whole panel: its tile written from it
			blocks, side := f.split(w.Data[pi*w.panelBytes():(pi+1)*w.panelBytes()], nb)
			f.tiled(&blocks[0], sidePtr(side), &p.codes[0], &p.meta[0], nb)
			return
		}
		w.panels = nil // the rows past the whole panels, as stored
	}
	if n < tileRows {
		clear(p.codes)
		clear(p.meta)
	}
	bb := w.rowBytes / nb
	// The scale unpackers gather with 32-bit offsets r·stride.
	if p.f.codes16 != nil && n == tileRows && (tileRows-1)*w.rowBytes <= math.MaxInt32 {
		p.f.codes16(&w.Row(o)[0], w.rowBytes, &p.codes[0], nb, bb)
		p.f.scales16(&w.Row(o)[0], w.rowBytes, &p.meta[0], nb, bb)
		return
	}
	mb, nsub := p.f.metaBytes(), 0
	if p.f.sub != 0 {
		nsub = p.f.nsub()
	}
	for r := range n {
		row := w.Row(o + r)
		for b := range nb {
			c := codeDst{unsafe.Pointer(&p.codes[b*cb+4*r])}
			m := metaDst{unsafe.Pointer(&p.meta[b*mb+4*r]), nsub}
			p.f.unpack(c, m, row[b*bb:(b+1)*bb])
		}
	}
}

const lo4, lo2, lo1 = 0x0f0f0f0f, 0x03030303, 0x01010101

func u32(b []byte, off int) uint32 { return binary.LittleEndian.Uint32(b[off:]) }

// unpackK4Scales writes the scales of a Q4_K or Q5_K super-block (d, dmin at 0 and 2, 6-bit scales and minimums
// at 4..16).
func unpackK4Scales(m metaDst, blk []byte) {
	var sc, mi [16]int32
	for j := range 8 {
		s, m := quant.ScaleMinK4(j, blk[4:16])
		sc[j], mi[j] = int32(s), int32(m)
	}
	m.scales(&sc, &mi, halfAt(blk, 0), halfAt(blk, 2))
}

// unpackQ4_KTiled: each 32-byte group g holds sub-block 2g in its low nibbles and 2g+1 in its high ones.
func unpackQ4_KTiled(c codeDst, m metaDst, blk []byte) {
	unpackK4Scales(m, blk)
	qs := blk[16:144]
	for g := range 4 {
		for i := range 8 {
			v := u32(qs, 32*g+4*i)
			c.set(16*g+i, v&lo4)
			c.set(16*g+8+i, v>>4&lo4)
		}
	}
}

// unpackQ5_KTiled: Q4_K's nibbles, with bit 2g (2g+1) of qh[l] as bit 4 of element l of sub-block 2g (2g+1).
func unpackQ5_KTiled(c codeDst, m metaDst, blk []byte) {
	unpackK4Scales(m, blk)
	qh, qs := blk[16:48], blk[48:176]
	for g := range 4 {
		for i := range 8 {
			v, h := u32(qs, 32*g+4*i), u32(qh, 4*i)
			c.set(16*g+i, v&lo4|(h>>(2*g&31)&lo1)<<4)
			c.set(16*g+8+i, v>>4&lo4|(h>>((2*g+1)&31)&lo1)<<4)
		}
	}
}

// unpackQ6_KTiled: codes 0..63 (the −32 goes into mi as 32·sc), 16 signed 8-bit scales.
func unpackQ6_KTiled(c codeDst, m metaDst, blk []byte) {
	ql, qh := blk[:128], blk[128:192]
	for n := range 2 {
		for i := range 8 {
			a, a2, h := u32(ql, 64*n+4*i), u32(ql, 64*n+32+4*i), u32(qh, 32*n+4*i)
			c.set(32*n+i, a&lo4|(h&lo2)<<4)
			c.set(32*n+8+i, a2&lo4|(h>>2&lo2)<<4)
			c.set(32*n+16+i, a>>4&lo4|(h>>4&lo2)<<4)
			c.set(32*n+24+i, a2>>4&lo4|(h>>6&lo2)<<4)
		}
	}
	unpackQ6_KScales(m, blk)
}

// unpackQ6_KScales writes a Q6_K block's scales: 16 signed 8-bit ones, and 32 times them as minimum factors.
func unpackQ6_KScales(m metaDst, blk []byte) {
	var sc, mi [16]int32
	for j, v := range blk[192:208] {
		sc[j] = int32(int8(v))
		mi[j] = 32 * sc[j]
	}
	d := halfAt(blk, 208)
	m.scales(&sc, &mi, d, d)
}

// unpackQ3_KTiled: codes 0..7 (the low two bits, and 4 where the hmask bit is set; the −4 goes into mi as 4·sc),
// 16 signed 6-bit scales.
func unpackQ3_KTiled(c codeDst, m metaDst, blk []byte) {
	hmask, qs, scb := blk[:32], blk[32:96], blk[96:108]
	var sc, mi [16]int32
	for i := range 16 {
		sc[i] = int32(quant.ScaleQ3K(i, scb))
		mi[i] = 4 * sc[i]
		grp, shift, half := i/8, 2*((i/2)%4), 16*(i%2)
		for j := range 4 {
			v, h := u32(qs, 32*grp+half+4*j), u32(hmask, half+4*j)
			c.set(4*i+j, v>>(shift&31)&lo2|(h>>(i/2&31)&lo1)<<2)
		}
	}
	d := halfAt(blk, 108)
	m.scales(&sc, &mi, d, d)
}

// unpackQ2_KTiled: codes 0..3, 4-bit scales and minimums.
func unpackQ2_KTiled(c codeDst, m metaDst, blk []byte) {
	scb, qs := blk[:16], blk[16:80]
	var sc, mi [16]int32
	for i := range 16 {
		sc[i], mi[i] = int32(scb[i]&0xf), int32(scb[i]>>4)
		grp, shift, half := i/8, 2*((i/2)%4), 16*(i%2)
		for j := range 4 {
			c.set(4*i+j, u32(qs, 32*grp+half+4*j)>>(shift&31)&lo2)
		}
	}
	m.scales(&sc, &mi, halfAt(blk, 80), halfAt(blk, 82))
}

// unpackQ8_0Tiled: codes w + 128 (the 128·Σx comes off with the inputs' sums), d.
func unpackQ8_0Tiled(c codeDst, m metaDst, blk []byte) {
	codesQ8_0(c, blk)
	scaleQ8_0(m, blk)
}

func codesQ8_0(c codeDst, blk []byte) {
	for q := range 8 {
		c.set(q, u32(blk, 2+4*q)^0x80808080)
	}
}

func scaleQ8_0(m metaDst, blk []byte) { *m.at(0) = math.Float32bits(halfAt(blk, 0)) }

// unpackIQ4_NLTiled widens the block to Q8_0 (its grid values as the codes) and unpacks that.
func unpackIQ4_NLTiled(c codeDst, m metaDst, blk []byte) {
	var b [34]byte
	widenIQ4_NL(b[:], blk)
	unpackQ8_0Tiled(c, m, b[:])
}

// iq4Codes are IQ4Values + 128: the unsigned tiled codes of IQ4_XS (the 128 goes into mi as 128·sc).
var iq4Codes = func() (c [16]uint32) {
	for i, v := range quant.IQ4Values {
		c[i] = uint32(int32(v) + 128)
	}
	return c
}()

// unpackIQ4_XSTiled: codes IQ4Values + 128, 8 signed 6-bit scales (sub-blocks of 32) and 128 times them as
// minimum factors.
func unpackIQ4_XSTiled(c codeDst, m metaDst, blk []byte) {
	var sc, mi [16]int32
	for j := range 8 {
		sc[j] = int32(quant.IQ4XSScale(blk, j))
		mi[j] = 128 * sc[j]
		q := blk[8+16*j : 8+16*j+16]
		for i := range 4 {
			var lo, hi uint32
			for k := range 4 {
				v := q[4*i+k]
				lo |= iq4Codes[v&0xf] << (8 * k)
				hi |= iq4Codes[v>>4] << (8 * k)
			}
			c.set(8*j+i, lo)
			c.set(8*j+4+i, hi)
		}
	}
	d := halfAt(blk, 0)
	m.scales(&sc, &mi, d, d)
}

// unpackQ4_0Tiled and unpackQ5_0Tiled widen the block to Q8_0 (the same integers and scale) and unpack that.
func unpackQ4_0Tiled(c codeDst, m metaDst, blk []byte) {
	var b [34]byte
	widenQ4_0(b[:], blk)
	unpackQ8_0Tiled(c, m, b[:])
}

func unpackQ5_0Tiled(c codeDst, m metaDst, blk []byte) {
	var b [34]byte
	widenQ5_0(b[:], blk)
	unpackQ8_0Tiled(c, m, b[:])
}

// unpackQ4_1Tiled: codes the nibbles (elements 0..15 low, 16..31 high), d and the minimum m.
func unpackQ4_1Tiled(c codeDst, m metaDst, blk []byte) {
	for q := range 4 {
		v := u32(blk, 4+4*q)
		c.set(q, v&lo4)
		c.set(q+4, v>>4&lo4)
	}
	*m.at(0) = math.Float32bits(halfAt(blk, 0))
	*m.at(64) = math.Float32bits(halfAt(blk, 2))
}

// unpackQ5_1Tiled: codes nibble | high bit << 4, d and the minimum m.
func unpackQ5_1Tiled(c codeDst, m metaDst, blk []byte) {
	qh := u32(blk, 4)
	for q := range 4 {
		v := u32(blk, 8+4*q)
		c.set(q, v&lo4|spreadBits4(qh>>(4*q)&0xf)<<4)
		c.set(q+4, v>>4&lo4|spreadBits4(qh>>(16+4*q)&0xf)<<4)
	}
	*m.at(0) = math.Float32bits(halfAt(blk, 0))
	*m.at(64) = math.Float32bits(halfAt(blk, 2))
}

// spreadBits4 puts bit i of b (b < 16) in bit 0 of byte i.
func spreadBits4(b uint32) uint32 {
	return b&1 | b>>1&1<<8 | b>>2&1<<16 | b>>3&1<<24
}

// tiledActs is input rows packed for the tiled kernel, 12 rows per group (tiledRowsIn for the transposing
// kernels; the last group padded with zero rows): qs [groups][n/4 quads][inputs][4] (the four values of a quad of
// each row side by side) and meta [groups][nb][actMetaBytes].
type tiledActs struct {
	qs, meta []byte
}

// packedInputs quantizes x's rows as w's products take them (Q8_K, Q8_0 or Q8_1) and packs them for format f,
// inputs rows a group; the caller gives them back to tiledPool.
func packedInputs(w QuantMatrix, x []float32, rows int, f *tiledFormat, inputs int) *tiledActs {
	a := actPool.Get().(*qAct)
	defer actPool.Put(a)
	a.quantize(w.k.act, x[:rows*w.Cols], w.Cols)
	t := tiledPool.Get().(*tiledActs)
	t.pack(f, a, rows, inputs)
	return t
}

// pack packs a's rows for format f, inputs rows a group.
func (t *tiledActs) pack(f *tiledFormat, a *qAct, rows, inputs int) {
	nb := a.n / f.block
	groups := (rows + inputs - 1) / inputs
	gq, amb := a.n*inputs, f.actMetaBytes(inputs)
	gm := nb * amb
	t.qs = grow.Slice(t.qs, groups*gq)
	t.meta = grow.Slice(t.meta, groups*gm)
	parallelFor(groups, 0, func(lo, hi int) {
		for g := lo; g < hi; g++ {
			qs, meta := t.qs[g*gq:(g+1)*gq], t.meta[g*gm:(g+1)*gm]
			n := min(inputs, rows-g*inputs)
			if n < inputs {
				clear(qs)
				clear(meta)
			}
			for c := range n {
				r := g*inputs + c
				x := a.row(r)
				interleave(qs, x.qs[:a.n], inputs, c)
				for b := range nb {
					f.packMeta(meta[b*amb:], inputs, c, x, b)
				}
			}
		}
	})
}

// interleave writes row c's quads (four int8 values each) into qs, where quad q of the rows of a group of inputs
// sits at (q·inputs + c)·4: one 32-bit move a quad (qs holds len(src)·inputs bytes).
func interleave(qs []byte, src []int8, inputs, c int) {
	if len(src) == 0 {
		return
	}
	from := unsafe.Slice((*uint32)(unsafe.Pointer(&src[0])), len(src)/4)
	to := unsafe.Slice((*uint32)(unsafe.Pointer(&qs[0])), len(qs)/4)[c:]
	_ = to[(len(from)-1)*inputs]
	for q, v := range from {
		to[q*inputs] = v
	}
}

// packKMeta writes input c's parts of super-block b: its pairs of sums of 16 (or 32) and its scale.
func (f *tiledFormat) packKMeta(m []byte, inputs, c int, x qActRow, b int) {
	f.packPairs(m, inputs, c, x, b)
	put32(m, f.npair()*4*inputs+4*c, math.Float32bits(x.d[b]))
}

// packPairs writes input c's pairs of sums of 16 (or 32) of super-block b, pair i at (i·inputs + c)·4: the int16
// pairs the minimum factors multiply.
func (f *tiledFormat) packPairs(m []byte, inputs, c int, x qActRow, b int) {
	bs := x.bsums[16*b : 16*b+16]
	for i := range f.npair() {
		var b0, b1 int16
		if f.sub == 32 {
			b0, b1 = bs[4*i]+bs[4*i+1], bs[4*i+2]+bs[4*i+3]
		} else {
			b0, b1 = bs[2*i], bs[2*i+1]
		}
		put32(m, (i*inputs+c)*4, uint32(uint16(b0))|uint32(uint16(b1))<<16)
	}
}

// packQ8Meta writes input c's parts of 32-element block b: 128·Σx (the weights' codes are w + 128) and its scale.
func packQ8Meta(m []byte, inputs, c int, x qActRow, b int) {
	var sum int32
	for _, v := range x.qs[32*b : 32*b+32] {
		sum += int32(v)
	}
	put32(m, 4*c, uint32(128*sum))
	put32(m, 4*inputs+4*c, math.Float32bits(x.d[b]))
}

// packQ81Meta writes input c's parts of 32-element block b as Q8_1 has them: its scale and its scaled sum s.
func packQ81Meta(m []byte, inputs, c int, x qActRow, b int) {
	put32(m, 4*c, math.Float32bits(x.s[b]))
	put32(m, 4*inputs+4*c, math.Float32bits(x.d[b]))
}

var (
	panelPool = sync.Pool{New: func() any { return new(tiledPanel) }}
	tiledPool = sync.Pool{New: func() any { return new(tiledActs) }}
)

// LinearQuantPrompt is LinearQuant for the rows of prompts (see the top of this file): on CPUs with AVX-512 VNNI,
// the tiled products of tiledFormats (every block type LinearQuant multiplies), whose float order is their own
// (for the types of rowsKernels, LinearQuant's too: LinearQuant itself); otherwise LinearQuant itself.
func LinearQuantPrompt(y, x []float32, w QuantMatrix, bias []float32) {
	if rowsKernels[w.Type] != nil {
		LinearQuant(y, x, w, bias) // its products are the tiled ones: the same bits
		return
	}
	f := tiledFormats[w.Type]
	if f == nil || f.asmKernel == nil {
		LinearQuant(y, x, w, bias)
		return
	}
	one := func(y, x []float32, w QuantMatrix, bias []float32) { linearTiled(y, x, w, bias, f, f.asmKernel) }
	if w.TwoPart && w.Type == quant.Q8_0 {
		linearTwoPart(y, x, w, bias, one)
		return
	}
	one(y, x, w, bias)
}

// linearTiled is LinearQuantPrompt's tiled path with the given kernel (f's assembly one, or its Go one in tests).
func linearTiled(y, x []float32, w QuantMatrix, bias []float32, f *tiledFormat, kernel quantTile) {
	in, out := w.Cols, w.Rows
	rows := len(x) / in
	nb := in / f.block
	t := packedInputs(w, x, rows, f, tileIn)
	defer tiledPool.Put(t)
	groups := (rows + tileIn - 1) / tileIn
	gq, gm := in*tileIn, nb*f.actMetaBytes(tileIn)
	parallelFor((out+tileRows-1)/tileRows, 0, func(lo, hi int) {
		p := panelPool.Get().(*tiledPanel)
		defer panelPool.Put(p)
		p.f = f
		acc := &p.acc
		for pi := lo; pi < hi; pi++ {
			o := pi * tileRows
			n := min(tileRows, out-o)
			p.fill(w, o, n)
			for g := range groups {
				clear(acc[:])
				kernel(p.codes, p.meta, t.qs[g*gq:(g+1)*gq], t.meta[g*gm:(g+1)*gm], nb, acc)
				storeTile(y, acc[:], bias, out, g*tileIn, min(tileIn, rows-g*tileIn), o, n)
			}
		}
	})
}

// storeTile sets outputs o..o+n of input rows r0..r0+inputs (y: out per row) to a tile's sums, acc[c·16 + r] for
// input r0+c and output o+r, plus bias where there is one.
func storeTile(y, acc, bias []float32, out, r0, inputs, o, n int) {
	for c := range inputs {
		yr := y[(r0+c)*out+o : (r0+c)*out+o+n]
		copy(yr, acc[c*tileRows:c*tileRows+n])
		if bias != nil {
			for i := range yr {
				yr[i] += bias[o+i]
			}
		}
	}
}

// tileGo is the tiled kernel in Go, which the assembly matches bit for bit: it adds to acc[c·16 + r] the
// products of panel row r with tile input c over nsb super-blocks of nsub sub-blocks.
func tileGo(codes, meta, qs, ameta []byte, nsb, nsub int, acc *[tileIn * tileRows]float32) {
	qps, np := 64/nsub, nsub/2
	mb, amb := (nsub+np+2)*64, (np+1)*4*tileIn
	for sb := range nsb {
		cd, m := codes[sb*4096:], meta[sb*mb:]
		xq, am := qs[sb*quant.QKK*tileIn:], ameta[sb*amb:]
		for c := range tileIn {
			dx := math.Float32frombits(u32(am, np*4*tileIn+4*c))
			for r := range tileRows {
				var isb, imin int32
				for s := range nsub {
					isb += int32(u32(m, (s*tileRows+r)*4)) * quadSum(cd, xq, r, c, s*qps, (s+1)*qps)
				}
				for i := range np {
					mi, bs := u32(m, nsub*64+(i*tileRows+r)*4), u32(am, (i*tileIn+c)*4)
					imin += int32(int16(mi))*int32(int16(bs)) + int32(int16(mi>>16))*int32(int16(bs>>16))
				}
				d := math.Float32frombits(u32(m, (nsub+np)*64+4*r))
				dm := math.Float32frombits(u32(m, (nsub+np+1)*64+4*r))
				t := float32(float32(isb) * d)
				u := float32(float32(imin) * dm)
				v := float32(t - u)
				acc[c*tileRows+r] += float32(v * dx)
			}
		}
	}
}

// tileQ8Go is the tiled kernel of 32-element blocks in Go, which the assembly (tileQ8) matches bit for bit: per
// block, acc[c·16 + r] += ((float(Σ code·x − 128·Σx))·d)·dx, no fused operations.
func tileQ8Go(codes, meta, qs, ameta []byte, nb int, acc *[tileIn * tileRows]float32) {
	for b := range nb {
		cd, m := codes[b*512:], meta[b*64:]
		xq, am := qs[b*32*tileIn:], ameta[b*8*tileIn:]
		for c := range tileIn {
			corr := int32(u32(am, 4*c))
			dx := math.Float32frombits(u32(am, 4*tileIn+4*c))
			for r := range tileRows {
				isum := quadSum(cd, xq, r, c, 0, 8)
				t := float32(float32(isum-corr) * math.Float32frombits(u32(m, 4*r)))
				acc[c*tileRows+r] += float32(t * dx)
			}
		}
	}
}

// tileQ81Go is the tiled kernel of 32-element blocks with a minimum (Q4_1, Q5_1) in Go, which the assembly
// (tileQ81) matches bit for bit: per block, acc[c·16 + r] += ((float(Σ code·x)·d)·dx) + m·s, no fused operations.
func tileQ81Go(codes, meta, qs, ameta []byte, nb int, acc *[tileIn * tileRows]float32) {
	for b := range nb {
		cd, m := codes[b*512:], meta[b*128:]
		xq, am := qs[b*32*tileIn:], ameta[b*8*tileIn:]
		for c := range tileIn {
			sx := math.Float32frombits(u32(am, 4*c))
			dx := math.Float32frombits(u32(am, 4*tileIn+4*c))
			for r := range tileRows {
				isum := quadSum(cd, xq, r, c, 0, 8)
				t := float32(float32(isum) * math.Float32frombits(u32(m, 4*r)))
				t = float32(t * dx)
				u := float32(math.Float32frombits(u32(m, 64+4*r)) * sx)
				acc[c*tileRows+r] += float32(t + u)
			}
		}
	}
}

// quadSum is Σ code·x over quads q0..q1-1 of a block: panel row r's codes cd against tile input c's values xq.
func quadSum(cd, xq []byte, r, c, q0, q1 int) int32 {
	var isum int32
	for q := q0; q < q1; q++ {
		for j := range 4 {
			isum += int32(cd[(q*tileRows+r)*4+j]) * int32(int8(xq[(q*tileIn+c)*4+j]))
		}
	}
	return isum
}
