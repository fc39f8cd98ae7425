package kernels

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"sync"

	"github.com/layerstream/layerstream/engine/kernels/ggml"
	"github.com/layerstream/layerstream/internal/grow"
	"github.com/layerstream/layerstream/quant"
)

// Block-quantized matrices are multiplied as llama.cpp multiplies them: each input row is quantized once per
// product to 8-bit integers per block (Q8_0: 32 values and a float16 scale; Q8_1: the same plus the scaled sum;
// Q8_K: 256 values, a float32 scale and sums of 16), the weight row's blocks are multiplied with those in
// integers (exact), and only each block's integer sums are scaled in float32. This is llama.cpp's arithmetic
// (its activation formats per weight type, its x86 rounding), so a GGUF file gives llama.cpp's tokens; it also
// makes the products integer work, which is where llama.cpp's CPU speed comes from. The activations' 8-bit
// rounding adds a relative error of about 2⁻⁹ per element to each product (measured against float32 on the
// same weights: docs/performance-log.md, quantization).
//
// The float32 part is fixed, so that the assembly (quant_amd64.s) and portable kernels give the same bits: for
// each block, eight lanes of integer sums (lane l: elements 4l..4l+3 of every 32, times their sub-block scales
// for K formats) are scaled and added to eight float32 accumulators (a multiply, then an add: never fused),
// which are summed at the end as hsum8 does; the offset terms of formats with a minimum go into one scalar
// accumulator. The codebook i-quants (IQ1-IQ3, grid.go) instead sum each super-block's integers whole and take
// one float update per super-block. llama.cpp adds each block's scaled lanes with one fused multiply-add instead; LinearQuantGGML
// (ggml_quant.go) does too, for Options.Arithmetic llama.cpp.
//
// Where the CPU has rows kernels for a type (with AVX-512 VNNI: the K-quants, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1,
// IQ4_NL and IQ4_XS; rowsKernels, rows.go), LinearQuant takes the tiled kernels' order instead, at any number of rows: one
// float update per super-block (or 32-element block) and output, the same bits as LinearQuantPrompt's, so that a
// k-row product reads each weight block once for all rows.

// QuantMatrix is a [Rows, Cols] weight matrix (the Hugging Face [out, in] layout) stored in a ggml block format,
// row by row, each row Cols/BlockElems whole blocks: read in place from the shard it was loaded from.
type QuantMatrix struct {
	Type       quant.Type
	Data       []byte
	Rows, Cols int
	// TwoPart makes a Q8_0 matrix take its inputs in two 8-bit parts, about 15 bits, instead of llama.cpp's
	// 8 (linearTwoPart): the engine sets it for the matrices of layerstream's own quantized shards.
	TwoPart  bool
	rowBytes int
	k        *quantKernel
	panels   *panelFormat // Data in 16-row panels (PackPanels); nil: in rows
}

// NewQuantMatrix checks that data holds a [rows, cols] matrix of type t and returns it.
func NewQuantMatrix(t quant.Type, data []byte, rows, cols int) (QuantMatrix, error) {
	f, ok := t.Format()
	k := quantKernels[t]
	if !ok || k == nil && t != quant.MXFP4 { // MXFP4's products are linearMXFP4's
		return QuantMatrix{}, fmt.Errorf("quantized matrix: %s is not a supported block type", t)
	}
	rb, err := f.RowBytes(int64(cols))
	if err != nil {
		return QuantMatrix{}, err
	}
	if rows <= 0 || cols <= 0 || int64(len(data)) != int64(rows)*rb {
		return QuantMatrix{}, fmt.Errorf("quantized matrix %s [%d, %d]: %d bytes, want %d", t, rows, cols, len(data), int64(rows)*rb)
	}
	return QuantMatrix{Type: t, Data: data, Rows: rows, Cols: cols, rowBytes: int(rb), k: k}, nil
}

// Row returns the bytes of row o: w's own, or of a matrix in panels a copy unpacked from its panel.
func (w QuantMatrix) Row(o int) []byte {
	if w.panels != nil {
		row := make([]byte, w.rowBytes)
		w.unpackRow(row, o)
		return row
	}
	return w.Data[o*w.rowBytes : (o+1)*w.rowBytes]
}

// RowRange returns rows [r0, r0+n) of w as a matrix of their own, sharing w's bytes (of a matrix in panels, where
// they are whole panels or end w; else a copy in rows).
func (w QuantMatrix) RowRange(r0, n int) QuantMatrix {
	v := w
	if w.panels != nil && (r0%tileRows != 0 || n%tileRows != 0 && r0+n != w.Rows) {
		v.Data, v.Rows, v.panels = make([]byte, n*w.rowBytes), n, nil
		for r := range n {
			w.unpackRow(v.Data[r*w.rowBytes:(r+1)*w.rowBytes], r0+r)
		}
		return v
	}
	v.Data, v.Rows = w.Data[r0*w.rowBytes:(r0+n)*w.rowBytes], n
	return v
}

// DequantizeRow writes row o's values into dst (len Cols), bit-exact with quant.Dequantize.
func (w QuantMatrix) DequantizeRow(dst []float32, o int) {
	if err := quant.Dequantize(w.Type, dst[:w.Cols], w.Row(o)); err != nil {
		panic(err) // NewQuantMatrix checked the sizes
	}
}

