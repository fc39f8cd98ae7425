package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/kvcache"
)

// The batch loop (continuous batching). Every generation is a job submitted to the engine's queue; one
// goroutine, started by the first submission and ending when nothing is left to do, runs the steps. At each
// step boundary it lets queued jobs join (up to Options.MaxBatch sequences), drops those whose context ended,
// and runs one forward pass for all the others: a joining sequence's prompt (or its next PrefillChunk) and the
// running sequences' last tokens go through each layer load together, the prompt costing its own tokens only
// (forward's hostGroups). A sequence leaves the batch as soon as it stops, freeing its row of the key/value
// cache for the next one.
//
// The cache of the loop (batcher.kv) has a row per sequence; it grows (rows, or positions per row) when a
// joining sequence needs more, copying what the rows hold. A Session keeps its row between requests.

// job is one request's life in the batch loop.
type job struct {
	ctx       context.Context
	seq       *sequence
	onToken   func(Token) error
	session   *Session
	submitted time.Time
	row       int
	unwatch   func() bool // stops the queued job's cancellation watch
	err       error
	done      chan struct{} // closed when the job ends
}

func newJob(ctx context.Context, s *sequence, session *Session, onToken func(Token) error) *job {
	return &job{ctx: ctx, seq: s, onToken: onToken, session: session, submitted: time.Now(), row: -1, done: make(chan struct{})}
}

// batcher runs the batch loop: the queue in front of it, admission, the steps, and the sessions' cache rows.
type batcher struct {
	run    *runner
	passes *passLock // held for each step
	draft  drafter   // proposes draft tokens (speculative decoding; draft.go); nil: none
	// The engine's Options.MaxBatch, PrefillBudget and GraphDecode.
	maxBatch, prefillBudget int
	graphDecode             bool

	mu      sync.Mutex // guards queue, running, closed and the sessions' busy flags
	queue   []*job
	running bool // a loop goroutine is running (or about to)
	closed  bool

	active, queued atomic.Int64
	steps, tokens  atomic.Int64
	loops          sync.WaitGroup // the loop goroutine, while it runs (close waits for it)

	// prefixCache: Options.PrefixCache, free rows keep the ids they hold for later prompts.
	prefixCache bool

	// Owned by the loop, under passes:
	kv         *kvcache.Store // the loop's cache: one row per sequence
	rowBusy    []bool         // kv rows in use by a sequence
	rowSession []*Session     // kv rows kept by a session
	rowIDs     [][]int        // what a free row holds (PrefixCache), nil for none
	rowFreed   []int64        // when each row was last freed (b.freed's count then), for least-recently-freed reuse
	freed      int64
}

func newBatcher(run *runner, passes *passLock, draft drafter, opts Options) *batcher {
	return &batcher{run: run, passes: passes, draft: draft, maxBatch: opts.MaxBatch, prefillBudget: opts.PrefillBudget,
		graphDecode: opts.GraphDecode, prefixCache: opts.PrefixCache}
}

// Session keeps one conversation's keys and values in the engine between its requests (Request.Session): a
// request whose prompt starts with the ids the session holds (the prompt and the reply of the previous turn,
// the last generated token excepted) computes only the new ones. The result is that of computing the whole
// prompt, up to the rounding of a prefix computed in another pass (bit-identical where the prefix ends at a
// multiple of prefillAlign positions). Close releases the cache row.
type Session struct {
	b      *batcher
	busy   bool  // a request of the session is queued or running (batcher.mu)
	row    int   // the session's cache row, -1 before its first request (owned by the loop)
	ids    []int // the ids whose keys and values the row holds (owned by the loop)
	closed atomic.Bool
}

// NewSession returns a Session of the engine.
func (e *Engine) NewSession() *Session { return &Session{b: e.batch, row: -1} }

// Close releases the session's cache row (at the batch loop's next step, or when it next runs).
func (s *Session) Close() { s.closed.Store(true) }

// Load is the batch loop's state.
type Load struct {
	Active int   // sequences in the batch
	Queued int   // requests waiting to join
	Steps  int64 // forward passes run since Open
	Tokens int64 // tokens generated since Open
}

// Load reports the batch loop's state (for metrics).
func (e *Engine) Load() Load {
	b := e.batch
	return Load{Active: int(b.active.Load()), Queued: int(b.queued.Load()), Steps: b.steps.Load(), Tokens: b.tokens.Load()}
}

