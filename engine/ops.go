package engine

import (
	"github.com/layerstream/layerstream/engine/model"

	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive,staticcheck // graph ops read like math.
)

// graphOps implements Ops with GoMLX graph nodes: the layer becomes one compiled graph. Activations, norms,
// softmax and residuals stay in float32; a weight matrix stored in another dtype (bf16) is multiplied in that
// dtype and the result converted back.
type graphOps struct {
	cos, sin     *Node // [B, T, headDim]
	mask         *Node // [B, T, S+T], additive
	pastK, pastV *Node // [B, kvHeads, S, headDim]
}

func node(v model.Value) *Node {
	if v == nil {
		return nil
	}
	return v.(*Node)
}

func (g graphOps) Linear(x, w, b model.Value) model.Value { return linear(node(x), node(w), node(b)) }
func (g graphOps) RMSNorm(x, w model.Value, eps float64) model.Value {
	return rmsNorm(node(x), node(w), eps)
}
func (g graphOps) Heads(x model.Value, heads, d int) model.Value {
	return splitHeads(node(x), heads, d)
}
func (g graphOps) Rotary(x model.Value) model.Value { return rotary(node(x), g.cos, g.sin) }
func (g graphOps) SiLU(x model.Value) model.Value   { return silu(node(x)) }
func (g graphOps) Add(a, b model.Value) model.Value { return Add(node(a), node(b)) }
func (g graphOps) Mul(a, b model.Value) model.Value { return Mul(node(a), node(b)) }
func (g graphOps) Attention(q, k, v model.Value) model.Value {
	return attention(node(q), node(k), node(v), g.pastK, g.pastV, g.mask)
}

// linear computes x·wᵀ (+ b) for x [..., in] and w [out, in] (the Hugging Face layout), giving [..., out].
// The device holds w as row chunks [chunks, out/chunks, in] (tensorSpec.deviceDims): x is multiplied by
// every chunk as a batch, and the chunk outputs are laid side by side.
func linear(x, w, b *Node) *Node {
	xw := x
	if w.DType() != x.DType() {
		xw = ConvertDType(x, w.DType())
	}
	lead := x.Shape().Dimensions[:x.Rank()-1]
	wd := w.Shape().Dimensions
	chunks, rows, in := wd[0], wd[1], wd[2]
	n := elems(lead)
	xc := BroadcastToDims(InsertAxes(Reshape(xw, n, in), 0), chunks, n, in)
	y := DotGeneral(xc, []int{2}, []int{0}, w, []int{2}, []int{0}) // [chunks, n, rows]
	if chunks > 1 {
		y = TransposeAllAxes(y, 1, 0, 2)
	}
	y = Reshape(y, append(slices.Clone(lead), chunks*rows)...)
	if y.DType() != dtypes.Float32 {
		y = ConvertDType(y, dtypes.Float32)
	}
	if b != nil {
		y = Add(y, broadcastLike(f32(b), y))
	}
	return y
}

// f32 converts a node to float32 if it is not already.
func f32(x *Node) *Node {
	if x.DType() == dtypes.Float32 {
		return x
	}
	return ConvertDType(x, dtypes.Float32)
}

// rmsNorm normalises the last axis of x: x / sqrt(mean(x²) + eps) * w.
func rmsNorm(x, w *Node, eps float64) *Node {
	ms := ReduceAndKeep(Square(x), ReduceMean, -1)
	y := Mul(x, Rsqrt(AddScalar(ms, eps)))
	return Mul(y, broadcastLike(f32(w), x))
}

// broadcastLike broadcasts x, whose axes match the trailing axes of like, to like's shape.
func broadcastLike(x, like *Node) *Node {
	return BroadcastToDims(ExpandLeftToRank(x, like.Rank()), like.Shape().Dimensions...)
}

// silu is x·sigmoid(x).
func silu(x *Node) *Node { return Mul(x, Sigmoid(x)) }

// splitHeads reshapes [B, T, heads*d] to [B, heads, T, d].
func splitHeads(x *Node, heads, d int) *Node {
	dims := x.Shape().Dimensions
	return TransposeAllAxes(Reshape(x, dims[0], dims[1], heads, d), 0, 2, 1, 3)
}

// rotary applies rotary position embeddings in Hugging Face's rotate-half layout to x [B, heads, T, d] with
// cos and sin [B, T, d]: x·cos + rotate_half(x)·sin, rotate_half(x) = concat(-x[d/2:], x[:d/2]).
func rotary(x, cos, sin *Node) *Node {
	d := x.Shape().Dimensions[3]
	x1 := Slice(x, AxisRange(), AxisRange(), AxisRange(), AxisRange(0, d/2))
	x2 := Slice(x, AxisRange(), AxisRange(), AxisRange(), AxisRange(d/2, d))
	rot := Concatenate([]*Node{Neg(x2), x1}, 3)
	c := BroadcastToDims(InsertAxes(cos, 1), x.Shape().Dimensions...)
	s := BroadcastToDims(InsertAxes(sin, 1), x.Shape().Dimensions...)
	return Add(Mul(x, c), Mul(rot, s))
}

// attention is causal grouped-query attention. q is [B, heads, T, d]; k and v are the new positions
// [B, kvHeads, T, d]; pastK/pastV the cache [B, kvHeads, S, d]; mask [B, T, S+T] is additive. It returns
// [B, T, heads*d].
func attention(q, k, v, pastK, pastV, mask *Node) *Node {
	qd := q.Shape().Dimensions
	b, heads, t, d := qd[0], qd[1], qd[2], qd[3]
	kvHeads := k.Shape().Dimensions[1]
	group := heads / kvHeads
	keys := Concatenate([]*Node{pastK, k}, 2)   // [B, kvH, S+T, d]
	values := Concatenate([]*Node{pastV, v}, 2) // [B, kvH, S+T, d]
	n := keys.Shape().Dimensions[2]
	// Query heads h = kv*group + r share key/value head kv (Hugging Face's repeat_kv order).
	qg := Reshape(q, b, kvHeads, group*t, d)
	scores := DotGeneral(qg, []int{3}, []int{0, 1}, keys, []int{3}, []int{0, 1}) // [B, kvH, group*T, S+T]
	scores = MulScalar(scores, 1/math.Sqrt(float64(d)))
	scores = Reshape(scores, b, kvHeads, group, t, n)
	scores = Add(scores, BroadcastToDims(InsertAxes(mask, 1, 1), b, kvHeads, group, t, n))
	probs := Reshape(Softmax(scores, -1), b, kvHeads, group*t, n)
	out := DotGeneral(probs, []int{3}, []int{0, 1}, values, []int{2}, []int{0, 1}) // [B, kvH, group*T, d]
	out = Reshape(out, b, heads, t, d)
	return Reshape(TransposeAllAxes(out, 0, 2, 1, 3), b, t, heads*d)
}
