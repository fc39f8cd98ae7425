package engine

import (
	"fmt"
	"slices"

	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/engine/model"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/kvcache"
	"github.com/layerstream/layerstream/profiler"
)

// hostPass is a forward pass on the host kernels (hostOps): the groups' new positions go through each layer,
// every weight matrix loaded once for all of them (each group reads it in turn).
type hostPass struct {
	r      *runner
	kv     *kvcache.Store
	feeds  []feed
	groups []*hostGroup
	all    bool // every new position's logits (Logits: one sequence)
	arena  *hostArena
	shared bool         // arena is the runner's (runner.arenaMu held until free)
	keep   []*hostArray // the groups' activations, kept across a recycle of the arena
	// sources are the layers others attend with (kvSources).
	sources map[int]bool
}

// hostGroup is sequences a host pass computes together: each brings the same number t of new positions.
type hostGroup struct {
	rows   []int // the sequences' cache rows
	past   []int // their lengths in the cache: the positions of their first new tokens
	at     []int // their indices in forward's feeds: where their logits go
	t      int
	tiled  bool        // the quantized products are tiled (forward)
	every  bool        // verifications: every position computed as a decode step would
	tree   *draftTree  // a draft tree's verification (one row)
	pos    [][]int     // each row's positions
	x      model.Value // [len(rows), t, hidden]
	tables passTables  // rotary tables and masks of the group's rows
	// pli are the per-layer inputs [len(rows), layers, t, P] (nil: none).
	pli *hostArray
	// kv are the new keys and values of the layers others attend with (model.Plan.KVSource), by layer.
	kv map[int][2]*hostArray
}

// newHostPass embeds the new tokens into their groups (hostGroups).
func (r *runner) newHostPass(kv *kvcache.Store, feeds []feed, embed embedding, all bool) (pass, error) {
	groups, err := r.hostGroups(kv, feeds, embed)
	if err != nil {
		return nil, err
	}
	if recurrentPlan(r.plan) {
		r.journal.begin(kv, feeds)
	}
	p := &hostPass{r: r, kv: kv, feeds: feeds, groups: groups, all: all, arena: new(hostArena), keep: make([]*hostArray, len(groups)),
		sources: kvSources(r.plan)}
	if r.arenaMu.TryLock() {
		p.arena, p.shared = &r.arena, true
	}
	return p, nil
}

