package kernels

import (
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/layerstream/layerstream/internal/grow"
	"github.com/layerstream/layerstream/quant"
)

// AttentionParams are a layer's attention constants.
type AttentionParams struct {
	Scale   float32 // multiplies q·k: 1/√headDim, or a model's own (query_pre_attn_scalar)
	SoftCap float32 // > 0: a scaled score s becomes SoftCap·tanh(s/SoftCap) (Gemma 2's soft-capping)
	Window  int     // > 0: a query at position p sees only keys at positions p−Window+1 … p (sliding window)
	Chunk   int     // > 0: a query at position p sees only keys at positions ⌊p/Chunk⌋·Chunk … p (chunked attention)
}

// first is the earliest key position a query at position q sees (its window's or chunk's start, else 0).
func (p AttentionParams) first(q int) int {
	first := 0
	if p.Window > 0 {
		first = q - p.Window + 1
	}
	if p.Chunk > 0 {
		first = max(first, q/p.Chunk*p.Chunk)
	}
	return first
}

// KeyRun is keys and values of one key/value head at consecutive positions: rows of headDim elements, row i
// of K and V at position Pos+i, N rows. They are float32 (K, V) or float16 bits (K16, V16: a float16 cache),
// widened exactly as the tile kernels load them.
type KeyRun struct {
	K, V     []float32
	K16, V16 []uint16
	Pos, N   int
}

// AttentionJob is the queries of one sequence that share a key/value head, and every key they may see.
type AttentionJob struct {
	// Q holds the query row of head h (< Heads) at position Pos0+t (t < T) at Q[h·QHead+t·QPos:][:headDim];
	// Out receives its output at Out[h·OutHead+t·OutPos:][:headDim].
	Q, Out                       []float32
	QHead, QPos, OutHead, OutPos int
	Heads, T, Pos0               int
	Runs                         []KeyRun
	// Sinks, when set, holds one learned logit per head (h < Heads) that joins the softmax's denominator and
	// is then dropped (gpt-oss's attention sinks): weights e^(s_j) / (Σ_j e^(s_j) + e^(Sinks[h])).
	Sinks []float32
	// Leaves are more queries after the T consecutive ones (query T+i, laid out in Q and Out as the others, is
	// leaf i): a draft tree's leaves, each at its own position beside the chain's, seeing its own key there.
	Leaves []TreeLeaf
}

// TreeLeaf is a query of a draft tree's leaf at position Pos: it sees the job's keys at positions before Pos
// (the cache and the chain up to its parent, with the causal, window and chunk rules), and at Pos its own key
// and value K, V (headDim each, as the cache would give them back) instead of the job's. Its result is bit for
// bit that of a job of its own whose runs are those keys, then K, V as a run of one at Pos (the own key summed
// last, in the block of Pos, as a decode step after the leaf sums it), while the job's keys are loaded once
// for every query of a tile, leaves and chain alike.
type TreeLeaf struct {
	Pos  int
	K, V []float32
}

// pos is query t's position.
func (job *AttentionJob) pos(t int) int {
	if t >= job.T {
		return job.Leaves[t-job.T].Pos
	}
	return job.Pos0 + t
}

// leaf is the leaf that row r of a tile starting at query t0 is, or nil.
func (job *AttentionJob) leaf(t0, r int) *TreeLeaf {
	if t := t0 + r/job.Heads; t >= job.T {
		return &job.Leaves[t-job.T]
	}
	return nil
}