// submit queues jobs (together, so that they join the same step when MaxBatch allows) and starts the loop if
// it is not running.
func (b *batcher) submit(jobs ...*job) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	for i, j := range jobs {
		if j.session == nil {
			continue
		}
		if j.session.b != b {
			return errors.New("engine: the request's session belongs to another engine")
		}
		if j.session.busy || slices.ContainsFunc(jobs[:i], func(o *job) bool { return o.session == j.session }) {
			return errors.New("engine: the request's session is already in use by another request")
		}
		if j.session.closed.Load() {
			return errors.New("engine: the request's session is closed")
		}
	}
	for _, j := range jobs {
		if j.session != nil {
			j.session.busy = true
		}
		b.queue = append(b.queue, j)
		j.unwatch = context.AfterFunc(j.ctx, func() { b.dequeue(j) })
	}
	b.queued.Add(int64(len(jobs)))
	if !b.running {
		b.running = true
		b.loops.Add(1)
		go b.loop()
	}
	return nil
}

// dequeue ends a queued job whose context ended; a job already in the batch is left to the loop.
func (b *batcher) dequeue(j *job) {
	b.mu.Lock()
	i := slices.Index(b.queue, j)
	if i >= 0 {
		b.queue = slices.Delete(b.queue, i, i+1)
		b.queued.Add(-1)
	}
	b.mu.Unlock()
	if i >= 0 {
		j.seq.joined = time.Now()
		b.end(j, j.ctx.Err())
	}
}

// end finishes a job: its result's stop reason and timings, its session, and the waiting caller.
func (b *batcher) end(j *job, err error) {
	res := j.seq.res
	switch {
	case err == nil:
	case j.ctx.Err() != nil && errors.Is(err, j.ctx.Err()):
		res.StopReason = StopCancelled
	default:
		res.StopReason = StopError
	}
	j.seq.finish(j.submitted)
	j.err = err
	if j.session != nil {
		b.mu.Lock()
		j.session.busy = false
		b.mu.Unlock()
	}
	close(j.done)
}

// close refuses new jobs, ends the queued ones with ErrClosed and waits for the sequences in the batch to end
// (Engine.Close).
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	queue := b.queue
	b.queue = nil
	b.queued.Store(0)
	b.mu.Unlock()
	for _, j := range queue {
		j.unwatch()
		b.end(j, ErrClosed)
	}
	b.loops.Wait()
}

// free frees the loop's cache (Engine.Close, after close).
func (b *batcher) free() {
	freeKVStore(b.kv)
	b.kv = nil
}

// admit moves queued jobs into the batch while it has room. It returns false, having marked the loop as no
// longer running, when there is nothing left to do.
func (b *batcher) admit(active []*job) ([]*job, []*job, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var joining []*job
	for len(b.queue) > 0 && (b.maxBatch <= 0 || len(active)+len(joining) < b.maxBatch) {
		j := b.queue[0]
		b.queue = b.queue[1:]
		b.queued.Add(-1)
		j.unwatch()
		joining = append(joining, j)
	}
	if len(active) == 0 && len(joining) == 0 {
		b.running = false
		return nil, nil, false
	}
	return active, joining, true
}

// loop runs steps while there are sequences to compute (see the top of this file). It holds the pass lock
// during each step, and lets Logits run between two steps: then it stops its stream, whose prefetched units
// would hold the buffers Logits' pass needs, and starts another for the next step.
func (b *batcher) loop() {
	defer b.loops.Done()
	var active, joining []*job
	var st *stream
	stopStream := func() {
		if st != nil {
			st.stop()
			st = nil
		}
	}
	for {
		b.passes.Lock()
		var more bool
		if active, joining, more = b.admit(active); !more {
			stopStream()
			b.active.Store(0)
			if b.graphDecode && !slices.ContainsFunc(b.rowSession, func(s *Session) bool { return s != nil }) {
				// The graphs compute every row of the cache: the next generation allocates one of its size.
				b.free()
				b.rowBusy, b.rowSession, b.rowIDs, b.rowFreed = nil, nil, nil, nil
			}
			b.passes.Unlock()
			return
		}
		active = b.joinAll(active, joining)
		b.active.Store(int64(len(active)))
		if len(active) > 0 {
			if st == nil {
				st = b.run.store.newStream(context.Background(), -1, b.graphDecode)
			}
			if err := b.runStep(st, active); err != nil {
				stopStream() // mid-schedule: the next pass starts a fresh stream
			}
			active = slices.DeleteFunc(active, func(j *job) bool {
				return j.row < 0 // left during the step
			})
		}
		if b.passes.waiting.Load() > 0 {
			stopStream()
		}
		b.passes.Unlock()
	}
}