// actFormat is how input rows are quantized for a weight type (llama.cpp's vec_dot_type).
type actFormat int

const (
	actQ8_0 actFormat = iota // 32 int8 and a float16 scale per block
	actQ8_1                  // Q8_0 plus the block's scaled sum, as float16
	actQ8_K                  // 256 int8, a float32 scale and 16 sums of 16 per super-block
)

// qAct is input rows quantized for one product: row r's n values are qs[r·n:(r+1)·n], its block scales
// d[r·n/B:], and for Q8_1 the scaled sums s, for Q8_K the sums of 16 bsums (nil for the other formats). The
// buffers are reused from product to product (actPool).
type qAct struct {
	format   actFormat
	n        int
	qs       []int8
	d, s     []float32
	bsums    []int16
	sBuf     []float32
	bsumsBuf []int16
	sums     []int32 // quantizeQ8Blocks' block sums
}

// row returns row r's parts.
func (a *qAct) row(r int) qActRow { return a.rows(r, 1) }

// rows returns the parts of the n consecutive rows from r, one after the other.
func (a *qAct) rows(r, n int) qActRow {
	b := quant.QK
	if a.format == actQ8_K {
		b = quant.QKK
	}
	x := qActRow{qs: a.qs[r*a.n : (r+n)*a.n], d: a.d[r*a.n/b : (r+n)*a.n/b]}
	if a.s != nil {
		x.s = a.s[r*a.n/b : (r+n)*a.n/b]
	}
	if a.bsums != nil {
		x.bsums = a.bsums[r*a.n/16 : (r+n)*a.n/16]
	}
	return x
}

// qActRow is one quantized input row (see qAct).
type qActRow struct {
	qs    []int8
	d, s  []float32
	bsums []int16
}

var actPool = sync.Pool{New: func() any { return new(qAct) }}

// quantize quantizes the rows of x (n values each) into a, in format f.
func (a *qAct) quantize(f actFormat, x []float32, n int) {
	rows := len(x) / n
	a.format, a.n = f, n
	a.qs = grow.Slice(a.qs, rows*n)
	a.s, a.bsums = nil, nil
	switch f {
	case actQ8_0, actQ8_1:
		nb := rows * n / quant.QK
		a.d = grow.Slice(a.d, nb)
		if f == actQ8_1 {
			a.sBuf = grow.Slice(a.sBuf, nb)
			a.s = a.sBuf
		}
		a.sums = grow.Slice(a.sums, nb)
		if quantizeQ8Blocks(a.qs, x, a.d, a.sums) {
			for b, d := range a.d {
				if f == actQ8_1 {
					a.s[b] = roundHalf(d * float32(a.sums[b]))
				}
				a.d[b] = roundHalf(d)
			}
			return
		}
		for b := range nb {
			var s *float32
			if f == actQ8_1 {
				s = &a.s[b]
			}
			a.d[b] = quantizeQ8_0Block(a.qs[b*quant.QK:(b+1)*quant.QK], x[b*quant.QK:(b+1)*quant.QK], s)
		}
	case actQ8_K:
		nb := rows * n / quant.QKK
		a.d = grow.Slice(a.d, nb)
		a.bsumsBuf = grow.Slice(a.bsumsBuf, rows*n/16)
		a.bsums = a.bsumsBuf
		if quantizeQ8KBlocks(a.qs, a.bsums, x, a.d) {
			return
		}
		for b := range nb {
			a.d[b] = quantizeQ8_KBlock(a.qs[b*quant.QKK:(b+1)*quant.QKK], a.bsums[b*16:(b+1)*16], x[b*quant.QKK:(b+1)*quant.QKK])
		}
	}
}

// quantizeQ8_0Block quantizes 32 values as llama.cpp's x86 quantize_row_q8_0/q8_1 do (scale max|x|/127, values
// x·(127/max|x|) rounded half to even) and returns the scale rounded to float16 (as a float32); with s, it also
// sets *s to the float16 rounding of scale·Σq (Q8_1).
func quantizeQ8_0Block(q []int8, x []float32, s *float32) float32 {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	var id float32
	if amax != 0 {
		id = 127 / amax
	}
	sum := int32(0)
	for i, v := range x {
		r := int32(math.RoundToEven(float64(v * id)))
		r = max(-128, min(127, r))
		q[i] = int8(r)
		sum += r
	}
	if s != nil {
		*s = roundHalf(d * float32(sum))
	}
	return roundHalf(d)
}

// roundHalf rounds v to float16 and back.
func roundHalf(v float32) float32 { return quant.HalfToFloat32(quant.Float32ToHalf(v)) }

