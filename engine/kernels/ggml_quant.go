package kernels

import (
	"fmt"

	"github.com/layerstream/layerstream/quant"
)

// ggmlBlocks are the block formats LinearQuantGGML multiplies, with their block sizes and integer decoders.
var ggmlBlocks = map[quant.Type]struct {
	bytes int
	ints  func(q *[32]int8, b []byte) (d, m float32)
}{
	quant.Q8_0: {34, intsQ8_0},
	quant.Q4_1: {20, intsQ4_1},
}

// ggmlDots are LinearQuantGGML's dot products: assembly where the CPU has it, else dot32 with fused.
var ggmlDots = func() map[quant.Type]func(w []byte, x qActRow) float32 {
	m := ggmlAsmDots()
	if m == nil {
		m = map[quant.Type]func(w []byte, x qActRow) float32{}
	}
	for t, b := range ggmlBlocks {
		if m[t] == nil {
			m[t] = func(w []byte, x qActRow) float32 { return dot32(w, x, b.bytes, b.ints, true) }
		}
	}
	return m
}()

// GGMLSupports reports whether LinearQuantGGML multiplies matrices of type t, and if not, says why.
func GGMLSupports(t quant.Type) error {
	if _, ok := ggmlBlocks[t]; !ok {
		return fmt.Errorf("llama.cpp's arithmetic is reproduced for the Q8_0 and Q4_1 block formats, not %s (llama.cpp multiplies %s with other kernels: repacked blocks, K-quant dot products)", t, t)
	}
	return nil
}

// LinearQuantGGML is LinearQuant with llama.cpp's float operations, bit for bit (its x86 build with AVX2 or
// newer, whose dot products every prompt and decode step use for these formats): each input row quantized as
// LinearQuant does, each output the dot product of ggml's AVX2 kernel — eight lanes of integer sums of four
// products, each block's lanes scaled by the product of the two float16 scales and added with a fused
// multiply-add, the lanes summed as hsum_float_8, plus the fused sum of the blocks' minimum terms. w's type must
// be one GGMLSupports accepts.
func LinearQuantGGML(y, x []float32, w QuantMatrix, bias []float32) {
	dot := ggmlDots[w.Type]
	in, out := w.Cols, w.Rows
	rows := len(x) / in
	a := actPool.Get().(*qAct)
	defer actPool.Put(a)
	a.quantize(w.k.act, x[:rows*in], in)
	ParallelFor(out, func(lo, hi int) {
		for r := range rows {
			xr := a.row(r)
			for o := lo; o < hi; o++ {
				v := dot(w.Row(o), xr)
				if bias != nil {
					v += bias[o]
				}
				y[r*out+o] = v
			}
		}
	})
}
