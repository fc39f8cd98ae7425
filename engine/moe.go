package engine

import (
	"fmt"
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:revive,staticcheck // graph ops read like math.

	"github.com/layerstream/layerstream/engine/kernels/ggml"
	"github.com/layerstream/layerstream/engine/model"
)

// The mixture of experts on the two paths (model.Ops.Route, Rows, Combine). The host kernels compute each
// expert on the rows routed to it only; the graphs compute every expert on every row and weigh the outputs by
// dense routing weights (zero for the experts a row did not choose), since they serve Logits and XLA, where one
// fixed-shape graph per layer kind matters more than the work.

// hostRouting is each row's choice of experts: rows are the activations' positions (B·T of them).
type hostRouting struct {
	k       int
	experts []int     // [rows·k]: each row's experts, in the order of their choice scores (best first)
	weights []float32 // [rows·k]: their weights
	byE     [][]int   // per expert: the rows routed to it, in order
	slot    []int     // [rows·k]: where row r is in byE[experts[r·k+j]]
	dims    []int     // the activations' dims without the last axis
	inputs  bool      // the weights multiply the experts' inputs (model.RouteOptions.WeighInputs)
	hidden  int       // the width of the rows (set by Rows)
}

func (o hostOps) Route(logits model.Value, opts model.RouteOptions) model.Value {
	la := arr(logits)
	n := la.dims[len(la.dims)-1]
	rows := len(la.data) / n
	r := &hostRouting{k: opts.K, experts: make([]int, rows*opts.K), weights: make([]float32, rows*opts.K),
		byE: make([][]int, n), slot: make([]int, rows*opts.K), dims: slices.Clone(la.dims[:len(la.dims)-1]), inputs: opts.WeighInputs}
	var bias, scale []float32
	if opts.Bias != nil {
		bias = weightData(opts.Bias).([]float32)
	}
	if opts.ExpertScale != nil {
		scale = weightData(opts.ExpertScale).([]float32)
	}
	scores, choice := make([]float32, n), make([]float32, n)
	for row := range rows {
		at := row * opts.K
		routeRow(la.data[row*n:(row+1)*n], opts, bias, scores, choice, r.experts[at:at+opts.K], r.weights[at:at+opts.K], o.llamaCpp != nil)
		for j, e := range r.experts[at : at+opts.K] {
			if scale != nil {
				r.weights[at+j] *= scale[e]
			}
			r.slot[at+j] = len(r.byE[e])
			r.byE[e] = append(r.byE[e], row)
		}
	}
	if o.routed != nil {
		o.routed.want(r.byE, r.k) // a streamed layer's routed experts: read now, bound by Rows
	}
	return r
}

// routeRow chooses one row's experts from its router logits as transformers' routers do, in float32 (llamaCpp:
// as llama.cpp's build_moe_ffn does on the CPU; routeScores, renormalize): scores (softmax over the experts, each
// logit's sigmoid, or the logits themselves), the k best by score (+ bias; LogitSigmoidScores: by logit) among the
// experts of the groups kept (opts.Groups: a group's score is the sum of its two best, in llama.cpp too), ties to
// the lower expert index (llama.cpp's argsort: descending), their unbiased scores as weights (TopKSoftmax: the
// softmax of the k chosen logits), renormalized to sum 1 with opts.Norm, times opts.Scale (ggml_scale). choice is
// scratch.
func routeRow(logits []float32, opts model.RouteOptions, bias, scores, choice []float32, experts []int, weights []float32, llamaCpp bool) {
	routeScores(logits, opts, scores, llamaCpp)
	copy(choice, scores)
	if opts.Score == model.LogitSigmoidScores {
		copy(choice, logits)
	}
	for i := range bias {
		choice[i] += bias[i]
	}
	if opts.Groups > 1 {
		limitGroups(choice, opts.Groups, opts.TopGroups)
	}
	topK(choice, scores, experts, weights)
	if opts.Score == model.TopKSoftmax {
		softmax32(weights, weights)
	}
	if opts.Norm {
		renormalize(weights, llamaCpp)
	}
	if opts.Scale != 0 && opts.Scale != 1 {
		for j := range weights {
			weights[j] *= float32(opts.Scale)
		}
	}
}