// joinAll gives the joining jobs their rows and returns the sequences of the next pass: those joining, and
// those already active whose request has not ended (the others leave).
func (b *batcher) joinAll(active, joining []*job) []*job {
	b.reclaimSessionRows()
	for _, j := range joining {
		if err := b.join(j); err != nil {
			b.end(j, err)
			continue
		}
		active = append(active, j)
	}
	return slices.DeleteFunc(active, func(j *job) bool {
		if err := j.ctx.Err(); err != nil {
			b.leave(j, err)
			return true
		}
		return false
	})
}

// prefillAlign is where a prompt chunk that Options.PrefillBudget cuts short may end: a multiple of it, in
// positions. The host kernels' attention (kernels.Attention) sums keys in blocks aligned to multiples of 64
// positions, gathering a block's keys from the cached and the new runs, so their sums do not depend on where a
// chunk ends; simplego's graphs give the one-pass prefill's bits at cuts on multiples of 64, as measured
// (TestPrefillBudget checks both). Chunks ending elsewhere (Request.PrefillChunk, a Session's cached prefix) may
// differ from it by rounding.
const prefillAlign = 64

// llamaCppChunk is how much of a prompt with left tokens still to compute a chunk cut short by a budget of
// budget tokens takes under Options.Arithmetic llama.cpp (0: none this step). llama.cpp computes a prompt's
// tokens together (one batch), and multiplies some matrices of a batch of one token differently (its
// single-row kernels): a cut may fall anywhere, since each position's arithmetic does not depend on what else
// the pass computes, but it must not leave a chunk of one token on either side. A budget too small for that
// leaves the prompt for a later step (the budget is at least prefillAlign at the start of every step).
func llamaCppChunk(budget, left int) int {
	k := budget
	if left-k == 1 {
		k--
	}
	if k < 2 {
		return 0
	}
	return k
}

// runStep runs one forward pass over the active sequences and chooses the next token of every sequence whose
// prompt is complete. Sequences that end leave the batch (their row becomes -1). It returns the pass's error,
// already given to the sequences that took part.
func (b *batcher) runStep(st *stream, active []*job) error {
	b.propose(active)
	f := b.feeds(active)
	active = f.jobs
	b.run.setStep(f.label)

	// The pass stops early when every request in it has ended (a Ctrl-C on the only generation running).
	ctx, cancel := context.WithCancel(context.Background())
	unwatch := cancelWhenAllEnd(active, cancel)
	ids, err := b.recomputeFeed(f.rows, f.ids, func(i int) []int { return active[i].seq.history })
	var logits [][]float32
	if err == nil {
		feeds := make([]feed, len(ids))
		for i := range feeds {
			feeds[i] = feed{row: f.rows[i], ids: ids[i], tiled: f.tiled[i], every: f.trees[i] != nil}
			if d := f.trees[i]; d != nil && d.chain < len(d.ids) {
				feeds[i].tree = d
			}
		}
		logits, err = b.run.forward(ctx, st, b.kv, feeds, false)
	}
	unwatch()
	cancel()
	b.steps.Add(1)
	if err != nil {
		for _, j := range active {
			// A pass that failed may have written some layers' keys ahead (hostOps.Attention), over ring slots
			// the committed positions still need: what the row holds is no longer known, so it holds nothing.
			b.kv.Truncate(j.row, 0)
			if cerr := j.ctx.Err(); cerr != nil {
				b.leave(j, cerr)
			} else {
				b.leave(j, err)
			}
		}
		return err
	}
	b.choose(active, f.ids, logits)
	for _, j := range active {
		j.seq.logits = nil
	}
	b.run.handBack()
	return nil
}

// stepFeeds are what one step computes: the jobs taking part, their cache rows, their new ids, whether their
// products are tiled (sequence.tiledPrompt), and the profiler's step label (0 for prompts, else the decode step
// of the furthest sequence).
type stepFeeds struct {
	jobs  []*job
	rows  []int
	ids   [][]int
	tiled []bool
	trees []*draftTree // a draft's verification (nil: none): the logits of every position
	label int
}

