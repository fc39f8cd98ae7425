package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layerstream/layerstream/engine/kernels"
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
// The cache of the loop (Engine.bkv) has a row per sequence; it grows (rows, or positions per row) when a
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

// scheduler is the queue in front of the batch loop.
type scheduler struct {
	mu      sync.Mutex
	queue   []*job
	running bool // a loop goroutine is running (or about to)
	closed  bool

	active, queued atomic.Int64
	steps, tokens  atomic.Int64
	loops          sync.WaitGroup // the loop goroutine, while it runs (Close waits for it)
}

// Session keeps one conversation's keys and values in the engine between its requests (Request.Session): a
// request whose prompt starts with the ids the session holds (the prompt and the reply of the previous turn,
// the last generated token excepted) computes only the new ones. The result is that of computing the whole
// prompt, up to the rounding of a prefix computed in another pass (bit-identical where the prefix ends at a
// multiple of prefillAlign positions). Close releases the cache row.
type Session struct {
	e      *Engine
	busy   bool  // a request of the session is queued or running (scheduler.mu)
	row    int   // the session's cache row, -1 before its first request (owned by the loop)
	ids    []int // the ids whose keys and values the row holds (owned by the loop)
	closed atomic.Bool
}

// NewSession returns a Session of the engine.
func (e *Engine) NewSession() *Session { return &Session{e: e, row: -1} }

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
	s := &e.sched
	return Load{Active: int(s.active.Load()), Queued: int(s.queued.Load()), Steps: s.steps.Load(), Tokens: s.tokens.Load()}
}

// submit queues jobs (together, so that they join the same step when MaxBatch allows) and starts the loop if
// it is not running.
func (e *Engine) submit(jobs ...*job) error {
	s := &e.sched
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	for i, j := range jobs {
		if j.session == nil {
			continue
		}
		if j.session.e != e {
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
		s.queue = append(s.queue, j)
		j.unwatch = context.AfterFunc(j.ctx, func() { e.dequeue(j) })
	}
	s.queued.Add(int64(len(jobs)))
	if !s.running {
		s.running = true
		s.loops.Add(1)
		go e.loop()
	}
	return nil
}

// dequeue ends a queued job whose context ended; a job already in the batch is left to the loop.
func (e *Engine) dequeue(j *job) {
	s := &e.sched
	s.mu.Lock()
	i := slices.Index(s.queue, j)
	if i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
		s.queued.Add(-1)
	}
	s.mu.Unlock()
	if i >= 0 {
		j.seq.joined = time.Now()
		e.end(j, j.ctx.Err())
	}
}

// end finishes a job: its result's stop reason and timings, its session, and the waiting caller.
func (e *Engine) end(j *job, err error) {
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
		e.sched.mu.Lock()
		j.session.busy = false
		e.sched.mu.Unlock()
	}
	close(j.done)
}

// closeQueue refuses new jobs and ends the queued ones with ErrClosed (Close).
func (e *Engine) closeQueue() {
	s := &e.sched
	s.mu.Lock()
	s.closed = true
	queue := s.queue
	s.queue = nil
	s.queued.Store(0)
	s.mu.Unlock()
	for _, j := range queue {
		j.unwatch()
		e.end(j, ErrClosed)
	}
}

// admit moves queued jobs into the batch while it has room. It returns false, having marked the loop as no
// longer running, when there is nothing left to do.
func (e *Engine) admit(active []*job) ([]*job, []*job, bool) {
	s := &e.sched
	s.mu.Lock()
	var joining []*job
	for len(s.queue) > 0 && (e.opts.MaxBatch <= 0 || len(active)+len(joining) < e.opts.MaxBatch) {
		j := s.queue[0]
		s.queue = s.queue[1:]
		s.queued.Add(-1)
		j.unwatch()
		joining = append(joining, j)
	}
	if len(active) == 0 && len(joining) == 0 {
		s.running = false
		s.mu.Unlock()
		return nil, nil, false
	}
	s.mu.Unlock()
	return active, joining, true
}

