package engine

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/kvcache"
	"github.com/layerstream/layerstream/profiler"
)

// buildExecs creates the output head's executable; the decoder layers' are made when a kind of layer first
// runs (layerExec). Graphs are compiled per distinct input shape: new-position counts are bucketed to powers of
// two, and the cache capacity is fixed per Store, so a handful of graphs serve all prompts.
func (r *runner) buildExecs() error {
	r.layerExecs = map[model.LayerKind]*graph.Exec{}
	headFn := func(x, norm, w *graph.Node) *graph.Node { return node(r.arch.Head(graphOps{}, x, norm, w)) }
	var err error
	if r.headExec, err = graph.NewExec(r.backend, headFn); err != nil {
		return fmt.Errorf("head graph: %w", err)
	}
	r.headExec.SetMaxCache(-1)
	return nil
}

// layerExec returns the executable of a kind of decoder layer, serving every layer of that kind. Its inputs are
// x, cos and sin (only for a layer with rotary embeddings), the query scale (only for a layer with one), mask,
// pastK, pastV, the per-layer input (only for a model with them), the new keys and values it attends with (only
// for a SharedKV layer), then the weights in Plan order, bound to their roles once, when the graph is built. It
// returns x, and but for a SharedKV layer the new keys and values.
func (r *runner) layerExec(kind model.LayerKind) (*graph.Exec, error) {
	if x, ok := r.layerExecs[kind]; ok {
		return x, nil
	}
	layerFn := func(ins []*graph.Node) []*graph.Node {
		var ops graphOps
		x, rest := ins[0], ins[1:]
		if kind.Rope != model.NoRope {
			ops.cos, ops.sin, rest = rest[0], rest[1], rest[2:]
		}
		if kind.QueryScale.Beta != 0 {
			ops.qscale, rest = rest[0], rest[1:]
		}
		if kind.Recurrent { // valid [B, T] in the mask's place, the states as pastK and pastV
			ops.valid = rest[0]
		} else {
			ops.mask = rest[0]
		}
		ops.pastK, ops.pastV, rest = rest[1], rest[2], rest[3:]
		in := model.LayerInputs{Kind: kind, X: x}
		if r.plan.PerLayerInput > 0 {
			in.PerLayer, rest = rest[0], rest[1:]
		}
		if kind.SharedKV {
			in.K, in.V, rest = rest[0], rest[1], rest[2:]
		}
		weights := make([]model.Value, len(r.plan.Weights)) // the layer's inputs are the specs its kind holds
		for i := range weights {
			if r.plan.Holds(kind, i) {
				weights[i], rest = rest[0], rest[1:]
			}
		}
		in.W = r.plan.Bind(weights)
		out := r.arch.Layer(ops, in)
		if kind.SharedKV {
			return []*graph.Node{node(out.X)}
		}
		return []*graph.Node{node(out.X), node(out.K), node(out.V)}
	}
	x, err := graph.NewExec(r.backend, layerFn)
	if err != nil {
		return nil, fmt.Errorf("layer graph: %w", err)
	}
	x.SetMaxCache(-1)
	r.layerExecs[kind] = x
	return x, nil
}

// exec runs an executable, turning a panic inside GoMLX into an error.
func exec(x *graph.Exec, what string, args ...any) (outs []*tensors.Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: %v", what, r)
		}
	}()
	outs, err = x.Exec(args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return outs, nil
}

// graphPass is a forward pass as compiled graphs over every row of the store, x [batch, tb, hidden]: row r
// brings lens[r] new positions (0: a padding row, computed but not written).
type graphPass struct {
	r        *runner
	kv       *kvcache.Store
	rows     []int // the feeds' rows
	lens     []int // by row of the store
	tb       int
	all      bool
	x        *tensors.Tensor
	cos, sin []*tensors.Tensor // by Plan.Ropes index
	qscales  map[model.QueryScale]*tensors.Tensor
	masks    map[maskKind]*tensors.Tensor
	valid    *tensors.Tensor // [batch, tb]: 1 at each row's new positions (recurrent layers)
	health   [][]float32     // by row of the store: the runner's health rows of forward's rows, nil for the others
	k, v     *deviceTensor
	// pli are the per-layer inputs [batch, layers, tb, P] (nil: none).
	pli *hostArray
	// newKV are the new keys and values of the layers others attend with (kvSources), by layer: written to the
	// cache by head, after those layers attended beside the cache as it was before the pass.
	newKV   map[int][2]*tensors.Tensor
	sources map[int]bool
}