// Attention computes, for every query of every job, softmax(scores)·V over the keys of its job's runs that it
// sees: a query at position p sees a key at position k when k ≤ p (causal) and, with a window, k > p − Window
// (with a chunk, ⌊k/Chunk⌋ = ⌊p/Chunk⌋). A score is Scale·q·k, soft-capped when SoftCap > 0; a job's Sinks add
// their terms to the denominator. It works flash-attention style: per tile of queries (up to attnTileRows rows:
// every head of a few positions) and block of attnBlock keys, the scores, their exponentials (a running maximum
// per query rescales what was summed before) and the weighted values, so memory traffic stays in L1/L2 at any
// length and a block no query of the tile sees is skipped. The tiles are spread over the cores. A query's result
// depends only on its own job (not on the other jobs, nor on how many run together): the blocks are fixed by key
// positions (aligned to multiples of attnBlock, so that a query sees the same blocks whether its keys come in one
// run or split at a block boundary, and runs given in position order give every query its blocks in the same
// order), the tiles by query positions. A job's tree leaves share its tiles (TreeLeaf): their own keys are
// summed in the block of their position, at the place a run of their own would put them.
func Attention(p AttentionParams, d int, jobs []AttentionJob) {
	type item struct{ job, t0, tq int }
	var items []item
	for j, job := range jobs {
		tq, queries := max(1, attnTileRows/max(1, job.Heads)), job.T+len(job.Leaves)
		for t0 := 0; t0 < queries; t0 += tq {
			items = append(items, item{j, t0, min(tq, queries-t0)})
		}
	}
	// The last tiles see the most keys: start them first.
	for i, k := 0, len(items)-1; i < k; i, k = i+1, k-1 {
		items[i], items[k] = items[k], items[i]
	}
	var next atomic.Int64
	work := 0
	for _, it := range items {
		job := jobs[it.job]
		work += it.tq * job.Heads * (job.Pos0 + it.t0 + it.tq)
	}
	workers := runtime.GOMAXPROCS(0)
	if work*d < 1<<14 {
		workers = 1
	}
	parallelFor(workers, workers, func(int, int) {
		s := attnScratchPool.Get().(*attnScratch)
		defer attnScratchPool.Put(s)
		for {
			i := int(next.Add(1)) - 1
			if i >= len(items) {
				return
			}
			it := items[i]
			s.tile(p, d, &jobs[it.job], it.t0, it.tq)
		}
	})
}

// attnTileRows bounds the query rows of a tile, attnBlock is the keys of a block.
const (
	attnTileRows = 24
	attnBlock    = 64
)

// attnScratch is one worker's memory for a tile: its packed queries, a block of scores (then weights), its
// running maxima and sums, its outputs, a zero-padded copy of a block's last keys, and a block's keys and
// values widened from float16 (without AVX-512; with it the tiles widen them as they load them).
type attnScratch struct {
	qp, sc, o, kpad []float32
	kpad16          []uint16
	kw, vw          []float32
	gk, gv          []float32 // a block gathered from several runs (gather)
	gk16, gv16      []uint16
	m, l            []float32
	qpos            []int
	// A tile's tree leaves (rows of AttentionJob.Leaves): each row's score against its own key, its weight in
	// the block being summed, where its own key stands (ownState), and the own keys packed (leafScores).
	own, ownW []float32
	ownState  []ownState
	ownK      []float32
}

// ownState is where a leaf row's own key stands in a tile: not summed yet, weighted in the block being summed
// (its value still to add: ownValues), or summed.
type ownState uint8

const (
	ownWaiting ownState = iota
	ownInBlock
	ownDone
)

var attnScratchPool = sync.Pool{New: func() any { return new(attnScratch) }}

// tile computes the queries of job t0 … t0+tq−1 (every head), rows ordered query-major.
func (s *attnScratch) tile(p AttentionParams, d int, job *AttentionJob, t0, tq int) {
	rows := tq * job.Heads
	asm := useAVX512 && d%16 == 0
	s.start(d, job, t0, rows, asm)
	qlo, qhi := slices.Min(s.qpos), slices.Max(s.qpos)
	// Blocks are aligned to key positions (multiples of attnBlock), whatever the runs: a key is summed in the same
	// block at the same place whether it comes from the cache or from the pass, and the pieces of one block that
	// consecutive runs hold are gathered into one.
	var pending []keyPiece
	flush := func() {
		if len(pending) == 0 {
			return
		}
		klo := pending[0].pos()
		last := pending[len(pending)-1]
		khi := last.pos() + last.n - 1
		// Skipped when no query of the tile sees a key of it and no leaf's own key belongs in it.
		if klo <= qhi && khi >= p.first(qlo) || s.ownHere(job, t0, klo, khi-klo+1) {
			run, j0, n := s.gather(d, pending)
			s.block(p, d, job, t0, rows, asm, run, j0, n)
		}
		pending = pending[:0]
	}
	for i := range job.Runs {
		run := &job.Runs[i]
		for j0, n := 0, 0; j0 < run.N; j0 += n {
			n = min(attnBlock-(run.Pos+j0)%attnBlock, run.N-j0)
			pc := keyPiece{run, j0, n}
			if len(pending) > 0 {
				prev := pending[len(pending)-1]
				if prev.pos()+prev.n != pc.pos() || pc.pos()%attnBlock == 0 {
					flush()
				}
			}
			pending = append(pending, pc)
		}
	}
	flush()
	s.ownBlocks(p, d, job, t0, rows, asm)
	s.finish(d, job, t0, rows)
}