// quantizeQ8_KBlock quantizes 256 values as llama.cpp's quantize_row_q8_K_ref does (scale -127/x_max where
// x_max is the value of largest magnitude, rounding half to even, at most 127), fills the sums of 16 and
// returns the float32 scale. A block holding a NaN gets a NaN scale (and zeros), so that the NaN reaches the
// products, where llama.cpp ignores it.
func quantizeQ8_KBlock(q []int8, bsums []int16, x []float32) float32 {
	var amax, vmax float32
	nan := false
	for _, v := range x {
		if a := float32(math.Abs(float64(v))); a > amax {
			amax, vmax = a, v
		}
		nan = nan || v != v
	}
	if amax == 0 || nan {
		clear(q[:quant.QKK])
		clear(bsums[:16])
		if nan {
			return float32(math.NaN()) // reaches the products and the engine's NaN checks, where llama.cpp drops it
		}
		return 0
	}
	iscale := -127 / vmax
	for i, v := range x {
		q[i] = int8(min(127, nearestInt(float32(iscale*v)))) // rounded before nearestInt adds its constant: never fused
	}
	for j := range 16 {
		var s int16
		for _, v := range q[16*j : 16*j+16] {
			s += int16(v)
		}
		bsums[j] = s
	}
	return 1 / iscale
}

// nearestInt rounds half to even, as ggml's nearest_int does (|f| ≤ 2^22).
func nearestInt(f float32) int32 {
	v := f + 12582912
	return int32(math.Float32bits(v)&0x007fffff) - 0x00400000
}

// hsum8 sums eight lanes as the assembly does: (a0+a4 + a2+a6) + (a1+a5 + a3+a7).
func hsum8(a *[8]float32) float32 {
	t0, t1, t2, t3 := a[0]+a[4], a[1]+a[5], a[2]+a[6], a[3]+a[7]
	return (t0 + t2) + (t1 + t3)
}

// quantKernel is one block format's product: its activation format and dot(row, x), the dot product of a weight
// row with a quantized input row.
type quantKernel struct {
	act actFormat
	dot func(w []byte, x qActRow) float32
	// in4, where an assembly kernel has it, sets y[0], y[ystride], y[2·ystride] and y[3·ystride] to dot of the row w
	// with four consecutive input rows (x spans them), bit for bit as dot would: a prompt's rows share each
	// unpacked block.
	in4 func(w []byte, x qActRow, y []float32, ystride int)
	// rows, where set, sets y[r·ystride] for r < n (2 ≤ n ≤ rowsMost) to dot of the row w with the n consecutive
	// input rows x spans, bit for bit as dot would, decoding each weight block once for all of them (the codebook
	// i-quants, grid.go).
	rows func(w []byte, x qActRow, n int, y []float32, ystride int)
	// rowsFrom is the number of input rows from which LinearQuant takes rows (fewer: dot for each row).
	rowsFrom int
	// widen, when set, rewrites a row of this format (src) as a row of Q8_0 blocks (dst) holding the same
	// integers and the same float16 scales: Q8_0's kernels then give the same products, bit for bit (the same
	// integer lanes, the same float operations per block), with no decoding left in the loop over input rows.
	widen func(dst, src []byte)
}

// widenRows is the number of input rows from which LinearQuant widens weight rows once (widen) rather than
// decode them again for each input row: a prompt's.
const widenRows = 4

// quantKernels are the kernels LinearQuant uses: the portable ones, replaced by assembly where the CPU and the
// format have it (asmKernels, quant_amd64.go), with the portable widening.
var quantKernels = func() map[quant.Type]*quantKernel {
	m := maps.Clone(portableKernels)
	for t, k := range asmKernels() {
		k.widen = portableKernels[t].widen // widening is Go, whatever multiplies
		m[t] = k
	}
	return m
}()

// portableKernels are the Go kernels, which the assembly ones match bit for bit.
var portableKernels = func() map[quant.Type]*quantKernel {
	m := map[quant.Type]*quantKernel{
		quant.Q8_0: {act: actQ8_0, dot: dotQ8_0Go},
		quant.Q4_0: {act: actQ8_0, dot: dotQ4_0Go, widen: widenQ4_0},
		quant.Q5_0: {act: actQ8_0, dot: dotQ5_0Go, widen: widenQ5_0},
		quant.Q4_1: {act: actQ8_1, dot: dotQ4_1Go},
		quant.Q5_1: {act: actQ8_1, dot: dotQ5_1Go},
		quant.Q2_K: {act: actQ8_K, dot: dotKGo(quant.Q2_K)},
		quant.Q3_K: {act: actQ8_K, dot: dotKGo(quant.Q3_K)},
		quant.Q4_K: {act: actQ8_K, dot: dotKGo(quant.Q4_K)},
		quant.Q5_K: {act: actQ8_K, dot: dotKGo(quant.Q5_K)},
		quant.Q6_K: {act: actQ8_K, dot: dotKGo(quant.Q6_K)},
		// llama.cpp multiplies IQ4_NL by Q8_0 activations and IQ4_XS by Q8_K ones, its grid values as the integers.
		quant.IQ4_NL: {act: actQ8_0, dot: func(w []byte, x qActRow) float32 { return dot32(w, x, 18, intsIQ4_NL, false) }, widen: widenIQ4_NL},
		quant.IQ4_XS: {act: actQ8_K, dot: dotKGo(quant.IQ4_XS)},
	}
	maps.Copy(m, gridKernels(false))
	return m
}()

// lanes32 adds the products of 32 weights w and activations a into eight integer lanes (lane l: elements
// 4l..4l+3), each times scale(l) when scale is not nil.
func lanes32(acc *[8]int32, w, a []int8, scaleLo, scaleHi int32) {
	for l := range 8 {
		var s int32
		for k := range 4 {
			s += int32(w[4*l+k]) * int32(a[4*l+k])
		}
		if l < 4 {
			acc[l] += scaleLo * s
		} else {
			acc[l] += scaleHi * s
		}
	}
}