// hostGroups embeds each feed's ids and groups the feeds by their number of new positions, whether their
// products are tiled (forward) and whether they are verifications, in order of first appearance: decode steps
// (one position each) share one group, a prompt forms its own unless another of the same length comes with it,
// a draft tree always its own. Every row of a group is computed exactly as alone (the host kernels sum each row in
// the same order whatever the rows beside it), so grouping changes no result.
func (r *runner) hostGroups(kv *kvcache.Store, feeds []feed, embed embedding) ([]*hostGroup, error) {
	type key struct {
		t            int
		tiled, every bool
		tree         int // the feed's index for a draft tree, else -1
	}
	var groups []*hostGroup
	byKey := map[key]*hostGroup{}
	for i, f := range feeds {
		// A verification (every) computes its positions as decode steps do: never tiled.
		k := key{len(f.ids), !f.every && (len(f.ids) >= kernels.PromptTileRows || f.tiled), f.every, -1}
		if f.tree != nil {
			k.tree = i
		}
		g := byKey[k]
		if g == nil {
			g = &hostGroup{t: k.t, tiled: k.tiled, every: f.every, tree: f.tree}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.rows, g.at = append(g.rows, f.row), append(g.at, i)
	}
	for _, g := range groups {
		if err := r.embedGroup(kv, g, feeds, embed); err != nil {
			return nil, err
		}
	}
	return groups, nil
}

// embedGroup embeds a group's ids and builds its tables: for a verification, the rotary table of each position
// as a decode step at that position builds it (a tree's leaves at their depths).
func (r *runner) embedGroup(kv *kvcache.Store, g *hostGroup, feeds []feed, embed embedding) error {
	h := r.cfg.HiddenSize
	x := newHostArray(len(g.rows), g.t, h)
	lens := make([]int, len(g.rows))
	g.past = make([]int, len(g.rows))
	ids := make([][]int, len(g.rows))
	for j, row := range g.rows {
		f := feeds[g.at[j]]
		pos0 := kv.Len(row)
		g.past[j], lens[j], ids[j] = pos0, g.t, f.ids
		g.pos = append(g.pos, f.positions(pos0))
		for k, id := range f.ids {
			if err := embed.token(x.data[(j*g.t+k)*h:(j*g.t+k+1)*h], id, g.pos[j][k]); err != nil {
				return err
			}
		}
	}
	g.x = x
	var err error
	if g.pli, err = embed.perLayer(x, ids); err != nil {
		return err
	}
	if g.every {
		g.tables = r.decodeTables(g.pos)
		return nil
	}
	g.tables = r.passTables(kv, g.rows, lens, g.t, false)
	return nil
}

// prepare recycles the previous layer's arrays, but its outputs: this layer's inputs.
func (p *hostPass) prepare(int, *weightSet) error {
	for j, g := range p.groups {
		p.keep[j] = arr(g.x)
	}
	p.arena.recycle(p.keep...)
	return nil
}

func (p *hostPass) compute(i int, w *weightSet) error {
	weights := w.bound(p.r.plan)
	view := p.kv.View(i)
	err := p.r.store.guardMapped(func() error { // the weights may be read from a mapped shard
		for _, g := range p.groups {
			if err := p.layer(i, g, view, weights, w.routed); err != nil {
				return err
			}
		}
		return nil
	})
	if x := p.r.store.experts; err == nil && x != nil && x.pred != nil {
		xs := make([]*hostArray, len(p.groups))
		for j, g := range p.groups {
			xs[j] = arr(g.x)
		}
		x.pred.predict(i+1, xs) // the next layer's experts, read while its attention computes
	}
	return err
}

// layer computes decoder layer i for group g; its attention (hostOps.Attention) writes the keys and values to
// the layer's cache view.
func (p *hostPass) layer(i int, g *hostGroup, view *kvcache.View, weights *model.LayerWeights, experts *routedLayer) error {
	r := p.r
	kind := r.plan.Layers[i]
	var err error
	ops := hostOps{past: g.past, pos: g.pos, tree: g.tree, window: kind.Window, chunk: kind.Chunk, qscale: kind.QueryScale, kv: view, rows: g.rows, arena: p.arena, err: &err,
		bf16Products: r.bf16Products, tiled: g.tiled, llamaCpp: r.llama, batch: g.t, observe: r.observe,
		shared: kind.SharedKV, deferWrite: p.sources[i], routed: experts, weights: weights}
	if g.every && kind.Recurrent {
		ops.journal, ops.layer = &r.journal, i
	}
	if ops.llamaCpp != nil {
		last := i == r.cfg.NumHiddenLayers-1 && !p.all
		if last {
			ops.rowByRow = llamaCppOutputRows(weights)
		}
		if len(weights.Experts) > 0 {
			ops.experts = newLlamaCppExperts(weights, last)
		}
	}
	if kind.Rope != model.NoRope {
		ops.cos, ops.sin = g.tables.cos[kind.Rope], g.tables.sin[kind.Rope]
	}
	in := model.LayerInputs{Kind: kind, X: g.x, W: weights, PerLayer: layerInput(p.arena, g.pli, i)}
	if kind.SharedKV {
		kv := g.kv[r.plan.KVSource[i]]
		in.K, in.V = kv[0], kv[1]
	}
	out := r.arch.Layer(ops, in) // its attention writes the cache
	if err != nil {
		return err
	}
	g.x = out.X
	if p.sources[i] { // kept beyond the arena's recycling, for the layers attending with them and the head
		if g.kv == nil {
			g.kv = map[int][2]*hostArray{}
		}
		g.kv[i] = [2]*hostArray{cloneArray(arr(out.K)), cloneArray(arr(out.V))}
	}
	h := r.cfg.HiddenSize
	for j, at := range g.at {
		r.health[at][i] = guard.MaxAbs(arr(g.x).data[j*g.t*h : (j+1)*g.t*h])
	}
	return nil
}

// head commits the groups' positions to the cache and applies the final norm and the output projection to the
// last new position of each feed (of every one with feed.every or all), in the feeds' order.
func (p *hostPass) head(st *stream) ([][]float32, error) {
	r := p.r
	h, v := r.cfg.HiddenSize, r.cfg.VocabSize
	first := make([]int, len(p.feeds)+1) // feed i's rows of the head's input: first[i] ≤ row < first[i+1]
	for i, f := range p.feeds {
		first[i+1] = first[i] + 1
		if f.every || p.all {
			first[i+1] = first[i] + len(f.ids)
		}
	}
	if err := p.writeDeferred(); err != nil {
		return nil, err
	}
	n := first[len(p.feeds)]
	last := p.arena.array(n, 1, h)
	for _, g := range p.groups {
		x := arr(g.x).data
		for j, row := range g.rows {
			if err := p.kv.Advance(row, p.feeds[g.at[j]].commit()); err != nil {
				return nil, err
			}
			at := g.at[j]
			k := first[at+1] - first[at] // the last k positions
			copy(last.data[first[at]*h:first[at+1]*h], x[(j*g.t+g.t-k)*h:(j*g.t+g.t)*h])
		}
	}
	r.warnClamped(p.kv)
	nw, hw, release, err := r.store.headWeights(st)
	if err != nil {
		return nil, err
	}
	defer release()
	span := r.prof.Begin(profiler.Forward, r.stepLabel(), -1)
	ops := hostOps{bf16Products: r.bf16Products, llamaCpp: r.llama, batch: 1, observe: r.observe, arena: r.headArena()}
	if p.all {
		ops.batch = n // llama.cpp computes the head over every position of the batch when it keeps all logits
	}
	var logits []float32
	herr := r.store.guardMapped(func() error {
		r.logits = arr(r.arch.Head(ops, last, nw.hostTensors()[0], hw.hostTensors()[0]))
		logits = r.logits.data
		return nil
	})
	span.End(hw.bytes)
	if herr != nil {
		return nil, herr
	}
	if p.all {
		out := make([][]float32, n)
		for j := range out {
			out[j] = logits[j*v : (j+1)*v : (j+1)*v]
		}
		return out, nil
	}
	out := make([][]float32, len(p.feeds))
	for i := range out {
		out[i] = logits[first[i]*v : first[i+1]*v : first[i+1]*v]
	}
	return out, nil
}

func (p *hostPass) free() {
	if p.shared {
		p.arena.endPass()
		p.r.arenaMu.Unlock()
	}
}

// headArena is a fresh arena for the head's arrays, holding the logits handed back (runner.handBack) if any:
// the head's output takes them when it has their length.
func (r *runner) headArena() *hostArena {
	a := &hostArena{free: map[int][]*hostArray{}}
	if y := r.spare; y != nil {
		a.free[len(y.data)] = []*hostArray{y}
		r.spare = nil
	}
	return a
}

// writeDeferred writes the keys and values of the layers others attend with that their attention did not write
// (a pass too long to write ahead into a ring, hostOps.deferWrite): the later layers attended beside the ring as
// it was before the pass.
func (p *hostPass) writeDeferred() error {
	for l := range p.sources {
		view := p.kv.View(l)
		for _, g := range p.groups {
			if view.WritesAhead(g.t) {
				continue // written by its attention
			}
			var err error
			hostOps{kv: view, rows: g.rows, tree: g.tree, err: &err}.commit(g.kv[l][0], g.kv[l][1])
			if err != nil {
				return fmt.Errorf("layer %d: %w", l, err)
			}
		}
	}
	return nil
}

// cloneArray is a copy of a.
func cloneArray(a *hostArray) *hostArray {
	return &hostArray{data: slices.Clone(a.data), dims: slices.Clone(a.dims)}
}