// feeds chooses what each active sequence brings to the step: its last generated token, or the next chunk of
// its prompt.
//
// While some sequences decode, the prompts of the others (in the order they joined) bring at most
// Options.PrefillBudget tokens to the pass between them: a long prompt, or a burst of joining ones, is computed
// in chunks over several steps, each of which also decodes the running sequences, instead of holding them for
// one long pass. A chunk the budget cuts short ends at a multiple of prefillAlign positions (a prompt left
// without room sits the step out), so the result is the one-pass prefill's to the last bit; under
// Options.Arithmetic llama.cpp it ends anywhere but never leaves one token alone (llamaCppChunk). With no sequence
// decoding, every prompt brings all it may (its Request.PrefillChunk).
func (b *batcher) feeds(active []*job) stepFeeds {
	budget := -1 // prompt tokens this pass may still take; -1: no limit
	if b.prefillBudget > 0 && slices.ContainsFunc(active, func(j *job) bool { return j.seq.fed >= len(j.seq.res.PromptIDs) }) {
		budget = b.prefillBudget
	}
	var f stepFeeds
	for _, j := range active {
		s := j.seq
		if n := len(s.res.PromptIDs); s.fed < n {
			k := min(s.chunk, n-s.fed)
			switch {
			case budget >= 0 && k > budget && b.run.llama != nil:
				k = llamaCppChunk(budget, n-s.fed)
			case budget >= 0 && k > budget:
				k = (s.fed+budget)/prefillAlign*prefillAlign - s.fed
			}
			if k <= 0 {
				continue
			}
			if budget >= 0 {
				budget -= k
			}
			f.ids = append(f.ids, s.res.PromptIDs[s.fed:s.fed+k])
			f.tiled = append(f.tiled, s.tiledPrompt)
			f.trees = append(f.trees, nil)
		} else {
			gen := s.res.GeneratedIDs
			f.ids = append(f.ids, append(slices.Clone(gen[len(gen)-1:]), s.draft.ids...))
			f.tiled = append(f.tiled, false)
			var d *draftTree
			if len(s.draft.ids) > 0 {
				d = &s.draft
			}
			f.trees = append(f.trees, d)
			f.label = max(f.label, len(gen))
		}
		f.rows = append(f.rows, j.row)
		f.jobs = append(f.jobs, j)
	}
	return f
}

