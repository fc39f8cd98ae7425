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

// HeadLinear on the host: head h's rows of w as float32 (widened from bf16 or dequantized into a scratch
// matrix, transposed for the transposed product), multiplied with kernels.Linear by that head's rows of x.
// Options.ObserveInputs sees the plain products' inputs: for kv_b_proj the attention-weighted latents its value
// rows multiply (the absorbed form never multiplies the latent itself by it).
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
	rows, m := make([]float32, n*in), make([]float32, n*in)
	for h := range heads {
		headRows(rows, wt.flat, h*per+from, n, in)
		if transposed { // m [in, n]
			for i := range n {
				for j, v := range rows[i*in : (i+1)*in] {
					m[j*n+i] = v
				}
			}
		} else {
			copy(m, rows)
		}
		for bi := range b {
			at := (bi*heads + h) * t
			kernels.Linear(y.data[at*out:(at+t)*out], xa.data[at*k:(at+t)*k], m, nil, k)
		}
	}
	return y
}

// headRows writes rows [r0, r0+n) of a weight matrix of in columns (float32, bf16 or block-quantized) into dst
// as float32.
func headRows(dst []float32, w any, r0, n, in int) {
	switch f := w.(type) {
	case []float32:
		copy(dst, f[r0*in:(r0+n)*in])
	case []bfloat16.BFloat16:
		for i, v := range f[r0*in : (r0+n)*in] {
			dst[i] = v.Float32()
		}
	case kernels.QuantMatrix:
		for i := range n {
			f.DequantizeRow(dst[i*in:(i+1)*in], r0+i)
		}
	default:
		panic(fmt.Sprintf("engine: HeadLinear of a %T weight", w))
	}
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
