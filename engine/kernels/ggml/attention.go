package ggml

import (
	"sync"

	"github.com/layerstream/layerstream/internal/grow"
	"github.com/layerstream/layerstream/quant"
)

// scratch holds Attention's buffers between calls.
type scratch struct{ scores, vt, qr []float32 }

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// roundHalf rounds x in place to float16 (ties to even, overflow to ±Inf) as ggml's conversions do.
func roundHalf(x []float32) {
	for i, v := range x {
		x[i] = quant.HalfToFloat32(quant.Float32ToHalf(v))
	}
}

// Attention is llama.cpp's causal attention without flash attention over a float32 cache (its build_attn_mha:
// scores, soft_max_ext, then the values) for one sequence and one key/value head, whose heads query heads share:
//
//   - q holds heads×t query rows of d values (head-major), the queries of positions past…past+t-1;
//   - k and v hold the key and value rows (d values each) of positions 0…past+t-1 in order: the cache cells of a
//     sequence that started at cell 0;
//   - out receives, for query row j of head h, d values at out[(j·outPos + h·d):].
//
// Each score is VecDot of a key with a query; the softmax (SoftMax, scale, causal mask) runs over the cells
// rounded up to 64 (llama.cpp pads to 256: the extra cells are masked and add exact zeros); each output value is
// the dot product of a value column with the probabilities, which llama.cpp computes with tinyBLAS (Dot16) when
// the batch brings two or more tokens and d is a multiple of 4, else with VecDot. batch is the number of tokens
// the llama.cpp batch evaluates at once.
//
// With half, the cache is float16 (llama.cpp's default): k and v hold float16 values (widened), and llama.cpp
// rounds each query and each row of probabilities to float16 before its products (their vec_dot_type), which
// then take ggml_vec_dot_f16 (VecDotF16) for one token and tinyBLAS over the widened values (Dot16) for more,
// scores included when d is a multiple of 16.
func Attention(out []float32, outPos int, q, k, v []float32, heads, t, past, d int, scale float32, batch int, half bool) {
	n := past + t
	cells := (n + 63) &^ 63
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	sc.scores, sc.vt, sc.qr = grow.Slice(sc.scores, cells), grow.Slice(sc.vt, d*cells), grow.Slice(sc.qr, d)
	scores, qr := sc.scores, sc.qr
	vt := sc.vt // v transposed, as llama.cpp's cache holds it without flash attention
	clear(vt)
	for p := range n {
		for j := range d {
			vt[j*cells+p] = v[p*d+j]
		}
	}
	score, dot := VecDot, VecDot
	switch {
	case half && batch >= 2:
		score, dot = VecDotF16, Dot16
		if d%16 == 0 {
			score = Dot16
		}
	case half:
		score, dot = VecDotF16, VecDotF16
	case batch >= 2:
		dot = Dot16
	}
	if d%4 != 0 {
		dot = VecDot // tinyBLAS declines it
		if half {
			dot = VecDotF16
		}
	}
	for h := range heads {
		for j := range t {
			copy(qr, q[(h*t+j)*d:][:d])
			if half {
				roundHalf(qr)
			}
			for p := range cells {
				scores[p] = 0
				if p < n {
					scores[p] = score(k[p*d:(p+1)*d], qr)
				}
			}
			pos := past + j
			SoftMax(scores, scores, scale, func(p int) bool { return p > pos })
			if half {
				roundHalf(scores)
			}
			o := out[j*outPos+h*d:][:d]
			for c := range d {
				o[c] = dot(vt[c*cells:(c+1)*cells], scores)
			}
		}
	}
}
