package engine

import (
	"fmt"
	"math"
	"slices"

	"github.com/layerstream/layerstream/engine/model"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive,staticcheck // graph ops read like math.
)

// graphOps implements Ops with GoMLX graph nodes: the layer becomes one compiled graph. Activations, norms,
// softmax and residuals stay in float32; a weight matrix stored in another dtype (bf16) is multiplied in that
// dtype and the result converted back. An op the graph does not use (Rotary in a layer without rotary
// embeddings; Attention in the head) needs none of the fields.
type graphOps struct {
	cos, sin     *Node // [B, T, rotary dims]
	mask         *Node // [B, T, S+T], additive
	pastK, pastV *Node // [B, kvHeads, S, headDim]
	qscale       *Node // [B, T]: the layer's query scale at each new position (LayerKind.QueryScale)
	valid        *Node // [B, T]: 1 at each row's new positions, 0 at padding (recurrent layers; recurrent_graph.go)
}

func node(v model.Value) *Node {
	if v == nil {
		return nil
	}
	return v.(*Node)
}

func (g graphOps) Linear(x, w, b model.Value) model.Value { return linear(node(x), node(w), node(b)) }
func (g graphOps) RMSNorm(x, w model.Value, eps, offset float64) model.Value {
	return rmsNorm(node(x), node(w), eps, offset)
}
func (g graphOps) Heads(x model.Value, heads, d int) model.Value {
	return splitHeads(node(x), heads, d)
}
func (g graphOps) Rotary(x model.Value) model.Value { return rotary(node(x), g.cos, g.sin) }
func (g graphOps) Add(a, b model.Value) model.Value { return Add(node(a), node(b)) }
func (g graphOps) Mul(a, b model.Value) model.Value { return Mul(node(a), node(b)) }
func (g graphOps) Scale(x model.Value, s float64) model.Value {
	return MulScalar(node(x), float64(float32(s)))
}
func (g graphOps) SoftCap(x model.Value, c float64) model.Value { return softCap(node(x), c) }
func (g graphOps) ScaleBy(x, s model.Value) model.Value {
	n := node(x)
	return Mul(n, BroadcastToDims(Reshape(f32(node(s))), n.Shape().Dimensions...))
}
func (g graphOps) ScaleQueries(q model.Value) model.Value {
	d := g.qscale.Shape().Dimensions
	n := node(q)
	return Mul(n, BroadcastToDims(Reshape(g.qscale, d[0], 1, d[1], 1), n.Shape().Dimensions...))
}
func (g graphOps) Attention(q, k, v model.Value, opts model.AttentionOptions) model.Value {
	return attention(node(q), node(k), node(v), g.pastK, g.pastV, g.mask, opts)
}

func (g graphOps) Split(x model.Value, sizes ...int) []model.Value {
	n := node(x)
	out := make([]model.Value, len(sizes))
	from := 0
	for i, s := range sizes {
		out[i] = SliceAxis(n, -1, AxisRange(from, from+s))
		from += s
	}
	return out
}

func (g graphOps) Act(x model.Value, f model.Activation) model.Value {
	n := node(x)
	switch f {
	case model.SiLU:
		return Mul(n, Sigmoid(n))
	case model.GELUTanh: // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
		inner := MulScalar(Add(n, MulScalar(Mul(n, Mul(n, n)), 0.044715)), math.Sqrt(2/math.Pi))
		return Mul(MulScalar(n, 0.5), OnePlus(Tanh(inner)))
	case model.Sigmoid:
		return Sigmoid(n)
	case model.GELU: // 0.5·x·(1 + erf(x/√2))
		return Mul(MulScalar(n, 0.5), OnePlus(Erf(MulScalar(n, 1/math.Sqrt2))))
	}
	panic(fmt.Sprintf("engine: activation %d", f))
}

func (g graphOps) ClampedSwiGLU(gate, up model.Value, alpha, limit float64) model.Value {
	gt := MinScalar(node(gate), float64(float32(limit)))
	u := ClipScalar(node(up), -float64(float32(limit)), float64(float32(limit)))
	glu := Mul(gt, Sigmoid(MulScalar(gt, float64(float32(alpha)))))
	return Mul(OnePlus(u), glu)
}

