package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/shards"
)

// Expert prediction (on unless Options.NoExpertPrefetch). Once a streamed sparse layer has computed, the experts of
// the next streamed sparse layer are predicted by its router applied to this layer's output, normed by its MLP norm
// (the attention between them left out), each row's top num_experts_per_tok; each prediction is scored against
// the experts the layer's rows were then routed to (Stats.Experts.Predicted, PredictedUsed), and while the
// predictions are accurate enough (accurate) their experts are read ahead while the next layer's attention
// computes, pinned until that layer has computed. The routers and norms of the
// streamed sparse layers are kept resident (as float32: 128 experts × hidden 2048 is 1 MB a layer), read once
// when the engine opens.

// predictRows bounds the rows a prediction covers: a long prompt's rows route to most experts anyway.
const predictRows = 32

// layerRouter is a streamed sparse layer's router and MLP norm, kept resident for predictions.
type layerRouter struct {
	w    []float32 // [experts, hidden]
	norm []float32 // [hidden]; nil: none (the input unnormed)
}

// predictor predicts the experts of the streamed sparse layers.
type predictor struct {
	x *expertStore
	// k is the experts a row is routed to, as the layers' routing chose them (routedLayer.want; 0 until then):
	// configurations name it differently (num_experts_per_tok, Gemma 4's top_k_experts).
	k      atomic.Int64
	mu     sync.Mutex
	shadow map[int][]int // by layer: the experts last predicted, until the layer computed (score)
	// warmup and minAccuracy are predictWarmup and predictAccuracy (tests lower them to read ahead at once).
	warmup      int64
	minAccuracy float64
	eps         float64
	routers     []*layerRouter // per layer; nil where the layer's experts are not read apart
}

// newPredictor reads the routers and MLP norms of the layers whose experts x reads apart (keep: the resident
// layers, which need none). It returns nil when the plan binds no router (a family with its own routing).
func newPredictor(ctx context.Context, x *expertStore, keep []bool) (*predictor, error) {
	s := x.s
	router, norm := -1, -1
	for i, w := range s.plan.Weights {
		var lw model.LayerWeights
		switch w.Field(&lw) {
		case &lw.Router.W:
			router = i
		case &lw.MLPNorm:
			norm = i
		}
	}
	if router < 0 {
		return nil, nil
	}
	p := &predictor{x: x, shadow: map[int][]int{}, warmup: predictWarmup, minAccuracy: predictAccuracy, eps: s.cfg.RMSNormEps, routers: make([]*layerRouter, s.cfg.NumHiddenLayers)}
	buf := shards.NewBuffer(0)
	defer buf.Release()
	for l := range p.routers {
		if keep[l] || !x.routed(layerUnit(l)) {
			continue
		}
		lr, err := s.readRouter(ctx, l, router, norm, buf)
		if err != nil {
			return nil, err
		}
		p.routers[l] = lr
	}
	return p, nil
}

// readRouter reads layer l's router (spec router) and MLP norm (spec norm, -1: none) as float32.
func (s *weightStore) readRouter(ctx context.Context, l, router, norm int, buf *shards.Buffer) (*layerRouter, error) {
	unit := layerUnit(l)
	ld, err := s.set.LoadPart(ctx, unit, shards.NoExpert, buf)
	if err != nil {
		return nil, fmt.Errorf("expert prediction: %w", err)
	}
	f32 := func(i int) ([]float32, error) {
		spec := s.layerSpecs[i]
		raw, ok := ld.Tensors[unitPrefix(unit)+spec.suffix]
		if !ok {
			return nil, fmt.Errorf("expert prediction: unit %s has no tensor %q", unit, unitPrefix(unit)+spec.suffix)
		}
		n := 1
		for _, d := range spec.shape {
			n *= d
		}
		out := make([]float32, n)
		if err := convertInto(out, raw); err != nil {
			return nil, fmt.Errorf("expert prediction: unit %s: tensor %q: %w", unit, raw.Name, err)
		}
		return out, nil
	}
	lr := &layerRouter{}
	if lr.w, err = f32(router); err != nil {
		return nil, err
	}
	if norm >= 0 {
		if lr.norm, err = f32(norm); err != nil {
			return nil, err
		}
	}
	return lr, nil
}

// predict reads ahead the experts layer's router chooses for the rows of xs (each [..., hidden]), pinned until
// layer's routedLayer is released; it does nothing when layer's experts are not read apart or there are more
// rows than predictRows.
func (p *predictor) predict(layer int, xs []*hostArray) {
	if p == nil || layer >= len(p.routers) || p.routers[layer] == nil || p.k.Load() == 0 {
		return
	}
	k := int(p.k.Load())
	lr := p.routers[layer]
	h := len(lr.w) / len(p.x.specs)
	rows := 0
	for _, x := range xs {
		rows += len(x.data) / h
	}
	if rows > predictRows {
		return
	}
	n := len(p.x.specs)
	chosen := make([]bool, n)
	normed, logits, scores, choice := make([]float32, h), make([]float32, n), make([]float32, n), make([]float32, n)
	top, weights := make([]int, k), make([]float32, k)
	opts := model.RouteOptions{K: k, Score: model.SoftmaxScores} // the top k by logit, whatever the scores
	for _, x := range xs {
		for r := 0; r < len(x.data); r += h {
			row := x.data[r : r+h]
			if lr.norm != nil {
				kernels.RMSNorm(normed, row, lr.norm, p.eps, 0)
				row = normed
			}
			for e := range logits {
				logits[e] = kernels.DotF32(lr.w[e*h:(e+1)*h], row)
			}
			routeRow(logits, opts, nil, scores, choice, top, weights, false)
			for _, e := range top {
				chosen[e] = true
			}
		}
	}
	var experts []int
	for e, c := range chosen {
		if c {
			experts = append(experts, e)
		}
	}
	p.mu.Lock()
	p.shadow[layer] = experts
	p.mu.Unlock()
	if p.accurate() {
		p.x.prefetch(layer, experts)
	}
}

// score counts layer's last prediction against the experts its rows were routed to (taken).
func (p *predictor) score(layer int, taken map[int]*expertEntry) {
	p.mu.Lock()
	experts := p.shadow[layer]
	delete(p.shadow, layer)
	p.mu.Unlock()
	for _, e := range experts {
		p.x.predicted.Add(1)
		if taken[e] != nil {
			p.x.predictedOK.Add(1)
		}
	}
}

// accurate reports whether the predictions so far are accurate enough to read their experts ahead: after
// predictWarmup predicted experts, at least predictAccuracy of them routed to. A misprediction costs a read
// that no row needed (with no expert cache, read_bytes_per_token grows by (1-a)/a of the experts' bytes at
// accuracy a); on the synthetic Qwen3-30B-A3B shape, whose random weights route nearly at random, the
// predictions were 49.5% right and reading them ahead read 30% more per token for no speed (docs/performance-log.md).
func (p *predictor) accurate() bool {
	n, ok := p.x.predicted.Load(), p.x.predictedOK.Load()
	return n >= p.warmup && float64(ok) >= p.minAccuracy*float64(n)
}

// The predictions' accuracy that reading ahead needs, measured over at least predictWarmup predicted experts.
const (
	predictWarmup   = 64
	predictAccuracy = 0.85
)