// addLanes adds d·lanes to acc, a multiply then an add per lane.
func addLanes(acc *[8]float32, d float32, lanes *[8]int32) {
	for l := range 8 {
		acc[l] += float32(d * float32(lanes[l]))
	}
}

// fmaLanes adds d·lanes to acc with one fused multiply-add per lane, as llama.cpp's x86 kernels do
// (LinearQuantGGML).
func fmaLanes(acc *[8]float32, d float32, lanes *[8]int32) {
	for l := range 8 {
		acc[l] = ggml.FMA32(d, float32(lanes[l]), acc[l])
	}
}

// dot32 is the product of a row of 32-element blocks (blockBytes each, decoded to signed or unsigned ints by
// ints, which also returns the block's scale and minimum) with a Q8_0/Q8_1 row. With fused, each block's scaled
// lanes and minimum term are fused multiply-adds, as llama.cpp's x86 kernels compute them (LinearQuantGGML).
func dot32(w []byte, x qActRow, blockBytes int, ints func(b []byte) (q [32]int8, d, m float32), fused bool) float32 {
	var acc [8]float32
	var summs float32
	for b := range len(x.d) {
		q, d, m := ints(w[b*blockBytes : (b+1)*blockBytes])
		var lanes [8]int32
		lanes32(&lanes, q[:], x.qs[32*b:32*b+32], 1, 1)
		switch {
		case fused:
			fmaLanes(&acc, d*x.d[b], &lanes)
			if x.s != nil {
				summs = ggml.FMA32(m, x.s[b], summs)
			}
		default:
			addLanes(&acc, d*x.d[b], &lanes)
			if x.s != nil {
				summs += float32(m * x.s[b])
			}
		}
	}
	return hsum8(&acc) + summs
}

func halfAt(b []byte, off int) float32 {
	return quant.HalfToFloat32(binary.LittleEndian.Uint16(b[off:]))
}

func intsQ8_0(b []byte) (q [32]int8, d, m float32) {
	for i := range 32 {
		q[i] = int8(b[2+i])
	}
	return q, halfAt(b, 0), 0
}

func dotQ8_0Go(w []byte, x qActRow) float32 { return dot32(w, x, 34, intsQ8_0, false) }

func intsQ4_0(b []byte) (q [32]int8, d, m float32) {
	for i := range 16 {
		q[i], q[i+16] = int8(b[2+i]&0xf)-8, int8(b[2+i]>>4)-8
	}
	return q, halfAt(b, 0), 0
}

func dotQ4_0Go(w []byte, x qActRow) float32 { return dot32(w, x, 18, intsQ4_0, false) }

func intsIQ4_NL(b []byte) (q [32]int8, d, m float32) {
	for i := range 16 {
		q[i], q[i+16] = quant.IQ4Values[b[2+i]&0xf], quant.IQ4Values[b[2+i]>>4]
	}
	return q, halfAt(b, 0), 0
}

func intsQ5_0(b []byte) (q [32]int8, d, m float32) {
	qh := binary.LittleEndian.Uint32(b[2:])
	for i := range 16 {
		q[i] = int8(b[6+i]&0xf|byte(qh>>i&1)<<4) - 16
		q[i+16] = int8(b[6+i]>>4|byte(qh>>(i+16)&1)<<4) - 16
	}
	return q, halfAt(b, 0), 0
}

func dotQ5_0Go(w []byte, x qActRow) float32 { return dot32(w, x, 22, intsQ5_0, false) }

// clearBitsF0[b] has 0xf0 in byte i where bit i of b is clear: Q5_0's high bits as the sign-extension of
// nibble - 16 (ggml's x86 trick).
var clearBitsF0 = func() (t [256]uint64) {
	for b := range t {
		for i := range 8 {
			if b>>i&1 == 0 {
				t[b] |= 0xf0 << (8 * i)
			}
		}
	}
	return t
}()

// widenQ5_0 rewrites Q5_0 blocks (22 bytes) as Q8_0 blocks (34 bytes) of the same values: int8 (nibble |
// high<<4) - 16, eight at a time.
func widenQ5_0(dst, src []byte) {
	const lo = 0x0f0f0f0f0f0f0f0f
	for b := range len(src) / 22 {
		s, d := src[22*b:22*b+22], dst[34*b:34*b+34]
		d[0], d[1] = s[0], s[1]
		qh := s[2:6]
		n0, n1 := binary.LittleEndian.Uint64(s[6:]), binary.LittleEndian.Uint64(s[14:])
		binary.LittleEndian.PutUint64(d[2:], n0&lo|clearBitsF0[qh[0]])
		binary.LittleEndian.PutUint64(d[10:], n1&lo|clearBitsF0[qh[1]])
		binary.LittleEndian.PutUint64(d[18:], n0>>4&lo|clearBitsF0[qh[2]])
		binary.LittleEndian.PutUint64(d[26:], n1>>4&lo|clearBitsF0[qh[3]])
	}
}

