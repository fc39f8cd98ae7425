package engine

import (
	"errors"
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive,staticcheck // graph ops read like math.
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/kvcache"
)

// The graphs' recurrent ops (model.RecurrentOps): a recurrent layer's graph takes the rows' states as pastK
// (conv) and pastV (delta) [B, 1, 1, size] and valid [B, T] (1 at a row's new positions, 0 at its padding),
// and returns the new states; the delta rule is a scan unrolled over the bucket's positions, a padding position
// leaving the state as it is (decay 1, beta 0).

func (g graphOps) MergeHeads(x model.Value) model.Value {
	n := node(x)
	d := n.Shape().Dimensions
	return Reshape(TransposeAllAxes(n, 0, 2, 1, 3), d[0], d[2], d[1]*d[3])
}

func (g graphOps) Concat(xs ...model.Value) model.Value {
	ns := make([]*Node, len(xs))
	for i, x := range xs {
		ns[i] = node(x)
	}
	return Concatenate(ns, ns[0].Rank()-1)
}

func (g graphOps) CausalConv(x, w model.Value) (model.Value, model.Value) {
	xn, wn := node(x), f32(node(w))
	d := xn.Shape().Dimensions
	b, t, c := d[0], d[1], d[2]
	k := wn.Shape().Dimensions[2]
	seq := Concatenate([]*Node{Reshape(g.pastK, b, k-1, c), xn}, 1) // [B, K-1+T, C]
	wk := Reshape(wn, c, k)
	var y *Node
	for j := range k {
		term := Mul(SliceAxis(seq, 1, AxisRange(j, j+t)), broadcastLike(Reshape(SliceAxis(wk, 1, AxisRange(j, j+1)), c), xn))
		if y == nil {
			y = term
		} else {
			y = Add(y, term)
		}
	}
	// The new state: inputs lens[b] .. lens[b]+K-2 of seq, picked by a one-hot product (exact).
	gr := xn.Graph()
	sh := shapes.Make(dtypes.Float32, b, k-1, k-1+t)
	lens := BroadcastToDims(Reshape(ReduceSum(g.valid, 1), b, 1, 1), sh.Dimensions...)
	pick := ConvertDType(Equal(Iota(gr, sh, 2), Add(Iota(gr, sh, 1), lens)), dtypes.Float32)
	state := DotGeneral(pick, []int{2}, []int{0}, seq, []int{1}, []int{0}) // [B, K-1, C]
	return y, Reshape(state, b, 1, 1, (k-1)*c)
}

func (g graphOps) GatedDeltaRule(q, k, v, a, b model.Value, p model.DeltaRule) (model.Value, model.Value) {
	qn := node(q)
	d := qn.Shape().Dimensions
	rows, t := d[0], d[1]
	nk, nv, dk, dv := p.KeyHeads, p.ValueHeads, p.KeyDim, p.ValueDim
	heads := func(x *Node, scale float64) *Node { // [B, T, nk·dk] → l2-normed [B, T, nv, dk]
		x = Reshape(x, rows, t, nk, dk)
		x = Mul(x, Rsqrt(AddScalar(ReduceAndKeep(Square(x), ReduceSum, -1), 1e-6)))
		if scale != 1 {
			x = MulScalar(x, scale)
		}
		if p.Tiled { // value head h: key head h mod nk
			return Reshape(BroadcastToDims(InsertAxes(x, 2), rows, t, nv/nk, nk, dk), rows, t, nv, dk)
		}
		x = BroadcastToDims(InsertAxes(x, 3), rows, t, nk, nv/nk, dk) // value head h: key head h / (nv/nk)
		return Reshape(x, rows, t, nv, dk)
	}
	qh, kh := heads(qn, float64(float32(1/math.Sqrt(float64(dk))))), heads(node(k), 1)
	vh := Reshape(node(v), rows, t, nv, dv)
	valid := BroadcastToDims(InsertAxes(g.valid, 2), rows, t, nv)
	x := Add(node(a), broadcastLike(f32(node(p.DTBias)), node(a)))
	softplus := Add(Max(x, ZerosLike(x)), Log1p(Exp(Neg(Abs(x)))))
	gate := Mul(Neg(broadcastLike(Exp(f32(node(p.ALog))), x)), softplus)
	decay := Exp(Mul(gate, valid))       // 1 at padding
	beta := Mul(Sigmoid(node(b)), valid) // 0 at padding
	s := Reshape(g.pastV, rows, nv, dk, dv)
	at := func(x *Node, ti int, dims ...int) *Node {
		return Reshape(SliceAxis(x, 1, AxisRange(ti, ti+1)), dims...)
	}
	outs := make([]*Node, t)
	for ti := range t {
		kt := BroadcastToDims(at(kh, ti, rows, nv, dk, 1), rows, nv, dk, dv)
		qt := BroadcastToDims(at(qh, ti, rows, nv, dk, 1), rows, nv, dk, dv)
		s = Mul(s, BroadcastToDims(at(decay, ti, rows, nv, 1, 1), rows, nv, dk, dv))
		mem := ReduceSum(Mul(s, kt), 2) // [B, nv, dv]
		delta := Mul(Sub(at(vh, ti, rows, nv, dv), mem), BroadcastToDims(at(beta, ti, rows, nv, 1), rows, nv, dv))
		s = Add(s, Mul(kt, BroadcastToDims(Reshape(delta, rows, nv, 1, dv), rows, nv, dk, dv)))
		outs[ti] = Reshape(ReduceSum(Mul(s, qt), 2), rows, 1, nv*dv)
	}
	o := outs[0]
	if t > 1 {
		o = Concatenate(outs, 1)
	}
	return o, Reshape(s, rows, 1, 1, nv*dk*dv)
}

// validTensor is [len(lens), tb]: 1 at row r's first lens[r] positions, 0 after.
func validTensor(lens []int, tb int) *tensors.Tensor {
	v := make([]float32, len(lens)*tb)
	for r, t := range lens {
		for j := range t {
			v[r*tb+j] = 1
		}
	}
	return tensors.FromFlatDataAndDimensions(v, len(lens), tb)
}

// write stores a layer's outputs k and v in its view: the new keys and values of each row's new positions, or
// a recurrent layer's new states of the rows with new positions.
func (p *graphPass) write(view *kvcache.View, k, v *tensors.Tensor) error {
	if !view.Recurrent() {
		return writeKV(view, p.lens, p.tb, k, v)
	}
	var verr error
	kerr := k.ConstFlatData(func(kf any) {
		verr = v.ConstFlatData(func(vf any) {
			conv, delta := kf.([]float32), vf.([]float32)
			for r, t := range p.lens {
				if t == 0 {
					continue
				}
				sk, sv := view.State(r)
				copy(sk, conv[r*len(sk):(r+1)*len(sk)])
				copy(sv, delta[r*len(sv):(r+1)*len(sv)])
			}
		})
	})
	return errors.Join(kerr, verr)
}