// finish writes the tile's outputs: each row's weighted sum of values over its sum of weights.
func (s *attnScratch) finish(d int, job *AttentionJob, t0, rows int) {
	for r := range rows {
		h, t := r%job.Heads, t0+r/job.Heads
		out := job.Out[h*job.OutHead+t*job.OutPos:][:d]
		inv := float32(0)
		if s.l[r] > 0 {
			inv = 1 / s.l[r]
		}
		for i, v := range s.o[r*d : (r+1)*d] {
			out[i] = v * inv
		}
	}
}

// ownCol is the column of row r's own key in a block of n keys from position klo, when the row is a leaf whose
// own key is not summed yet and belongs there: in the block's aligned range, at most right after its keys (the
// place a run of its own would give it). Else −1.
func (s *attnScratch) ownCol(job *AttentionJob, t0, r, klo, n int) int {
	leaf := job.leaf(t0, r)
	if leaf == nil || s.ownState[r] != ownWaiting {
		return -1
	}
	if c := leaf.Pos - klo; c >= 0 && c <= n && leaf.Pos/attnBlock == klo/attnBlock {
		return c
	}
	return -1
}

// ownHere reports whether a leaf row's own key belongs in the block of n keys from klo (ownCol).
func (s *attnScratch) ownHere(job *AttentionJob, t0, klo, n int) bool {
	for r := range s.ownState {
		if s.ownCol(job, t0, r, klo, n) >= 0 {
			return true
		}
	}
	return false
}

// ownBlocks sums the own keys no block of the runs took (a leaf past the runs' last block, or after a gap in
// them): a block of the own key alone for each such position, in position order, as a run of its own gives.
func (s *attnScratch) ownBlocks(p AttentionParams, d int, job *AttentionJob, t0, rows int, asm bool) {
	for {
		at := -1
		for r := range rows {
			if leaf := job.leaf(t0, r); leaf != nil && s.ownState[r] == ownWaiting && (at < 0 || leaf.Pos < at) {
				at = leaf.Pos
			}
		}
		if at < 0 {
			return
		}
		s.block(p, d, job, t0, rows, asm, KeyRun{Pos: at}, 0, 0)
	}
}

// keyPiece is n keys of a run from its j0-th: part of one block.
type keyPiece struct {
	run   *KeyRun
	j0, n int
}

func (k keyPiece) pos() int { return k.run.Pos + k.j0 }

// gather returns the keys of one block's pieces as a run: the piece's own run when there is one piece, else a
// copy of them in the scratch, as float16 bits when any piece is (float32 keys there are ones the cache would
// round to float16: hostOps rounds them), so that the block computes as the same keys from one run would.
func (s *attnScratch) gather(d int, pieces []keyPiece) (run KeyRun, j0, n int) {
	if len(pieces) == 1 {
		return *pieces[0].run, pieces[0].j0, pieces[0].n
	}
	half := false
	for _, pc := range pieces {
		n += pc.n
		half = half || pc.run.K16 != nil
	}
	run = KeyRun{Pos: pieces[0].pos(), N: n}
	if half {
		s.gk16, s.gv16 = grow.Slice(s.gk16, n*d), grow.Slice(s.gv16, n*d)
		run.K16, run.V16 = s.gk16[:n*d], s.gv16[:n*d]
	} else {
		s.gk, s.gv = grow.Slice(s.gk, n*d), grow.Slice(s.gv, n*d)
		run.K, run.V = s.gk[:n*d], s.gv[:n*d]
	}
	at := 0
	for _, pc := range pieces {
		lo, hi := pc.j0*d, (pc.j0+pc.n)*d
		switch {
		case !half:
			copy(run.K[at:], pc.run.K[lo:hi])
			copy(run.V[at:], pc.run.V[lo:hi])
		case pc.run.K16 != nil:
			copy(run.K16[at:], pc.run.K16[lo:hi])
			copy(run.V16[at:], pc.run.V16[lo:hi])
		default:
			for i, v := range pc.run.K[lo:hi] {
				run.K16[at+i] = quant.Float32ToHalf(v)
			}
			for i, v := range pc.run.V[lo:hi] {
				run.V16[at+i] = quant.Float32ToHalf(v)
			}
		}
		at += hi - lo
	}
	return run, 0, n
}

