package engine

import (
	"math"
	"slices"

	"github.com/layerstream/layerstream/engine/kernels"

	"github.com/layerstream/layerstream/engine/model"
)

// The host kernels' recurrent ops (model.RecurrentOps): Gated DeltaNet layers, computed position after position
// from each row's state in the layer's cache (kvcache.View.State), which they leave updated in place: the conv's
// last inputs in the state's K part, the delta rule's matrices in its V part. A row starting (no committed
// position) starts from zeros.

func (o hostOps) MergeHeads(x model.Value) model.Value {
	xa := arr(x)
	b, heads, t, d := xa.dims[0], xa.dims[1], xa.dims[2], xa.dims[3]
	y := o.arena.array(b, t, heads*d)
	for bi := range b {
		for h := range heads {
			for ti := range t {
				copy(y.data[((bi*t+ti)*heads+h)*d:][:d], xa.data[((bi*heads+h)*t+ti)*d:][:d])
			}
		}
	}
	return y
}

// state returns row bi's conv state (delta false) or delta state (delta true), zeroed for a row starting.
func (o hostOps) state(bi int, delta bool) []float32 {
	s, d := o.kv.State(o.row(bi))
	if delta {
		s = d
	}
	if o.past[bi] == 0 {
		clear(s)
	}
	return s
}

func (o hostOps) CausalConv(x, w model.Value) (model.Value, model.Value) {
	xa := arr(x)
	b, t, c := xa.dims[0], xa.dims[1], xa.dims[2]
	wf := weightData(w).([]float32) // [C, 1, K]
	k := len(wf) / c
	y := o.arena.array(b, t, c)
	next := make([]float32, (k-1)*c)
	for bi := range b {
		st := o.state(bi, false) // [K-1, C], oldest first
		if e := o.journal.entry(o.layer, o.row(bi), t); e != nil {
			e.recordConv(st, xa.data[bi*t*c:(bi+1)*t*c])
		}
		in := func(s int) []float32 { // input s of the window: the state, then the new positions
			if s < k-1 {
				return st[s*c : (s+1)*c]
			}
			return xa.data[(bi*t+s-(k-1))*c:][:c]
		}
		for ti := range t {
			out := y.data[(bi*t+ti)*c:][:c]
			for ch := range c {
				var sum float32
				for j := range k {
					sum += wf[ch*k+j] * in(ti + j)[ch]
				}
				out[ch] = sum
			}
		}
		for j := range k - 1 {
			copy(next[j*c:(j+1)*c], in(t+j))
		}
		copy(st, next)
	}
	return y, nil
}

func (o hostOps) GatedDeltaRule(q, k, v, a, b model.Value, p model.DeltaRule) (model.Value, model.Value) {
	qa, ka, va, aa, ba := arr(q), arr(k), arr(v), arr(a), arr(b)
	rows, t := qa.dims[0], qa.dims[1]
	nk, nv, dk, dv := p.KeyHeads, p.ValueHeads, p.KeyDim, p.ValueDim
	aLog, dtBias := weightData(p.ALog).([]float32), weightData(p.DTBias).([]float32)
	y := o.arena.array(rows, t, nv*dv)
	scale := float32(1 / math.Sqrt(float64(dk)))
	states, journal := make([][]float32, rows), make([]*stateEntry, rows)
	for bi := range rows {
		states[bi] = o.state(bi, true) // [nv, dk, dv]
		if journal[bi] = o.journal.entry(o.layer, o.row(bi), t); journal[bi] != nil {
			journal[bi].beginDelta(states[bi], nv, dk, dv)
		}
	}
	// Value heads are independent: each range of them runs its positions in order.
	kernels.ParallelFor(nv, func(lo, hi int) {
		qn, kn, mem := make([]float32, dk), make([]float32, dk), make([]float32, dv)
		for h := lo; h < hi; h++ {
			kh := p.KeyHead(h)
			for bi := range rows {
				s := states[bi][h*dk*dv:][:dk*dv]
				for ti := range t {
					at := bi*t + ti
					l2norm(qn, qa.data[at*nk*dk+kh*dk:][:dk], dk, scale)
					l2norm(kn, ka.data[at*nk*dk+kh*dk:][:dk], dk, 1)
					beta := sigmoid32(ba.data[at*nv+h])
					g := -float32(math.Exp(float64(aLog[h]))) * softplus32(aa.data[at*nv+h]+dtBias[h])
					decay, v := float32(math.Exp(float64(g))), va.data[at*nv*dv+h*dv:][:dv]
					if e := journal[bi]; e != nil {
						e.recordDelta(ti, h, kn, v, decay, beta)
					}
					deltaUpdate(s, kn, v, mem, decay, beta)
					deltaOutput(s, qn, y.data[at*nv*dv+h*dv:][:dv])
				}
			}
		}
	})
	return y, nil
}

// deltaUpdate advances one head's state s [dk, dv] by one position: decay, then the delta rule's write of v
// under key k with strength beta. mem [dv] is scratch. Row by row (kernels.AxpyF32), so that every pass over s
// is sequential.
func deltaUpdate(s, k, v, mem []float32, decay, beta float32) {
	dv := len(v)
	for i := range s {
		s[i] *= decay
	}
	clear(mem)
	for i, ki := range k { // mem = sᵀk
		kernels.AxpyF32(mem, ki, s[i*dv:(i+1)*dv])
	}
	for j := range mem { // the write's strength per value: β·(v - sᵀk)
		mem[j] = (v[j] - mem[j]) * beta
	}
	for i, ki := range k {
		kernels.AxpyF32(s[i*dv:(i+1)*dv], ki, mem)
	}
}

// deltaOutput writes one head's output o = sᵀq of its state s [dk, dv].
func deltaOutput(s, q, o []float32) {
	dv := len(o)
	clear(o)
	for i, qi := range q {
		kernels.AxpyF32(o, qi, s[i*dv:(i+1)*dv])
	}
}

// l2norm writes each head of d values of x, divided by sqrt(Σx² + 1e-6) and multiplied by scale, into y.
func l2norm(y, x []float32, d int, scale float32) {
	for h := 0; h < len(x); h += d {
		var ss float32
		for _, v := range x[h : h+d] {
			ss += v * v
		}
		inv := float32(1 / math.Sqrt(float64(ss+1e-6)))
		for i, v := range x[h : h+d] {
			y[h+i] = v * inv * scale
		}
	}
}

func sigmoid32(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// softplus32 is torch's softplus (beta 1, threshold 20): x itself above 20.
func softplus32(x float32) float32 {
	if x > 20 {
		return x
	}
	return float32(math.Log1p(math.Exp(float64(x))))
}

// recurrentPlan reports whether a model has recurrent layers, whose cache cannot be cut back to fewer positions
// (kvcache.ErrRecurrent): speculative decoding refuses it.
func recurrentPlan(p *model.Plan) bool {
	for _, l := range p.Layers {
		if l.Recurrent {
			return true
		}
	}
	return false
}

func (o hostOps) Concat(xs ...model.Value) model.Value {
	first := arr(xs[0])
	lead := first.dims[:len(first.dims)-1]
	rows, width := elems(lead), 0
	for _, x := range xs {
		width += arr(x).dims[len(arr(x).dims)-1]
	}
	y := o.arena.array(append(slices.Clone(lead), width)...)
	at := 0
	for _, x := range xs {
		xa := arr(x)
		n := xa.dims[len(xa.dims)-1]
		for r := range rows {
			copy(y.data[r*width+at:r*width+at+n], xa.data[r*n:(r+1)*n])
		}
		at += n
	}
	return y
}