// widenIQ4_NL writes IQ4_NL blocks (src) as Q8_0 blocks (dst): the grid values as the codes, the same scale.
func widenIQ4_NL(dst, src []byte) {
	for b := range len(src) / 18 {
		s, d := src[18*b:18*b+18], dst[34*b:34*b+34]
		d[0], d[1] = s[0], s[1]
		for i, v := range s[2:18] {
			d[2+i], d[18+i] = byte(quant.IQ4Values[v&0xf]), byte(quant.IQ4Values[v>>4])
		}
	}
}

// widenQ4_0 rewrites Q4_0 blocks (18 bytes) as Q8_0 blocks of the same values: int8 nibble - 8, as (nibble +
// 0x78) ^ 0x80 per byte, which never carries.
func widenQ4_0(dst, src []byte) {
	const lo, b78, b80 = 0x0f0f0f0f0f0f0f0f, 0x7878787878787878, 0x8080808080808080
	for b := range len(src) / 18 {
		s, d := src[18*b:18*b+18], dst[34*b:34*b+34]
		d[0], d[1] = s[0], s[1]
		n0, n1 := binary.LittleEndian.Uint64(s[2:]), binary.LittleEndian.Uint64(s[10:])
		binary.LittleEndian.PutUint64(d[2:], (n0&lo+b78)^b80)
		binary.LittleEndian.PutUint64(d[10:], (n1&lo+b78)^b80)
		binary.LittleEndian.PutUint64(d[18:], (n0>>4&lo+b78)^b80)
		binary.LittleEndian.PutUint64(d[26:], (n1>>4&lo+b78)^b80)
	}
}

func intsQ4_1(b []byte) (q [32]int8, d, m float32) {
	for i := range 16 {
		q[i], q[i+16] = int8(b[4+i]&0xf), int8(b[4+i]>>4)
	}
	return q, halfAt(b, 0), halfAt(b, 2)
}

func dotQ4_1Go(w []byte, x qActRow) float32 { return dot32(w, x, 20, intsQ4_1, false) }

func intsQ5_1(b []byte) (q [32]int8, d, m float32) {
	qh := binary.LittleEndian.Uint32(b[4:])
	for i := range 16 {
		q[i] = int8(b[8+i]&0xf | byte(qh>>i&1)<<4)
		q[i+16] = int8(b[8+i]>>4 | byte(qh>>(i+16)&1)<<4)
	}
	return q, halfAt(b, 0), halfAt(b, 2)
}

func dotQ5_1Go(w []byte, x qActRow) float32 { return dot32(w, x, 24, intsQ5_1, false) }

// kInts is a K-quant super-block as integers: 256 values, a scale and a minimum per 16 elements (minimums
// multiply the activations' sums of 16), and the float16 d and dmin.
type kInts struct {
	q       [quant.QKK]int8
	sc, mn  [16]int32
	d, dmin float32
	hasMin  bool
	// offset, when not 0, is subtracted from every weight q, in the integers: lane l less offset·(sc[2l]·bsums[2l]
	// + sc[2l+1]·bsums[2l+1]) (Q6_K's -32, as ggml's x86 kernel takes it).
	offset int32
}

// kMins says how a K-quant product adds its minimum terms (formats with a minimum: Q2_K, Q4_K, Q5_K).
type kMins int

const (
	// minsSum: one float sum of each super-block's dmin·d·(integer sum), multiplied then added (the portable
	// kernels).
	minsSum kMins = iota
	// minsFused: that sum with fused multiply-adds (llama.cpp's ggml_vec_dot_q5_K_q8_K on x86; LinearQuantGGML).
	minsFused
	// minsFused4: four float lanes, lane k fused with the minimum terms of sub-blocks 2k and 2k+1, summed as
	// (l0+l2)+(l1+l3) (llama.cpp's ggml_vec_dot_q4_K_q8_K on x86; LinearQuantGGML).
	minsFused4
	// minsLanes: the eight lanes of the products, lane k fused with the negated minimum terms of the sixteenths 2k
	// and 2k+1 before the super-block's products (llama.cpp's ggml_vec_dot_q2_K_q8_K on x86; dotKVec).
	minsLanes
)

// dotKGo returns the portable product of a K-quant format t (its super-blocks decoded by kDecode, called directly
// so that the decoded block stays on the stack).
func dotKGo(t quant.Type) func(w []byte, x qActRow) float32 {
	return func(w []byte, x qActRow) float32 {
		var acc [8]float32
		var summs [4]float32
		var k kInts
		bb := len(w) / len(x.d)
		for b := range len(x.d) {
			kDecode(t, &k, w[b*bb:(b+1)*bb])
			var lanes [8]int32
			for g := range 8 {
				lanes32(&lanes, k.q[32*g:32*g+32], x.qs[quant.QKK*b+32*g:quant.QKK*b+32*g+32], k.sc[2*g], k.sc[2*g+1])
			}
			if k.offset != 0 {
				for l := range 8 {
					lanes[l] -= k.offset * (k.sc[2*l]*int32(x.bsums[16*b+2*l]) + k.sc[2*l+1]*int32(x.bsums[16*b+2*l+1]))
				}
			}
			addLanes(&acc, k.d*x.d[b], &lanes)
			if k.hasMin {
				addMins(&acc, &summs, &k, x.bsums[16*b:16*b+16], x.d[b], minsSum)
			}
		}
		return hsum8(&acc) - sumMins(&summs, minsSum)
	}
}