// loop runs steps while there are sequences to compute (see the top of this file). It holds the engine's lock
// during each step, and lets Logits run between two steps: then it stops its stream, whose prefetched units
// would hold the buffers Logits' pass needs, and starts another for the next step.
func (e *Engine) loop() {
	defer e.sched.loops.Done()
	var active, joining []*job
	var st *stream
	stopStream := func() {
		if st != nil {
			st.stop()
			st = nil
		}
	}
	for {
		e.mu.Lock()
		var more bool
		if active, joining, more = e.admit(active); !more {
			stopStream()
			e.sched.active.Store(0)
			if e.opts.GraphDecode && !slices.ContainsFunc(e.rowSession, func(s *Session) bool { return s != nil }) {
				// The graphs compute every row of the cache: the next generation allocates one of its size.
				freeKVStore(e.bkv)
				e.bkv, e.rowBusy, e.rowSession = nil, nil, nil
			}
			e.mu.Unlock()
			return
		}
		e.reclaimSessionRows()
		for _, j := range joining {
			if err := e.join(j); err != nil {
				e.end(j, err)
				continue
			}
			active = append(active, j)
		}
		// Sequences whose request ended leave before the pass.
		active = slices.DeleteFunc(active, func(j *job) bool {
			if err := j.ctx.Err(); err != nil {
				e.leave(j, err)
				return true
			}
			return false
		})
		e.sched.active.Store(int64(len(active)))
		if len(active) > 0 {
			if st == nil {
				st = e.newStream(context.Background(), -1, e.opts.GraphDecode)
			}
			if err := e.runStep(st, active); err != nil {
				stopStream() // mid-schedule: the next pass starts a fresh stream
			}
			active = slices.DeleteFunc(active, func(j *job) bool {
				return j.row < 0 // left during the step
			})
		}
		if e.logitsWaiting.Load() > 0 {
			stopStream()
		}
		e.mu.Unlock()
	}
}