// newGraphPass embeds the new tokens into the padded batch and builds the pass's rotary tables and masks.
func (r *runner) newGraphPass(kv *kvcache.Store, feeds []feed, embed embedding, all bool) (pass, error) {
	h, b := r.cfg.HiddenSize, kv.Config().Batch
	tmax := 0
	for _, f := range feeds {
		if f.every {
			return nil, errors.New("the logits of several new positions of a sequence in a batch (a draft's verification) need the host kernels (device cpu without graph decode)")
		}
		tmax = max(tmax, len(f.ids))
	}
	tb := bucket(tmax)
	p := &graphPass{r: r, kv: kv, lens: make([]int, b), tb: tb, all: all, masks: map[maskKind]*tensors.Tensor{}, health: make([][]float32, b),
		newKV: map[int][2]*tensors.Tensor{}, sources: kvSources(r.plan)}
	xHost := make([]float32, b*tb*h)
	ids := make([][]int, b)
	for row := range ids {
		ids[row] = slices.Repeat([]int{-1}, tb) // padding
	}
	for i, f := range feeds {
		p.rows = append(p.rows, f.row)
		p.lens[f.row] = len(f.ids)
		p.health[f.row] = r.health[i]
		copy(ids[f.row], f.ids)
		for j, id := range f.ids {
			if err := embed.token(xHost[(f.row*tb+j)*h:(f.row*tb+j+1)*h], id, kv.Len(f.row)+j); err != nil {
				return nil, err
			}
		}
	}
	var err error
	if p.pli, err = embed.perLayer(&hostArray{data: xHost, dims: []int{b, tb, h}}, ids); err != nil {
		return nil, err
	}
	every := make([]int, b)
	for row := range every {
		every[row] = row
	}
	pt := r.passTables(kv, every, p.lens, tb, true)
	p.x = tensors.FromFlatDataAndDimensions(xHost, b, tb, h)
	for ri, rope := range r.plan.Ropes {
		p.cos = append(p.cos, tensors.FromFlatDataAndDimensions(pt.cos[ri], b, tb, rope.Dims))
		p.sin = append(p.sin, tensors.FromFlatDataAndDimensions(pt.sin[ri], b, tb, rope.Dims))
	}
	for w, m := range pt.masks {
		p.masks[w] = tensors.FromFlatDataAndDimensions(m, b, tb, pt.slots[w]+tb)
	}
	p.valid = validTensor(p.lens, tb)
	p.qscales = map[model.QueryScale]*tensors.Tensor{}
	for s, f := range pt.qscales {
		p.qscales[s] = tensors.FromFlatDataAndDimensions(f, b, tb)
	}
	return p, nil
}

// prepare fills the device buffers of a resident layer the host kernels read in place, and without shared
// buffers copies the layer's cache, written on the host, to the device.
func (p *graphPass) prepare(i int, w *weightSet) error {
	if err := p.r.store.deviceReady(w); err != nil {
		return err
	}
	slot, _ := p.kv.View(i).Layer(0)
	p.k, p.v = slot.KHandle.(*deviceTensor), slot.VHandle.(*deviceTensor)
	if err := p.k.upload(); err != nil {
		return fmt.Errorf("key/value cache: %w", err)
	}
	if p.v != p.k { // a latent layer's values are its keys
		if err := p.v.upload(); err != nil {
			return fmt.Errorf("key/value cache: %w", err)
		}
	}
	return nil
}