// addMins adds a super-block's minimum terms (k's minimums times bsums, the activations' sums of 16, times
// k.dmin and the activations' scale xd) as mins says: to summs, or (minsLanes) negated to the product lanes acc,
// which must then come before the super-block's products.
func addMins(acc *[8]float32, summs *[4]float32, k *kInts, bsums []int16, xd float32, mins kMins) {
	dmin := k.dmin * xd
	if mins == minsLanes {
		for l := range 8 {
			acc[l] = ggml.FMA32(-dmin, float32(k.mn[2*l]*int32(bsums[2*l])+k.mn[2*l+1]*int32(bsums[2*l+1])), acc[l])
		}
		return
	}
	var mi [4]int32 // lane j: the sub-blocks of 32 elements 2j and 2j+1
	for j := range 16 {
		mi[j/4] += k.mn[j] * int32(bsums[j])
	}
	switch mins {
	case minsSum:
		summs[0] += float32(dmin * float32(mi[0]+mi[1]+mi[2]+mi[3]))
	case minsFused:
		summs[0] = ggml.FMA32(dmin, float32(mi[0]+mi[1]+mi[2]+mi[3]), summs[0])
	case minsFused4:
		for j := range 4 {
			summs[j] = ggml.FMA32(dmin, float32(mi[j]), summs[j])
		}
	}
}

// sumMins is the sum of the minimum terms addMins added to summs (0 for minsLanes): llama.cpp adds them negated (its dmin is -d·dmin), the
// same bits as subtracting them.
func sumMins(summs *[4]float32, mins kMins) float32 {
	if mins == minsFused4 {
		return (summs[0] + summs[2]) + (summs[1] + summs[3])
	}
	return summs[0]
}

// kScales decodes the scales of a K-quant super-block of type t (everything but its codes) into k.
func kScales(t quant.Type, k *kInts, b []byte) {
	switch t {
	case quant.Q2_K:
		decodeQ2_KScales(k, b)
	case quant.Q3_K:
		decodeQ3_KScales(k, b)
	case quant.Q4_K, quant.Q5_K:
		decodeQ4_KScales(k, b)
	case quant.Q6_K:
		decodeQ6_KScales(k, b)
	case quant.IQ4_XS:
		decodeIQ4_XSScales(k, b)
	default:
		panic(fmt.Sprintf("kernels: kScales of %s", t))
	}
}

// kDecode decodes a whole K-quant super-block of type t into k.
func kDecode(t quant.Type, k *kInts, b []byte) {
	switch t {
	case quant.Q2_K:
		decodeQ2_KInts(k, b)
	case quant.Q3_K:
		decodeQ3_KInts(k, b)
	case quant.Q4_K:
		decodeQ4_KInts(k, b)
	case quant.Q5_K:
		decodeQ5_KInts(k, b)
	case quant.Q6_K:
		decodeQ6_KInts(k, b)
	case quant.IQ4_XS:
		decodeIQ4_XSInts(k, b)
	default:
		if !quant.IsGrid(t) {
			panic(fmt.Sprintf("kernels: kDecode of %s", t))
		}
		k.d, k.hasMin, k.offset = quant.GridInts(t, &k.q, &k.sc, b), false, 0
	}
}

// decodeQ4_KScales decodes a Q4_K or Q5_K super-block's d, dmin, scales and minimums (their first 16 bytes).
func decodeQ4_KScales(k *kInts, b []byte) {
	k.d, k.dmin, k.hasMin = halfAt(b, 0), halfAt(b, 2), true
	for j := range 8 {
		sc, m := quant.ScaleMinK4(j, b[4:16])
		k.sc[2*j], k.sc[2*j+1], k.mn[2*j], k.mn[2*j+1] = int32(sc), int32(sc), int32(m), int32(m)
	}
}

func decodeQ4_KInts(k *kInts, b []byte) {
	decodeQ4_KScales(k, b)
	qs := b[16:144]
	for g := range 4 {
		for l := range 32 {
			k.q[64*g+l], k.q[64*g+32+l] = int8(qs[32*g+l]&0xf), int8(qs[32*g+l]>>4)
		}
	}
}

func decodeQ5_KInts(k *kInts, b []byte) {
	decodeQ4_KScales(k, b)
	qh, qs := b[16:48], b[48:176]
	for g := range 4 {
		for l := range 32 {
			k.q[64*g+l] = int8(qs[32*g+l]&0xf | (qh[l]>>(2*g)&1)<<4)
			k.q[64*g+32+l] = int8(qs[32*g+l]>>4 | (qh[l]>>(2*g+1)&1)<<4)
		}
	}
}

// decodeQ6_KScales decodes a Q6_K super-block's d and scales, and sets its offset (32).
func decodeQ6_KScales(k *kInts, b []byte) {
	k.d, k.hasMin, k.offset = halfAt(b, 208), false, 32
	for j := range 16 {
		k.sc[j] = int32(int8(b[192+j]))
	}
}