// prefillAlign is where a prompt chunk that Options.PrefillBudget cuts short may end: a multiple of it, in
// positions. The host kernels' attention (kernels.Attention) sums keys in blocks of 64 positions from the start
// of each run of keys, the cached ones and the new ones: a chunk ending at a multiple of 64 leaves every key in
// the block where one pass over the whole prompt puts it, so the chunked prompt's logits are bit-identical to the
// one-pass prefill's; simplego's graphs too, as measured (TestPrefillBudget checks both, and fails for unaligned
// cuts). Chunks ending elsewhere (Request.PrefillChunk, a Session's cached prefix) differ from it by rounding.
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
//
// While some sequences decode, the prompts of the others (in the order they joined) bring at most
// Options.PrefillBudget tokens to the pass between them: a long prompt, or a burst of joining ones, is computed
// in chunks over several steps, each of which also decodes the running sequences, instead of holding them for
// one long pass. A chunk the budget cuts short ends at a multiple of prefillAlign positions (a prompt left
// without room sits the step out), so the result is the one-pass prefill's to the last bit; under
// Options.Arithmetic llama.cpp it ends anywhere but never leaves one token alone (llamaCppChunk). With no sequence
// decoding, every prompt brings all it may (its Request.PrefillChunk).
func (e *Engine) runStep(st *stream, active []*job) error {
	budget := -1 // prompt tokens this pass may still take; -1: no limit
	if e.opts.PrefillBudget > 0 && slices.ContainsFunc(active, func(j *job) bool { return j.seq.fed >= len(j.seq.res.PromptIDs) }) {
		budget = e.opts.PrefillBudget
	}
	var rows []int
	var ids [][]int
	var tiled []bool // per row: a prompt pass taking the tiled products (sequence.tiledPrompt)
	label := 0       // the profiler's step: 0 for prompts, else the decode step of the furthest sequence
	pass := active[:0:0]
	for _, j := range active {
		s := j.seq
		if n := len(s.res.PromptIDs); s.fed < n {
			k := min(s.chunk, n-s.fed)
			switch {
			case budget >= 0 && k > budget && e.llamaCpp() != nil:
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
			ids = append(ids, s.res.PromptIDs[s.fed:s.fed+k])
			tiled = append(tiled, s.tiledPrompt)
		} else {
			gen := s.res.GeneratedIDs
			ids = append(ids, gen[len(gen)-1:])
			tiled = append(tiled, false)
			label = max(label, len(gen))
		}
		rows = append(rows, j.row)
		pass = append(pass, j)
	}
	active = pass
	e.step.Store(int64(label))

	// The pass stops early when every request in it has ended (a Ctrl-C on the only generation running).
	ctx, cancel := context.WithCancel(context.Background())
	var logits [][]float32
	left := atomic.Int64{}
	left.Store(int64(len(active)))
	unwatch := make([]func() bool, len(active))
	for i, j := range active {
		unwatch[i] = context.AfterFunc(j.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	feed, err := e.recomputeFeed(rows, ids, func(i int) []int { return active[i].seq.history })
	if err == nil {
		logits, err = e.forward(ctx, st, e.bkv, rows, feed, tiled, false)
	}
	for _, u := range unwatch {
		u()
	}
	cancel()
	e.sched.steps.Add(1)
	if err != nil {
		for _, j := range active {
			if cerr := j.ctx.Err(); cerr != nil {
				e.leave(j, cerr)
			} else {
				e.leave(j, err)
			}
		}
		return err
	}
	now := time.Now()
	for i, j := range active {
		s := j.seq
		if err := e.checkActivations(s, e.health[i]); err != nil {
			e.leave(j, err)
			continue
		}
		s.logits = logits[i]
		if n := len(s.res.PromptIDs); s.fed < n {
			s.fed += len(ids[i])
			if s.fed < n {
				continue
			}
			s.prefilled = now
		}
		if err := e.choose(s, j.onToken); err != nil {
			e.leave(j, err)
			continue
		}
		e.sched.tokens.Add(1)
		if len(s.res.GeneratedIDs) == 1 {
			s.decodeStart = time.Now()
			s.res.Timings.TTFT = s.decodeStart.Sub(j.submitted)
		}
		if s.res.StopReason != "" {
			e.leave(j, nil)
		}
	}
	return nil
}

// join gives a job its cache row (its session's, else a free one), growing the cache when the row or the
// sequence's positions do not fit, and skips the prompt tokens the session's row already holds.
func (e *Engine) join(j *job) error {
	s := j.seq
	s.joined = time.Now()
	row := -1
	if j.session != nil && j.session.row >= 0 {
		row = j.session.row
	} else {
		row = slices.Index(e.rowBusy, false)
		if row < 0 {
			row = len(e.rowBusy)
			e.rowBusy = append(e.rowBusy, false)
			e.rowSession = append(e.rowSession, nil)
		}
	}
	prompt := s.res.PromptIDs
	cached := 0
	if j.session != nil && j.session.row >= 0 {
		cached = commonPrefix(j.session.ids, prompt)
		cached = min(cached, len(prompt)-1) // the last prompt position's logits are needed
	}
	// The last generated token is never fed back: the row needs prompt + maxNew - 1 positions.
	if err := e.growKV(len(e.rowBusy), len(prompt)+s.maxNew-1); err != nil {
		return err
	}
	if err := e.bkv.Truncate(row, min(cached, e.bkv.Len(row))); errors.Is(err, kvcache.ErrRingOverwritten) {
		// A sliding layer's ring no longer holds the positions before the common prefix: compute it again.
		cached = 0
		err = e.bkv.Truncate(row, 0)
		if err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	if cached > 0 && e.bkv.Len(row) != cached {
		return fmt.Errorf("engine: session cache holds %d positions, expected %d", e.bkv.Len(row), cached)
	}
	e.rowBusy[row] = true
	if j.session != nil {
		j.session.row = row
		e.rowSession[row] = j.session
	}
	j.row = row
	s.fed = cached
	s.tiledPrompt = len(s.res.PromptIDs)-cached >= kernels.PromptTileRows
	s.res.CachedPromptTokens = cached
	return nil
}

// leave ends a sequence of the batch: its row is freed, or kept by its session with the ids it now holds.
func (e *Engine) leave(j *job, err error) {
	if j.row >= 0 {
		if j.session != nil && !j.session.closed.Load() {
			j.session.ids = slices.Clone(j.seq.history[:e.bkv.Len(j.row)])
		} else {
			e.freeRow(j.row)
			if j.session != nil {
				j.session.row = -1
			}
		}
		j.row = -1
	}
	e.end(j, err)
}

func (e *Engine) freeRow(row int) {
	e.rowBusy[row] = false
	e.rowSession[row] = nil
	e.bkv.Truncate(row, 0)
}

// reclaimSessionRows frees the rows of closed sessions that no request is using.
func (e *Engine) reclaimSessionRows() {
	for row, s := range e.rowSession {
		if s == nil || !s.closed.Load() {
			continue
		}
		e.sched.mu.Lock()
		busy := s.busy
		e.sched.mu.Unlock()
		if !busy {
			e.freeRow(row)
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
func (e *Engine) growKV(rows, capacity int) error {
	want := e.kvConfig(bucket(rows), max(capacity, min(bucket(capacity), e.plan.Context)), e.onHost(false))
	if e.bkv != nil {
		have := e.bkv.Config()
		if have.Batch >= rows && have.Capacity >= capacity {
			return nil
		}
		want.Batch = max(want.Batch, have.Batch)
		want.Capacity = max(want.Capacity, have.Capacity)
	}
	kv, err := e.newKV(want)
	if err != nil {
		return fmt.Errorf("engine: key/value cache of %d sequences × %d positions: %w", want.Batch, want.Capacity, err)
	}
	if e.bkv != nil {
		if err := kv.CopyFrom(e.bkv); err != nil {
			freeKVStore(kv)
			return err
		}
		freeKVStore(e.bkv)
	}
	e.bkv = kv
	return nil
}
