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
// rows of a projection (kv_b_proj's parts absorbed into the queries and the outputs), and Deinterleave (rope_interleave).

// HeadLinear on the host, the heads spread over the cores: head h's rows of w as a matrix of their own (a
// slice, or kernels.QuantMatrix.RowRange), multiplied as Linear multiplies, block-quantized rows in place.
// Options.ObserveInputs sees the inputs (for kv_b_proj's value part the attention-weighted latents; for its key
// part the queries' nope parts).
func (o hostOps) HeadLinear(x, w model.Value) model.Value {
	xa, wt := arr(x), w.(*deviceTensor)
	b, heads, t := xa.dims[0], xa.dims[1], xa.dims[2]
	in := wt.shape.Dimensions[wt.shape.Rank()-1]
	n := wt.shape.Size() / in / heads      // each head's rows
	if o.observe != nil && wt.name != "" { // the input the weight's rows multiply (imatrix)
		o.observe(wt.name, xa.data, in)
	}
	y := o.arena.array(b, heads, t, n)
	kernels.ParallelFor(heads, func(lo, hi int) {
		for h := lo; h < hi; h++ {
			for bi := range b {
				at := (bi*heads + h) * t
				o.headProduct(y.data[at*n:(at+t)*n], xa.data[at*in:(at+t)*in], wt.flat, h*n, n, in)
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
// [heads, n, in], one batched product over the heads.
func (g graphOps) HeadLinear(x, w model.Value) model.Value {
	xn, wn := node(x), node(w)
	heads := xn.Shape().Dimensions[1]
	wd := wn.Shape().Dimensions
	in := wd[len(wd)-1]
	wh := Reshape(wn, heads, wn.Shape().Size()/in/heads, in) // [heads, n, in]
	if wn.DType() != xn.DType() {
		xn = ConvertDType(xn, wn.DType())
	}
	y := TransposeAllAxes(DotGeneral(xn, []int{3}, []int{1}, wh, []int{2}, []int{0}), 1, 0, 2, 3) // [B, heads, T, n]
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