func decodeQ6_KInts(k *kInts, b []byte) {
	decodeQ6_KScales(k, b)
	ql, qh := b[:128], b[128:192]
	for n := range 2 { // q in 0..63, the -32 by offset
		l4, h4 := ql[64*n:], qh[32*n:]
		for l := range 32 {
			k.q[128*n+l] = int8(l4[l]&0xf | (h4[l]&3)<<4)
			k.q[128*n+32+l] = int8(l4[l+32]&0xf | (h4[l]>>2&3)<<4)
			k.q[128*n+64+l] = int8(l4[l]>>4 | (h4[l]>>4&3)<<4)
			k.q[128*n+96+l] = int8(l4[l+32]>>4 | (h4[l]>>6&3)<<4)
		}
	}
}

// decodeQ2_KScales decodes a Q2_K super-block's d, dmin, scales and minimums.
func decodeQ2_KScales(k *kInts, b []byte) {
	k.d, k.dmin, k.hasMin = halfAt(b, 80), halfAt(b, 82), true
	for j := range 16 {
		k.sc[j], k.mn[j] = int32(b[j]&0xf), int32(b[j]>>4)
	}
}

// decodeIQ4_XSScales decodes an IQ4_XS super-block's d and scales (one per 32, as two equal sixteenths).
func decodeIQ4_XSScales(k *kInts, b []byte) {
	k.d, k.hasMin, k.offset = halfAt(b, 0), false, 0
	for j := range 8 {
		sc := int32(quant.IQ4XSScale(b, j))
		k.sc[2*j], k.sc[2*j+1] = sc, sc
	}
}

// decodeIQ4_XSInts decodes an IQ4_XS super-block: grid values as the integers, no minimum.
func decodeIQ4_XSInts(k *kInts, b []byte) {
	decodeIQ4_XSScales(k, b)
	for j := range 8 {
		q := b[8+16*j : 8+16*j+16]
		for l := range 16 {
			k.q[32*j+l], k.q[32*j+16+l] = quant.IQ4Values[q[l]&0xf], quant.IQ4Values[q[l]>>4]
		}
	}
}

func decodeQ2_KInts(k *kInts, b []byte) {
	decodeQ2_KScales(k, b)
	qs := b[16:80]
	for i := range 16 {
		grp, shift, half := i/8, 2*((i/2)%4), 16*(i%2)
		for l := range 16 {
			k.q[16*i+l] = int8(qs[32*grp+half+l] >> shift & 3)
		}
	}
}

// decodeQ3_KScales decodes a Q3_K super-block's d and 16 signed 6-bit scales.
func decodeQ3_KScales(k *kInts, b []byte) {
	k.d, k.hasMin, k.offset = halfAt(b, 108), false, 0
	for i := range 16 {
		k.sc[i] = int32(quant.ScaleQ3K(i, b[96:108]))
	}
}

func decodeQ3_KInts(k *kInts, b []byte) {
	decodeQ3_KScales(k, b)
	hmask, qs := b[:32], b[32:96]
	for i := range 16 {
		grp, shift, half := i/8, 2*((i/2)%4), 16*(i%2)
		for l := range 16 {
			q := int8(qs[32*grp+half+l] >> shift & 3)
			if hmask[half+l]>>(i/2)&1 == 0 {
				q -= 4
			}
			k.q[16*i+l] = q
		}
	}
}

// LinearQuant sets y[r·out+o] = x[r·in:(r+1)·in] · w's row o (+ bias[o] when bias is not nil) for every input row
// r of x and every output o, where in = w.Cols and out = w.Rows: Linear for a block-quantized matrix, computed as
// llama.cpp computes it (see the top of this file), except that a Q8_0 matrix with TwoPart takes its inputs in
// two parts (linearTwoPart), the types of rowsKernels take the tiled order (linearQuantRows) and an MXFP4 matrix
// float32 inputs (linearMXFP4). The input rows are quantized once; then each weight row, read once, serves the block of
// input rows (the matrix is never expanded), and each output is computed by the same dot product whatever the
// number of rows, so a sequence gives the same bits alone and in a batch.
func LinearQuant(y, x []float32, w QuantMatrix, bias []float32) {
	if w.Type == quant.MXFP4 { // float32 inputs (mxfp4.go)
		linearMXFP4(y, x, w, bias, mxfp4Best())
		return
	}
	if w.panels != nil {
		linearPanels(y, x, w, bias)
		return
	}
	one := linearQuant
	if f := rowsKernels[w.Type]; f != nil {
		one = func(y, x []float32, w QuantMatrix, bias []float32) { linearQuantRows(y, x, w, bias, f) }
	}
	if w.TwoPart && w.Type == quant.Q8_0 {
		linearTwoPart(y, x, w, bias, one)
		return
	}
	one(y, x, w, bias)
}

// Two-part inputs. Rounding the inputs to 8 bits costs a Q8_0 matrix most of its accuracy: on SmolLM2-135M with
// Q8_0 weights, the mean KL divergence from the unquantized model is 3.0e-3 with 8-bit inputs and 1.1e-3 with
// float32 ones (5.7e-4 with weights from quant.QuantizeQ8_0Search, 3.8e-4 weighted by an importance matrix;
// scripts/fixtures/q8_accuracy_sim.py), because a block of inputs that holds
// one of the model's outlier activations (thousands, where the rest are about 1) rounds the others to zero.
// linearTwoPart multiplies by x = hi + lo·2⁻⁸ instead: hi is x as the Q8_0 kernels quantize it, lo is 2⁸ times
// what that rounding left, quantized the same way, so each input keeps about 15 bits (more than bf16). Both go
// through the same integer kernels as 2·rows input rows, so each weight row is still read once per product, and
// the integer work doubles: resident SmolLM2-135M q8 shards prefill at about half the rate and decode 1.3×
// slower, where streaming from disk the products are not the bound, and a matrix too large for the caches
// (a tied Q8_0 head) costs no more. The engine asks for it on the shards it quantizes itself (split --quantize,
// where the user chose accuracy); GGUF files keep the activation formats llama.cpp computes them with.