// routeScores sets scores from a row's router logits: softmax in float32, each logit's sigmoid, or the logits
// (TopKSoftmax); with llamaCpp,
// ggml's soft_max (ggml.SoftMax) or its sigmoid, 1/(1 + expf(-x)) with the C library's expf (checkLlamaCppModel
// admits no other scores).
func routeScores(logits []float32, opts model.RouteOptions, scores []float32, llamaCpp bool) {
	switch {
	case llamaCpp && opts.Score == model.SoftmaxScores:
		ggml.SoftMax(scores, logits, 1, nil)
	case llamaCpp && opts.Score == model.SigmoidScores:
		for i, v := range logits {
			scores[i] = 1 / (1 + ggml.LibcExpf(-v))
		}
	case llamaCpp:
		panic(fmt.Sprintf("engine: arithmetic llama.cpp: router scores %d", opts.Score))
	case opts.Score == model.SoftmaxScores:
		softmax32(scores, logits)
	case opts.Score == model.SigmoidScores, opts.Score == model.LogitSigmoidScores:
		sigmoid(scores, logits)
	case opts.Score == model.TopKSoftmax:
		copy(scores, logits)
	}
}

// renormalize divides the chosen experts' weights by their sum: in float32, or with llamaCpp as llama.cpp does,
// the sum in double precision (ggml_vec_sum_f32) rounded to float32 and clamped below at 6.103515625e-5 (its
// guard against a zero sum).
func renormalize(weights []float32, llamaCpp bool) {
	var s float32
	if llamaCpp {
		sum := 0.0
		for _, w := range weights {
			sum += float64(w)
		}
		s = max(float32(sum), 6.103515625e-5)
	} else {
		for _, w := range weights {
			s += w
		}
	}
	for j := range weights {
		weights[j] /= s
	}
}

// topK sets experts to the len(experts) best by choice, best first (ties to the lower index), and weights to
// their scores.
func topK(choice, scores []float32, experts []int, weights []float32) {
	for j := range experts {
		best := -1
		for e, c := range choice {
			if !slices.Contains(experts[:j], e) && (best < 0 || c > choice[best]) {
				best = e
			}
		}
		experts[j], weights[j] = best, scores[best]
	}
}

// softmax32 sets dst to the softmax of src in float32 (dst may be src): e^(v − max) each, divided by their sum.
func softmax32(dst, src []float32) {
	top := float32(math.Inf(-1))
	for _, v := range src {
		top = max(top, v)
	}
	var sum float32
	for i, v := range src {
		dst[i] = float32(math.Exp(float64(v - top)))
		sum += dst[i]
	}
	for i := range dst {
		dst[i] /= sum
	}
}

// limitGroups sets the choice scores of every expert outside the top best of groups groups of consecutive
// experts to -∞ (DeepseekV3TopkRouter): a group's score is the sum of its two best choice scores, and ties go to
// the lower group index.
func limitGroups(choice []float32, groups, top int) {
	size := len(choice) / groups
	score := make([]float32, groups)
	for g := range score {
		first, second := float32(math.Inf(-1)), float32(math.Inf(-1))
		for _, c := range choice[g*size : (g+1)*size] {
			if c > first {
				first, second = c, first
			} else if c > second {
				second = c
			}
		}
		score[g] = first + second
	}
	kept := make([]bool, groups)
	for range top {
		best := -1
		for g, s := range score {
			if !kept[g] && (best < 0 || s > score[best]) {
				best = g
			}
		}
		kept[best] = true
	}
	for g, k := range kept {
		if !k {
			for i := range size {
				choice[g*size+i] = float32(math.Inf(-1))
			}
		}
	}
}