// start readies the scratch for a tile of rows query rows (from t0): cleared sums, each row's position, and
// with asm the queries packed for the assembly tiles.
func (s *attnScratch) start(d int, job *AttentionJob, t0, rows int, asm bool) {
	s.sc = grow.Slice(s.sc, rows*attnBlock)
	s.o = grow.Slice(s.o, rows*d)
	s.m, s.l = grow.Slice(s.m, rows), grow.Slice(s.l, rows)
	clear(s.o)
	clear(s.l)
	for r := range s.m {
		s.m[r] = float32(math.Inf(-1))
		if job.Sinks != nil { // the sink as a first key of score Sinks[h] and value zero: e^0 summed at its own maximum
			s.m[r], s.l[r] = job.Sinks[r%job.Heads], 1
		}
	}
	if cap(s.qpos) < rows {
		s.qpos = make([]int, rows)
	}
	s.qpos = s.qpos[:rows]
	for r := range rows {
		s.qpos[r] = job.pos(t0 + r/job.Heads)
	}
	if asm {
		chunks := (d + 15) / 16
		s.qp = grow.Slice(s.qp, (rows+gemmTileRows-1)/gemmTileRows*gemmTileRows*chunks*16)
		packTiles(s.qp, rows, d, 16, func(r int) []float32 { return query(job, t0, r, d) }, putF32)
	}
	s.leafScores(d, job, t0, rows, asm)
}

// leafScores readies the tile's leaf rows: their own keys waiting, and s.own[r] the score of row r against its own key,
// computed as a block's scores are (each score a sum in the same order whatever the other rows and keys).
func (s *attnScratch) leafScores(d int, job *AttentionJob, t0, rows int, asm bool) {
	s.ownState = grow.Slice(s.ownState, rows)
	clear(s.ownState)
	s.own, s.ownW = grow.Slice(s.own, rows), grow.Slice(s.ownW, rows)
	lo, hi := max(t0, job.T), t0+rows/job.Heads // the tile's leaves: queries lo … hi−1
	if lo >= hi {
		return
	}
	if asm {
		s.ownK = grow.Slice(s.ownK, (hi-lo)*d)
		for t := lo; t < hi; t++ {
			copy(s.ownK[(t-lo)*d:], job.Leaves[t-job.T].K[:d])
		}
		s.scoresAVX512(rows, d, s.ownK[:(hi-lo)*d], hi-lo) // every row against every own key: its own at column t−lo
	}
	for r := range rows {
		t := t0 + r/job.Heads
		switch {
		case t < job.T:
		case asm:
			s.own[r] = s.sc[r*attnBlock+t-lo]
		default:
			s.own[r] = DotF32(query(job, t0, r, d), job.Leaves[t-job.T].K[:d])
		}
	}
}

// query is row r's query of a tile starting at t0.
func query(job *AttentionJob, t0, r, d int) []float32 {
	h, t := r%job.Heads, t0+r/job.Heads
	return job.Q[h*job.QHead+t*job.QPos:][:d]
}

// block adds the n keys and values of run from j0 (one block) to the tile's rows: scores, online softmax,
// weighted values.
func (s *attnScratch) block(p AttentionParams, d int, job *AttentionJob, t0, rows int, asm bool, run KeyRun, j0, n int) {
	var keys, vals []float32
	half := run.K16 != nil
	switch {
	case half && asm: // the tiles widen them as they load them
	case half:
		s.kw, s.vw = grow.Slice(s.kw, attnBlock*d), grow.Slice(s.vw, attnBlock*d)
		keys, vals = s.kw[:n*d], s.vw[:n*d]
		quant.WidenHalves(keys, run.K16[j0*d:(j0+n)*d])
		quant.WidenHalves(vals, run.V16[j0*d:(j0+n)*d])
	default:
		keys, vals = run.K[j0*d:(j0+n)*d], run.V[j0*d:(j0+n)*d]
	}
	switch {
	case asm && half:
		s.scoresF16AVX512(rows, d, run.K16[j0*d:(j0+n)*d], n)
	case asm:
		s.scoresAVX512(rows, d, keys, n)
	default:
		for r := range rows {
			q := query(job, t0, r, d)
			for j := range n {
				s.sc[r*attnBlock+j] = DotF32(q, keys[j*d:(j+1)*d])
			}
		}
	}
	s.blockSoftmax(p, job, t0, rows, run.Pos+j0, n)
	switch {
	case asm && half:
		s.pvF16AVX512(rows, d, run.V16[j0*d:(j0+n)*d], n)
	case asm:
		s.pvAVX512(rows, d, vals, n)
	default:
		for r := range rows {
			o := s.o[r*d : (r+1)*d]
			for j, w := range s.sc[r*attnBlock : r*attnBlock+n] {
				if w != 0 {
					AxpyF32(o, w, vals[j*d:(j+1)*d])
				}
			}
		}
	}
	s.ownValues(d, job, t0, rows, asm)
}

