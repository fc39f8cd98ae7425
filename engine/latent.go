package engine

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive,staticcheck // graph ops read like math.

	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/engine/model"
)

// The ops of multi-head latent attention (model/deepseek.go) on the two paths: HeadLinear, each head by its own
// rows of a projection (kv_b_proj absorbed into the queries and the outputs), and Deinterleave (rope_interleave).

// HeadLinear on the host, the heads spread over the cores. Plain: head h's rows of w as a matrix of their own
// (a slice, or kernels.QuantMatrix.RowRange), multiplied as Linear multiplies, block-quantized rows in place.
// Transposed: y_h = Σ_j x_h[j]·W_h[j], each row of W_h read once (widened from bf16 or dequantized into a
// scratch row) and added into every position's output. Options.ObserveInputs sees the plain products' inputs:
// for kv_b_proj the attention-weighted latents its value rows multiply (the absorbed form never multiplies the
// latent itself by it).
func (o hostOps) HeadLinear(x, w model.Value, from, n int, transposed bool) model.Value {
	xa, wt := arr(x), w.(*deviceTensor)
	b, heads, t := xa.dims[0], xa.dims[1], xa.dims[2]
	in := wt.shape.Dimensions[wt.shape.Rank()-1]
	per := wt.shape.Size() / in / heads // each head's rows
	out, k := n, in                     // y's last axis, x's
	if transposed {
		out, k = in, n
	}
	if o.observe != nil && !transposed && wt.name != "" { // the input the weight's rows multiply (imatrix)
		o.observe(wt.name, xa.data, in)
	}
	y := o.arena.array(b, heads, t, out)
	kernels.ParallelFor(heads, func(lo, hi int) {
		row := make([]float32, in)
		for h := lo; h < hi; h++ {
			r0 := h*per + from
			if !transposed {
				for bi := range b {
					at := (bi*heads + h) * t
					o.headProduct(y.data[at*out:(at+t)*out], xa.data[at*k:(at+t)*k], wt.flat, r0, n, in)
				}
				continue
			}
			for bi := range b {
				at := (bi*heads + h) * t
				clear(y.data[at*out : (at+t)*out])
			}
			for j := range n {
				wr := weightRow(row, wt.flat, r0+j, in)
				for bi := range b {
					at := (bi*heads + h) * t
					for ti := range t {
						kernels.AxpyF32(y.data[(at+ti)*in:][:in], xa.data[(at+ti)*n+j], wr)
					}
				}
			}
		}
	})
	return y
}

// headProduct is y = x·Wᵀ for W rows [r0, r0+n) of a weight matrix of in columns, computed as Linear computes
// it for the weight's type.
func (o hostOps) headProduct(y, x []float32, w any, r0, n, in int) {
	switch f := w.(type) {
	case []float32:
		kernels.Linear(y, x, f[r0*in:(r0+n)*in], nil, in)
	case []bfloat16.BFloat16:
		if o.bf16Products {
			kernels.LinearBF16(y, x, f[r0*in:(r0+n)*in], nil, in)
		} else {
			kernels.Linear(y, x, f[r0*in:(r0+n)*in], nil, in)
		}
	case kernels.QuantMatrix:
		if o.tiled {
			kernels.LinearQuantPrompt(y, x, f.RowRange(r0, n), nil)
		} else {
			kernels.LinearQuant(y, x, f.RowRange(r0, n), nil)
		}
	default:
		panic(fmt.Sprintf("engine: HeadLinear of a %T weight", w))
	}
}

// weightRow is row r of a weight matrix of in columns (float32, bf16 or block-quantized) as float32: the row
// itself, or widened or dequantized into buf.
func weightRow(buf []float32, w any, r, in int) []float32 {
	switch f := w.(type) {
	case []float32:
		return f[r*in : (r+1)*in]
	case []bfloat16.BFloat16:
		for i, v := range f[r*in : (r+1)*in] {
			buf[i] = v.Float32()
		}
	case kernels.QuantMatrix:
		f.DequantizeRow(buf, r)
	default:
		panic(fmt.Sprintf("engine: HeadLinear of a %T weight", w))
	}
	return buf
}

func (o hostOps) Deinterleave(x model.Value) model.Value {
	xa := arr(x)
	d := xa.dims[len(xa.dims)-1]
	y := o.arena.array(xa.dims...)
	for r := 0; r < len(xa.data); r += d {
		src, dst := xa.data[r:r+d], y.data[r:r+d]
		for j := range d / 2 {
			dst[j], dst[d/2+j] = src[2*j], src[2*j+1]
		}
	}
	return y
}

// HeadLinear on the graphs: w as the device holds it ([chunks, rows, in], the rows in order) reshaped to
// [heads, per, in], each head's n rows from from, one batched product over the heads.
func (g graphOps) HeadLinear(x, w model.Value, from, n int, transposed bool) model.Value {
	xn, wn := node(x), node(w)
	heads := xn.Shape().Dimensions[1]
	wd := wn.Shape().Dimensions
	in := wd[len(wd)-1]
	wh := SliceAxis(Reshape(wn, heads, wn.Shape().Size()/in/heads, in), 1, AxisRange(from, from+n)) // [heads, n, in]
	if wn.DType() != xn.DType() {
		xn = ConvertDType(xn, wn.DType())
	}
	contract := 2 // y_h = x_h·W_hᵀ: x's last axis with W's in
	if transposed {
		contract = 1 // y_h = x_h·W_h: with W's n
	}
	y := TransposeAllAxes(DotGeneral(xn, []int{3}, []int{1}, wh, []int{contract}, []int{0}), 1, 0, 2, 3) // [B, heads, T, ·]
	if y.DType() != dtypes.Float32 {
		y = ConvertDType(y, dtypes.Float32)
	}
	return y
}

func (g graphOps) Deinterleave(x model.Value) model.Value {
	n := node(x)
	d := n.Shape().Dimensions
	pairs := append(append([]int{}, d[:len(d)-1]...), d[len(d)-1]/2, 2)
	perm := make([]int, len(pairs))
	for i := range perm {
		perm[i] = i
	}
	perm[len(perm)-2], perm[len(perm)-1] = len(perm)-1, len(perm)-2
	return Reshape(TransposeAllAxes(Reshape(n, pairs...), perm...), d...)
}