func (o hostOps) Rows(x, routing model.Value, e int) model.Value {
	r := routing.(*hostRouting)
	if len(r.byE[e]) == 0 {
		return nil
	}
	if o.experts != nil { // llama.cpp's mul_mat_id takes each sequence's rows routed to e as one batch
		t := r.dims[len(r.dims)-1]
		o.experts.runs = o.experts.runs[:0]
		for i, row := range r.byE[e] {
			if i == 0 || row/t != r.byE[e][i-1]/t {
				o.experts.runs = append(o.experts.runs, 0)
			}
			o.experts.runs[len(o.experts.runs)-1]++
		}
	}
	xa := arr(x)
	h := xa.dims[len(xa.dims)-1]
	r.hidden = h
	if o.routed != nil {
		if err := o.routed.bind(e, o.weights); err != nil {
			if *o.err == nil {
				*o.err = err // the pass fails with it; Combine leaves the expert out meanwhile
			}
			return nil
		}
	}
	y := o.arena.array(len(r.byE[e]), h)
	for i, row := range r.byE[e] {
		dst, src := y.data[i*h:(i+1)*h], xa.data[row*h:(row+1)*h]
		if !r.inputs {
			copy(dst, src)
			continue
		}
		w := r.weight(row, e)
		for c, v := range src {
			dst[c] = v * w
		}
	}
	return y
}

// weight is row's routing weight for expert e, one of its chosen experts.
func (r *hostRouting) weight(row, e int) float32 {
	at := row * r.k
	return r.weights[at+slices.Index(r.experts[at:at+r.k], e)]
}

func (o hostOps) Combine(ys []model.Value, routing model.Value) model.Value {
	r := routing.(*hostRouting)
	out := o.arena.array(append(slices.Clone(r.dims), r.hidden)...)
	if o.err != nil && *o.err != nil {
		return out // an expert's read failed (Rows): the pass returns the error
	}
	h := r.hidden
	for row := range len(r.experts) / r.k {
		acc := out.data[row*h : (row+1)*h]
		for j := range r.k {
			at := row*r.k + j
			w, y := r.weights[at], arr(ys[r.experts[at]]).data[r.slot[at]*h:][:h]
			if r.inputs { // weighed on the way in
				w = 1
			}
			if j == 0 {
				for i, v := range y {
					acc[i] = w * v
				}
				continue
			}
			for i, v := range y {
				acc[i] += float32(w * v) // each weighted output rounded, then summed, as transformers does
			}
		}
	}
	return out
}

func (o hostOps) MulRows(x, s model.Value) model.Value {
	xa, sa := arr(x), arr(s)
	y := o.arena.array(xa.dims...)
	n := xa.dims[len(xa.dims)-1]
	for r, f := range sa.data {
		for i, v := range xa.data[r*n : (r+1)*n] {
			y.data[r*n+i] = v * f
		}
	}
	return y
}

// sigmoid is σ(x) in float32, elementwise.
func sigmoid(y, x []float32) {
	for i, v := range x {
		y[i] = sigmoid32(v)
	}
}

// graphRouting is the graphs' routing: the dense weights [B, T, experts], zero for the experts a row did not
// choose, and whether they multiply the experts' inputs (model.RouteOptions.WeighInputs) or their outputs.
type graphRouting struct {
	w      *Node
	inputs bool
}