// blockSoftmax turns the scores of a block of n keys from position klo into weights, row by row (softmax); a
// leaf row whose own key belongs in the block (ownCol) gets its own score at its column first, and its weight
// there is kept in s.ownW (the column cleared, so that the block's values add nothing there) for ownValues.
func (s *attnScratch) blockSoftmax(p AttentionParams, job *AttentionJob, t0, rows, klo, n int) {
	for r := range rows {
		c := s.ownCol(job, t0, r, klo, n)
		if c < 0 {
			s.softmax(p, r, n, klo)
			continue
		}
		s.sc[r*attnBlock+c] = s.own[r]
		s.softmax(p, r, max(n, c+1), klo)
		s.ownW[r], s.sc[r*attnBlock+c] = s.sc[r*attnBlock+c], 0
		s.ownState[r] = ownInBlock
	}
}

// ownValues adds, after a block's values, the own value of each leaf row whose own key the block took, at its
// weight s.ownW[r]: one more multiply-add per element, the block's last as in a run of its own (the kernels the
// block's values take, which add in the same way).
func (s *attnScratch) ownValues(d int, job *AttentionJob, t0, rows int, asm bool) {
	for r := range rows {
		if s.ownState[r] != ownInBlock {
			continue
		}
		s.ownState[r] = ownDone
		o, v, w := s.o[r*d:(r+1)*d], job.leaf(t0, r).V[:d], s.ownW[r]
		switch {
		case asm:
			pvRowAVX512(o, w, v)
		case w != 0:
			AxpyF32(o, w, v)
		}
	}
}

// softmax turns row r's scores of a block of n keys, the first at position klo, into weights: zero for keys
// the query does not see, e^(score − running max) for the others, and rescales what the row summed before when
// its maximum grows.
func (s *attnScratch) softmax(p AttentionParams, r, n, klo int) {
	row := s.sc[r*attnBlock : r*attnBlock+n]
	q := s.qpos[r]
	a, b := max(0, p.first(q)-klo), min(n, q-klo+1) // keys at positions ≤ q, within the window or chunk
	if a >= b {
		clear(row)
		return
	}
	clear(row[:a])
	clear(row[b:])
	mOld := s.m[r]
	var mNew, sum float32
	if useAVX512 {
		mNew, sum = softmaxRowAVX512(&row[a], b-a, p.Scale, p.SoftCap, mOld)
	} else {
		mNew, sum = softmaxRowGo(row[a:b], p.Scale, p.SoftCap, mOld)
	}
	if mNew != mOld {
		alpha := float32(math.Exp(float64(mOld - mNew))) // 0 for the first keys the row sees (mOld = −Inf)
		s.l[r] *= alpha
		o := s.o[len(s.o)/len(s.m)*r:][:len(s.o)/len(s.m)]
		for i := range o {
			o[i] *= alpha
		}
	}
	s.m[r] = mNew
	s.l[r] += sum
}

// softmaxRowGo is softmaxRowAVX512 in Go: s[i] = e^(t − mNew) for t = s[i]·scale (soft-capped when
// softcap > 0), mNew the largest of mOld and every t; it returns mNew and the sum.
func softmaxRowGo(s []float32, scale, softcap, mOld float32) (mNew, sum float32) {
	mNew = mOld
	for i, v := range s {
		v *= scale
		if softcap > 0 {
			v = softcap * float32(math.Tanh(float64(v/softcap)))
		}
		s[i] = v
		mNew = max(mNew, v)
	}
	for i, v := range s {
		e := float32(math.Exp(float64(v - mNew)))
		s[i] = e
		sum += e
	}
	return mNew, sum
}