// softCap is c·tanh(x/c).
func softCap(x *Node, c float64) *Node { return MulScalar(Tanh(MulScalar(x, 1/c)), c) }

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

// rmsNorm normalises the last axis of x: x / sqrt(mean(x²) + eps) * (offset + w), or without w (nil) x / sqrt(mean(x²) + eps).
func rmsNorm(x, w *Node, eps, offset float64) *Node {
	ms := ReduceAndKeep(Square(x), ReduceMean, -1)
	y := Mul(x, Rsqrt(AddScalar(ms, eps)))
	if w == nil { // a norm without weight
		return y
	}
	wf := f32(w)
	if offset != 0 {
		wf = AddScalar(wf, offset)
	}
	return Mul(y, broadcastLike(wf, x))
}

// broadcastLike broadcasts x, whose axes match the trailing axes of like, to like's shape.
func broadcastLike(x, like *Node) *Node {
	return BroadcastToDims(ExpandLeftToRank(x, like.Rank()), like.Shape().Dimensions...)
}

// splitHeads reshapes [B, T, heads*d] to [B, heads, T, d].
func splitHeads(x *Node, heads, d int) *Node {
	dims := x.Shape().Dimensions
	return TransposeAllAxes(Reshape(x, dims[0], dims[1], heads, d), 0, 2, 1, 3)
}

// rotary applies rotary position embeddings in Hugging Face's rotate-half layout to the first r dimensions of
// x [B, heads, T, d] with cos and sin [B, T, r]: x·cos + rotate_half(x)·sin, rotate_half(x) = concat(-x[r/2:r],
// x[:r/2]); dimensions r.. pass unchanged (partial rotary).
func rotary(x, cos, sin *Node) *Node {
	d, r := x.Shape().Dimensions[3], cos.Shape().Dimensions[2]
	xr := x
	if r < d {
		xr = SliceAxis(x, 3, AxisRange(0, r))
	}
	x1 := SliceAxis(xr, 3, AxisRange(0, r/2))
	x2 := SliceAxis(xr, 3, AxisRange(r/2, r))
	rot := Concatenate([]*Node{Neg(x2), x1}, 3)
	c := BroadcastToDims(InsertAxes(cos, 1), xr.Shape().Dimensions...)
	s := BroadcastToDims(InsertAxes(sin, 1), xr.Shape().Dimensions...)
	y := Add(Mul(xr, c), Mul(rot, s))
	if r < d {
		y = Concatenate([]*Node{y, SliceAxis(x, 3, AxisRange(r, d))}, 3)
	}
	return y
}

// attention is causal grouped-query attention. q is [B, heads, T, d]; k and v are the new positions
// [B, kvHeads, T, d]; pastK/pastV the cache [B, kvHeads, S, d]; mask [B, T, S+T] is additive. Scores are
// q·k·opts.Scale, soft-capped when opts.SoftCap > 0, then masked; opts.Sinks ([heads]) join each head's
// softmax as one more score whose weight is dropped. It returns [B, T, heads*d].
func attention(q, k, v, pastK, pastV, mask *Node, opts model.AttentionOptions) *Node {
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
	scores = MulScalar(scores, float64(float32(opts.Scale)))
	if opts.SoftCap > 0 {
		scores = softCap(scores, opts.SoftCap)
	}
	scores = Reshape(scores, b, kvHeads, group, t, n)
	scores = Add(scores, BroadcastToDims(InsertAxes(mask, 1, 1), b, kvHeads, group, t, n))
	var probs *Node
	if opts.Sinks != nil { // query head kv*group + r's sink as a last column of its scores, dropped after the softmax
		sinks := BroadcastToDims(Reshape(f32(node(opts.Sinks)), 1, kvHeads, group, 1, 1), b, kvHeads, group, t, 1)
		probs = SliceAxis(Softmax(Concatenate([]*Node{scores, sinks}, -1), -1), -1, AxisRange(0, n))
	} else {
		probs = Softmax(scores, -1)
	}
	probs = Reshape(probs, b, kvHeads, group*t, n)
	out := DotGeneral(probs, []int{3}, []int{0, 1}, values, []int{2}, []int{0, 1}) // [B, kvH, group*T, d]
	out = Reshape(out, b, heads, t, d)
	return Reshape(TransposeAllAxes(out, 0, 2, 1, 3), b, t, heads*d)
}