// Route on the graphs: the dense routing weights. The k experts are the k best choice scores (topOneHot), within
// the groups kept (limitGroupsGraph).
func (g graphOps) Route(logits model.Value, opts model.RouteOptions) model.Value {
	l := node(logits)
	var scores *Node
	switch opts.Score {
	case model.SoftmaxScores:
		scores = Softmax(l, -1)
	case model.SigmoidScores, model.LogitSigmoidScores:
		scores = Sigmoid(l)
	case model.TopKSoftmax:
		scores = l
	}
	choice := scores
	if opts.Score == model.LogitSigmoidScores {
		choice = l
	}
	if opts.Bias != nil {
		choice = Add(choice, broadcastLike(f32(node(opts.Bias)), choice))
	}
	if opts.Groups > 1 {
		choice = limitGroupsGraph(choice, opts.Groups, opts.TopGroups)
	}
	chosen := topOneHot(choice, opts.K)
	var w *Node
	if opts.Score == model.TopKSoftmax { // the softmax over the chosen logits, the largest of which is the row's
		e := Mul(Exp(Sub(l, ReduceAndKeep(l, ReduceMax, -1))), chosen)
		w = Div(e, ReduceAndKeep(e, ReduceSum, -1))
	} else {
		w = Mul(scores, chosen)
	}
	if opts.Norm {
		w = Div(w, ReduceAndKeep(w, ReduceSum, -1))
	}
	if opts.Scale != 0 && opts.Scale != 1 {
		w = MulScalar(w, float64(float32(opts.Scale)))
	}
	if opts.ExpertScale != nil {
		w = Mul(w, broadcastLike(f32(node(opts.ExpertScale)), w))
	}
	return &graphRouting{w: w, inputs: opts.WeighInputs}
}

// topOneHot is 1 at the k largest of x's last axis and 0 elsewhere, chosen one at a time by ArgMax (ties to the
// lower index), each chosen one pushed out of the way (lowered by 1e30).
func topOneHot(x *Node, k int) *Node {
	n := x.Shape().Dimensions[x.Rank()-1]
	var chosen *Node
	for range k {
		oh := OneHot(ArgMax(x, -1), n, dtypes.Float32)
		if chosen == nil {
			chosen = oh
		} else {
			chosen = Add(chosen, oh)
		}
		x = Sub(x, MulScalar(oh, 1e30))
	}
	return chosen
}

// limitGroupsGraph is limitGroups on the graphs: the choice scores [..., experts] of the experts outside the top
// best groups lowered by 1e30, as Route pushes chosen experts out of the way.
func limitGroupsGraph(choice *Node, groups, top int) *Node {
	d := choice.Shape().Dimensions
	lead, size := slices.Clone(d[:len(d)-1]), d[len(d)-1]/groups
	byGroup := Reshape(choice, append(slices.Clone(lead), groups, size)...)
	first := ReduceMax(byGroup, -1)
	second := ReduceMax(Sub(byGroup, MulScalar(OneHot(ArgMax(byGroup, -1), size, dtypes.Float32), 1e30)), -1)
	kept := topOneHot(Add(first, second), top) // of the groups' scores [..., groups]
	mask := Reshape(BroadcastToDims(InsertAxes(kept, -1), append(slices.Clone(lead), groups, size)...), d...)
	return Sub(choice, MulScalar(OneMinus(mask), 1e30))
}

// Rows is every row: x, or x times each row's weight for e where the weights multiply the inputs (zero for the
// rows that did not choose e, which an expert without biases turns into zero).
func (g graphOps) Rows(x, routing model.Value, e int) model.Value {
	r := routing.(*graphRouting)
	if !r.inputs {
		return x
	}
	return mulRows(node(x), SliceAxis(r.w, -1, AxisRange(e, e+1)))
}

func (g graphOps) Combine(ys []model.Value, routing model.Value) model.Value {
	r := routing.(*graphRouting)
	var out *Node
	for e, y := range ys {
		t := node(y)
		if !r.inputs {
			t = mulRows(t, SliceAxis(r.w, -1, AxisRange(e, e+1)))
		}
		if out == nil {
			out = t
		} else {
			out = Add(out, t)
		}
	}
	return out
}

func (g graphOps) MulRows(x, s model.Value) model.Value { return mulRows(node(x), node(s)) }

// mulRows multiplies each row of x [..., n] by s [..., 1].
func mulRows(x, s *Node) *Node { return Mul(x, BroadcastToDims(s, x.Shape().Dimensions...)) }