func (p *graphPass) compute(i int, w *weightSet) error {
	kind := p.r.plan.Layers[i]
	args := []any{p.x}
	if kind.Rope != model.NoRope {
		args = append(args, p.cos[kind.Rope], p.sin[kind.Rope])
	}
	if kind.QueryScale.Beta != 0 {
		args = append(args, p.qscales[kind.QueryScale])
	}
	mask := p.masks[maskOf(kind)]
	if kind.Recurrent {
		mask = p.valid
	}
	args = append(args, mask, p.k.t, p.v.t)
	if p.pli != nil {
		pl := arr(layerInput(nil, p.pli, i))
		t := tensors.FromFlatDataAndDimensions(pl.data, pl.dims...)
		defer t.FinalizeAll()
		args = append(args, t)
	}
	if kind.SharedKV {
		kv := p.newKV[p.r.plan.KVSource[i]]
		args = append(args, kv[0], kv[1])
	}
	args = append(args, w.args(p.r.plan)...)
	lx, err := p.r.layerExec(kind)
	if err != nil {
		return err
	}
	outs, err := exec(lx, "compiled layer", args...)
	if err != nil {
		return err
	}
	p.x.FinalizeAll()
	p.x = outs[0]
	var werr error
	switch {
	case kind.SharedKV:
	case p.sources[i]: // written by head
		p.newKV[i] = [2]*tensors.Tensor{outs[1], outs[2]}
	default:
		werr = p.write(p.kv.View(i), outs[1], outs[2])
		outs[1].FinalizeAll()
		outs[2].FinalizeAll()
	}
	h := p.r.cfg.HiddenSize
	return errors.Join(werr, p.x.ConstFlatData(func(flat any) {
		f := flat.([]float32)
		for row, t := range p.lens {
			if t > 0 && p.health[row] != nil {
				p.health[row][i] = guard.MaxAbs(f[row*p.tb*h : (row*p.tb+t)*h])
			}
		}
	}))
}

func (p *graphPass) head(st *stream) ([][]float32, error) {
	for l, kv := range p.newKV {
		if err := p.write(p.kv.View(l), kv[0], kv[1]); err != nil {
			return nil, fmt.Errorf("layer %d: %w", l, err)
		}
	}
	for row, t := range p.lens {
		if err := p.kv.Advance(row, t); err != nil {
			return nil, err
		}
	}
	x := p.x
	p.x = nil // consumed by headLogits
	logits, err := p.r.headLogits(st, x, p.lens, p.tb, p.all)
	if err != nil || p.all {
		return logits, err
	}
	out := make([][]float32, len(p.rows))
	for i, row := range p.rows {
		out[i] = logits[row]
	}
	return out, nil
}

func (p *graphPass) free() {
	if p.x != nil {
		p.x.FinalizeAll()
	}
	for _, t := range append(p.cos, p.sin...) {
		t.FinalizeAll()
	}
	for _, t := range p.qscales {
		t.FinalizeAll()
	}
	for _, t := range p.masks {
		t.FinalizeAll()
	}
	if p.valid != nil {
		p.valid.FinalizeAll()
	}
	for _, kv := range p.newKV {
		kv[0].FinalizeAll()
		kv[1].FinalizeAll()
	}
}

// headLogits applies the final norm and the output projection to x [batch, tb, hidden] (consumed): to the
// last new position of each row r with lens[r] > 0 (the others get nil), or with all (batch 1) to the first
// lens[0] positions.
func (r *runner) headLogits(st *stream, x *tensors.Tensor, lens []int, tb int, all bool) ([][]float32, error) {
	h, v := r.cfg.HiddenSize, r.cfg.VocabSize
	in := x
	rows := lens[0]
	var from []int // the rows of the store the head's input rows belong to
	if !all {
		// Only the last real position of each row: copy them out of the padded bucket.
		var last []float32
		err := x.ConstFlatData(func(flat any) {
			f := flat.([]float32)
			for r, t := range lens {
				if t > 0 {
					last = append(last, f[(r*tb+t-1)*h:(r*tb+t)*h]...)
					from = append(from, r)
				}
			}
		})
		x.FinalizeAll()
		if err != nil {
			return nil, fmt.Errorf("final hidden state: %w", err)
		}
		rows = len(from)
		in = tensors.FromFlatDataAndDimensions(last, 1, rows, h)
	}
	defer in.FinalizeAll()
	nw, hw, release, err := r.store.headWeights(st)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := errors.Join(r.store.deviceReady(nw), r.store.deviceReady(hw)); err != nil {
		return nil, err
	}
	span := r.prof.Begin(profiler.Forward, r.stepLabel(), -1)
	outs, err := exec(r.headExec, "output head", in, nw.tensors[0].t, hw.tensors[0].t)
	span.End(hw.bytes)
	if err != nil {
		return nil, err
	}
	defer outs[0].FinalizeAll()
	logits := make([][]float32, rows)
	err = outs[0].ConstFlatData(func(flat any) {
		f := flat.([]float32)
		for r := range rows {
			logits[r] = append([]float32(nil), f[r*v:(r+1)*v]...)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("logits: %w", err)
	}
	if all {
		return logits, nil
	}
	byRow := make([][]float32, len(lens))
	for i, r := range from {
		byRow[r] = logits[i]
	}
	return byRow, nil
}