// twoPartScale is 2⁸, the factor of the second part: the first part's rounding error is at most half of its
// step, max|x|/254, so lo's largest magnitude is about the block's.
const twoPartScale = 256

var twoPartX, twoPartY = sync.Pool{New: func() any { return new([]float32) }}, sync.Pool{New: func() any { return new([]float32) }}

// linearTwoPart computes LinearQuant with two-part inputs (above), with linear the one-part product (linearQuant
// or the tiled one).
func linearTwoPart(y, x []float32, w QuantMatrix, bias []float32, linear func(y, x []float32, w QuantMatrix, bias []float32)) {
	in, out := w.Cols, w.Rows
	rows := len(x) / in
	n := rows * in
	px, x2 := scratch[float32](&twoPartX, 2*n)
	defer twoPartX.Put(px)
	py, y2 := scratch[float32](&twoPartY, 2*rows*out)
	defer twoPartY.Put(py)
	copy(x2, x[:n])
	a := actPool.Get().(*qAct)
	a.quantize(w.k.act, x[:n], in)
	lo := x2[n:]
	for b, d := range a.d {
		xs, qs, ls := x[b*quant.QK:][:quant.QK], a.qs[b*quant.QK:][:quant.QK], lo[b*quant.QK:][:quant.QK]
		for j, q := range qs {
			ls[j] = (xs[j] - d*float32(q)) * twoPartScale // d·q is exact: an 11-bit scale times an 8-bit integer
		}
	}
	actPool.Put(a)
	linear(y2, x2, w, nil)
	hi := y2[:rows*out]
	AxpyF32(hi, 1.0/twoPartScale, y2[rows*out:]) // exact products: fused or not, the same sums
	copy(y, hi)
	addBias(y, bias, rows, out)
}

// linearQuant is LinearQuant with one-part inputs for every type.
func linearQuant(y, x []float32, w QuantMatrix, bias []float32) {
	in, out := w.Cols, w.Rows
	rows := len(x) / in
	a := actPool.Get().(*qAct)
	defer actPool.Put(a)
	a.quantize(w.k.act, x[:rows*in], in)
	xr, x4 := make([]qActRow, rows), make([]qActRow, rows/4) // each input row, and each four from 4i
	for r := range xr {
		xr[r] = a.row(r)
	}
	for i := range x4 {
		x4[i] = a.rows(4*i, 4)
	}
	var xg []qActRow // with a rows kernel, the input rows rowsMost at a time (the last group maybe fewer)
	if w.k.rows != nil && rows >= w.k.rowsFrom {
		for r := 0; r < rows; r += rowsMost {
			xg = append(xg, a.rows(r, min(rowsMost, rows-r)))
		}
	}
	dot, rb := w.k.dot, w.rowBytes
	in4, widen := w.k.in4, w.k.widen
	if widen != nil && rows >= widenRows {
		k := quantKernels[quant.Q8_0]                   // widened rows are Q8_0 rows: Q8_0's kernels, all of them
		dot, in4, rb = k.dot, k.in4, w.Cols/quant.QK*34 // every format widened has 32-element blocks
	} else {
		widen = nil
	}
	ParallelFor(out, func(lo, hi int) {
		var wide []byte // the row at hand widened to Q8_0
		if widen != nil {
			wide = make([]byte, rb)
		}
		for o := lo; o < hi; o++ {
			wr := w.Row(o)
			if widen != nil {
				widen(wide, wr)
				wr = wide
			}
			if xg != nil {
				rowsGroups(wr, xg, rows, w.k, y[o:], out)
				continue
			}
			r := 0
			if in4 != nil {
				for ; r+4 <= rows; r += 4 {
					in4(wr, x4[r/4], y[r*out+o:], out)
				}
			}
			for ; r < rows; r++ {
				y[r*out+o] = dot(wr, xr[r])
			}
		}
		if bias != nil {
			for r := range rows {
				yr := y[r*out : (r+1)*out]
				for o := lo; o < hi; o++ {
					yr[o] += bias[o]
				}
			}
		}
	})
}

// rowsGroups sets y[r·ystride] to the product of the weight row w with each of the rows input rows, in the groups
// xg (rowsMost rows each, the last maybe fewer), by k's rows kernel, or a group of one row by its dot.
func rowsGroups(w []byte, xg []qActRow, rows int, k *quantKernel, y []float32, ystride int) {
	for g, x := range xg {
		yg := y[g*rowsMost*ystride:]
		if n := min(rowsMost, rows-g*rowsMost); n > 1 {
			k.rows(w, x, n, yg, ystride)
		} else {
			yg[0] = k.dot(w, x)
		}
	}
}