// cancelWhenAllEnd calls cancel once the contexts of all jobs have ended; the returned function stops watching.
func cancelWhenAllEnd(jobs []*job, cancel func()) (unwatch func()) {
	var left atomic.Int64
	left.Store(int64(len(jobs)))
	stops := make([]func() bool, len(jobs))
	for i, j := range jobs {
		stops[i] = context.AfterFunc(j.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// choose takes the pass's logits to the sequences (ids[i] being what active[i] brought): a prompt not yet
// complete waits for its next chunk, the others choose their next token (or verify their draft: accept); those
// that end leave the batch.
func (b *batcher) choose(active []*job, ids [][]int, logits [][]float32) {
	now := time.Now()
	for i, j := range active {
		s := j.seq
		if err := s.checkActivations(b.run.health[i], b.run.computeDType); err != nil {
			b.leave(j, err)
			continue
		}
		if n := len(s.res.PromptIDs); s.fed < n {
			s.fed += len(ids[i])
			if s.fed < n {
				continue
			}
			s.prefilled = now
		}
		s.res.Passes++
		var err error
		if len(s.draft.ids) > 0 {
			err = b.accept(j, logits[i])
		} else {
			s.logits = logits[i]
			_, err = s.choose(j.onToken, b.run.prof, nil)
			b.chosen(j)
		}
		if err != nil {
			b.leave(j, err)
			continue
		}
		if s.res.StopReason != "" {
			b.leave(j, nil)
		}
	}
}

// chosen counts a token the sequence of j has just chosen, and times its first.
func (b *batcher) chosen(j *job) {
	s := j.seq
	b.tokens.Add(1)
	if len(s.res.GeneratedIDs) == 1 {
		s.decodeStart = time.Now()
		s.res.Timings.TTFT = s.decodeStart.Sub(j.submitted)
	}
}

// propose asks the drafter for the drafts of the decoding sequences that draft, each at most its draftTokens and
// no more than the tokens it may still generate after this pass's own. A drafter that fails leaves the sequences
// undrafted for the step (the pass still gives each its token) and is logged.
func (b *batcher) propose(active []*job) {
	if b.draft == nil {
		return
	}
	var reqs []draftRequest
	for _, j := range active {
		s := j.seq
		n := min(s.draftTokens, s.maxNew-len(s.res.GeneratedIDs)-1)
		if s.fed < len(s.res.PromptIDs) || len(s.res.GeneratedIDs) == 0 || n <= 0 {
			continue
		}
		reqs = append(reqs, draftRequest{seq: s, history: s.history, n: n, leaves: min(s.draftLeaves, n)})
	}
	if len(reqs) == 0 {
		return
	}
	drafts, err := b.draft.draft(context.Background(), reqs)
	if err != nil {
		slog.Warn("speculative decoding: the drafter failed; this step verifies no draft", "err", err, "see", sections.Anchor(sections.Draft))
		return
	}
	for i, r := range reqs {
		r.seq.draft = drafts[i]
	}
}

// accept verifies the draft of j's sequence against the pass's logits of its last token and its draft (every
// position): from the last token down the draft tree it takes a child while the sequence's own choice is one of
// the candidates there (sampler.verify), then that choice (at the first disagreement, after a leaf, or past the
// chain's end), and makes the cache forget the positions of the tokens not taken.
func (b *batcher) accept(j *job, logits []float32) error {
	s := j.seq
	d := s.draft
	v := b.run.cfg.VocabSize
	held := b.kv.Len(j.row) - d.written(1+len(d.ids)) // the pass wrote the last token (at held) and the chain after it
	taken := 0
	for node := -1; ; {
		kids := d.children(node)
		var xs []int
		for _, k := range kids {
			xs = append(xs, d.ids[k])
		}
		s.logits = logits[(node+1)*v : (node+2)*v] // node's row: the last token's is 0, chain token i's i+1
		which, err := s.choose(j.onToken, b.run.prof, xs)
		if err != nil {
			return err // leave counts the draft and cuts the cache back to the history
		}
		taken++
		b.chosen(j)
		if which < 0 || s.res.StopReason != "" {
			break
		}
		s.res.Draft.Accepted++
		if node = kids[which]; node >= d.chain { // a leaf: its keys are not in the cache, so it ends the walk
			break
		}
	}
	s.res.Draft.Proposed += len(d.ids)
	s.draft = draftTree{}
	return b.cut(j.row, held+taken) // the last token taken is fed to the next pass
}

// cut cuts a cache row back to n positions (kvcache.Store.Truncate). A model's recurrent states cannot be cut
// back, except where the last pass verified the row's draft: its journal restores them to those after position
// n (recurrent_draft.go) before the other layers are cut.
func (b *batcher) cut(row, n int) error {
	err := b.kv.Truncate(row, n)
	if errors.Is(err, kvcache.ErrRecurrent) && b.run.journal.restore(b.kv, row, n) {
		return b.kv.Rewind(row, n)
	}
	return err
}

// join gives a job its cache row (its session's, else a free one), growing the cache when the row or the
// sequence's positions do not fit, and skips the prompt tokens the session's row already holds.
func (b *batcher) join(j *job) error {
	s := j.seq
	s.joined = time.Now()
	prompt := s.res.PromptIDs
	row, cached := b.rowFor(j)
	if row == len(b.rowBusy) {
		b.rowBusy = append(b.rowBusy, false)
		b.rowSession = append(b.rowSession, nil)
		b.rowIDs = append(b.rowIDs, nil)
		b.rowFreed = append(b.rowFreed, 0)
	}
	// The last generated token is never fed back: the row needs prompt + maxNew - 1 positions.
	if err := b.growKV(len(b.rowBusy), len(prompt)+s.maxNew-1); err != nil {
		return err
	}
	if err := b.kv.Truncate(row, min(cached, b.kv.Len(row))); errors.Is(err, kvcache.ErrRingOverwritten) {
		// A sliding layer's ring no longer holds the positions before the common prefix: compute it again.
		cached = 0
		err = b.kv.Truncate(row, 0)
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if cached > 0 && b.kv.Len(row) != cached {
		return fmt.Errorf("engine: cache row holds %d positions, expected %d", b.kv.Len(row), cached)
	}
	b.rowBusy[row], b.rowIDs[row] = true, nil
	if j.session != nil {
		j.session.row = row
		b.rowSession[row] = j.session
	}
	j.row = row
	s.fed = cached
	s.tiledPrompt = len(s.res.PromptIDs)-cached >= kernels.PromptTileRows
	s.res.CachedPromptTokens = cached
	return nil
}

// rowFor chooses j's cache row and how many of its prompt's positions the row already holds: its session's row;
// else, under Options.PrefixCache, the free row holding the longest prefix of the prompt (the least recently
// freed when none holds any); else the first free row; a new row (len(b.rowBusy)) when none is free. The last
// prompt position is always computed: its logits are needed.
func (b *batcher) rowFor(j *job) (row, cached int) {
	prompt := j.seq.res.PromptIDs
	if j.session != nil && j.session.row >= 0 {
		return j.session.row, min(commonPrefix(j.session.ids, prompt), len(prompt)-1)
	}
	row = -1
	for r, busy := range b.rowBusy {
		if busy || b.rowSession[r] != nil {
			continue
		}
		n := min(commonPrefix(b.rowIDs[r], prompt), len(prompt)-1)
		if n < len(b.rowIDs[r]) && recurrentPlan(b.run.plan) {
			n = 0 // a recurrent state cannot be cut back (kvcache.ErrRecurrent): only a row holding a prefix serves
		}
		if row < 0 || n > cached || n == cached && b.rowFreed[r] < b.rowFreed[row] {
			row, cached = r, n
		}
	}
	if row < 0 {
		return len(b.rowBusy), 0
	}
	return row, cached
}

// leave ends a sequence of the batch: its row is freed, or kept by its session with the ids it now holds.
func (b *batcher) leave(j *job, err error) {
	if b.draft != nil {
		b.draft.forget(j.seq)
	}
	if d := j.seq.draft; len(d.ids) > 0 { // ended during a verification (accept did not finish)
		j.seq.res.Draft.Proposed += len(d.ids)
		j.seq.draft = draftTree{}
	}
	if j.row >= 0 {
		// The cache holds the history but its last token, never more: a sequence ending mid-verification leaves
		// draft positions beyond it, which a session or the prefix cache must not take for the history's.
		if n := len(j.seq.history) - 1; b.kv.Len(j.row) > n && b.cut(j.row, n) != nil {
			b.kv.Truncate(j.row, 0)
		}
		if j.session != nil && !j.session.closed.Load() {
			j.session.ids = slices.Clone(j.seq.history[:b.kv.Len(j.row)])
		} else {
			b.freeRow(j.row, j.seq.history)
			if j.session != nil {
				j.session.row = -1
			}
		}
		j.row = -1
	}
	b.end(j, err)
}

// freeRow frees a cache row. Under Options.PrefixCache it keeps what the row holds, ids (the sequence's history
// up to the row's length), for a later prompt that starts with them (rowFor); else it empties it.
func (b *batcher) freeRow(row int, ids []int) {
	b.rowBusy[row] = false
	b.rowSession[row] = nil
	b.freed++
	b.rowFreed[row] = b.freed
	if b.prefixCache && len(ids) > 0 {
		b.rowIDs[row] = slices.Clone(ids[:b.kv.Len(row)])
		return
	}
	b.rowIDs[row] = nil
	b.kv.Truncate(row, 0)
}

// reclaimSessionRows frees the rows of closed sessions that no request is using.
func (b *batcher) reclaimSessionRows() {
	for row, s := range b.rowSession {
		if s == nil || !s.closed.Load() {
			continue
		}
		b.mu.Lock()
		busy := s.busy
		b.mu.Unlock()
		if !busy {
			b.freeRow(row, s.ids)
			s.row, s.ids = -1, nil
		}
	}
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// growKV makes the batch loop's cache hold at least rows sequences of capacity positions, reallocating it (rows
// and positions rounded up to powers of two, positions at most the model's context) and copying what the rows
// hold when it is too small.
func (b *batcher) growKV(rows, capacity int) error {
	want := b.run.kvConfig(bucket(rows), max(capacity, min(bucket(capacity), b.run.plan.Context)), b.run.onHost(false))
	if b.kv != nil {
		have := b.kv.Config()
		if have.Batch >= rows && have.Capacity >= capacity {
			return nil
		}
		want.Batch = max(want.Batch, have.Batch)
		want.Capacity = max(want.Capacity, have.Capacity)
	}
	kv, err := b.run.newKV(want)
	if err != nil {
		return fmt.Errorf("engine: key/value cache of %d sequences × %d positions: %w", want.Batch, want.Capacity, err)
	}
	if b.kv != nil {
		if err := kv.CopyFrom(b.kv); err != nil {
			freeKVStore(kv)
			return err
		}
		freeKVStore(b.kv)
	}
	b.kv = kv
	return nil
}
