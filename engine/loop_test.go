package engine

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/synth"
)

// TestConcurrentRequestsJoinTheBatch: requests submitted while others run join the batch at a step boundary
// (one forward pass serves them all) and each gets exactly its result alone, including those that need the
// cache to grow (more rows, more positions) while others are in it.
func TestConcurrentRequestsJoinTheBatch(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	ctx := context.Background()
	reqs := batchRequests(t)
	for _, mode := range []struct {
		name string
		opts Options
	}{
		{"streamed", Options{}},
		{"graph-decode", Options{GraphDecode: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e := open(t, model, mode.opts)
			alone := make([]*Result, len(reqs))
			soloSteps := int64(0)
			for i, r := range reqs {
				before := e.Load().Steps
				res, err := e.Generate(ctx, r, nil)
				if err != nil {
					t.Fatal(err)
				}
				alone[i] = res
				soloSteps += e.Load().Steps - before
			}
			// Request 0 runs first; request i joins once request 0 has generated 2i tokens.
			got := make([]*Result, len(reqs))
			errs := make([]error, len(reqs))
			var wg sync.WaitGroup
			launch := func(i int) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[i], errs[i] = e.Generate(ctx, reqs[i], nil)
				}()
			}
			before := e.Load().Steps
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[0], errs[0] = e.Generate(ctx, reqs[0], func(tok Token) error {
					if i := tok.Step / 2; tok.Step%2 == 0 && i >= 1 && i < len(reqs) {
						launch(i)
					}
					return nil
				})
			}()
			wg.Wait()
			steps := e.Load().Steps - before
			for i := range reqs {
				if errs[i] != nil {
					t.Fatalf("request %d: %v", i, errs[i])
				}
				if !slices.Equal(got[i].GeneratedIDs, alone[i].GeneratedIDs) || got[i].StopReason != alone[i].StopReason {
					t.Errorf("request %d joining the batch: %v (%s)\nalone: %v (%s)", i, got[i].GeneratedIDs, got[i].StopReason, alone[i].GeneratedIDs, alone[i].StopReason)
				}
			}
			// Shared passes: far fewer than the requests alone took together.
			t.Logf("%d passes together, %d alone", steps, soloSteps)
			if steps*2 > soloSteps {
				t.Errorf("%d forward passes for the concurrent requests, %d alone: the passes were not shared", steps, soloSteps)
			}
		})
	}
}

// TestCancelOneSequence: a request whose context ends leaves the batch with what it generated so far and the
// context's error; the others are untouched.
func TestCancelOneSequence(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 31})
	e := open(t, model, Options{})
	ctx := context.Background()
	long := Request{PromptIDs: []int{1, 5, 9}, MaxNewTokens: 30, StopIDs: []int{}}
	want, err := e.Generate(ctx, long, nil)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var other *Result
	var otherErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		other, otherErr = e.Generate(ctx, long, nil)
	}()
	res, err := e.Generate(cctx, Request{PromptIDs: []int{1, 7}, MaxNewTokens: 30, StopIDs: []int{}}, func(tok Token) error {
		if tok.Step == 4 {
			cancel()
		}
		return nil
	})
	wg.Wait()
	if !errors.Is(err, context.Canceled) || res == nil || res.StopReason != StopCancelled || len(res.GeneratedIDs) != 4 {
		t.Errorf("cancelled request: %v, %+v; want context.Canceled and the 4 tokens so far", err, res)
	}
	if otherErr != nil || !slices.Equal(other.GeneratedIDs, want.GeneratedIDs) {
		t.Errorf("the other request: %v %v, want %v", otherErr, other, want.GeneratedIDs)
	}
}

// TestQueueAndMaxBatch: with MaxBatch 2, a third request waits in the queue (Load reports it), joins when a
// sequence ends, and a queued request whose context ends leaves the queue at once.
func TestQueueAndMaxBatch(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 32})
	e := open(t, model, Options{MaxBatch: 2})
	ctx := context.Background()
	req := func(n int) Request { return Request{PromptIDs: []int{1, 3, n}, MaxNewTokens: 12, StopIDs: []int{}} }
	alone := map[int][]int{}
	for n := range 4 {
		r, err := e.Generate(ctx, req(n), nil)
		if err != nil {
			t.Fatal(err)
		}
		alone[n] = r.GeneratedIDs
	}
	started := make(chan struct{})
	release := make(chan struct{})
	peak := 0
	var mu sync.Mutex
	results := make([]*Result, 4)
	var wg sync.WaitGroup
	for n := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			results[n], err = e.Generate(ctx, req(n), func(tok Token) error {
				mu.Lock()
				peak = max(peak, e.Load().Active)
				mu.Unlock()
				if n == 0 && tok.Step == 1 {
					close(started)
					<-release // hold the loop while the queue is inspected
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
		if n == 0 {
			<-started
		}
	}
	// Request 3 queues behind the others; its context ends while it waits.
	qctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.Generate(qctx, req(3), nil)
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for e.Load().Queued < 3 && time.Now().Before(deadline) { // requests 1, 2 and 3 wait: the loop is held
		time.Sleep(time.Millisecond)
	}
	if q := e.Load().Queued; q != 3 {
		t.Errorf("%d requests queued, want 3", q)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("queued request cancelled: got %v", err)
	}
	close(release)
	wg.Wait()
	for n := range 3 {
		if !slices.Equal(results[n].GeneratedIDs, alone[n]) {
			t.Errorf("request %d: %v, alone %v", n, results[n].GeneratedIDs, alone[n])
		}
	}
	if peak > 2 {
		t.Errorf("%d sequences in the batch at once, MaxBatch 2", peak)
	}
}

// TestSessionReusesCache: a session's second request, whose prompt continues the first one's prompt and reply,
// computes only the new tokens and generates what the whole prompt gives without a session.
func TestSessionReusesCache(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 33})
	e := open(t, model, Options{})
	ctx := context.Background()
	s := e.NewSession()
	defer s.Close()
	first := Request{PromptIDs: []int{1, 5, 9, 11}, MaxNewTokens: 6, StopIDs: []int{}, Session: s}
	r1, err := e.Generate(ctx, first, nil)
	if err != nil {
		t.Fatal(err)
	}
	prompt := append(append(slices.Clone(first.PromptIDs), r1.GeneratedIDs...), 7, 8)
	second := Request{PromptIDs: prompt, MaxNewTokens: 6, StopIDs: []int{}, Session: s}
	r2, err := e.Generate(ctx, second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(first.PromptIDs) + len(r1.GeneratedIDs) - 1; r2.CachedPromptTokens != want {
		t.Errorf("%d prompt tokens reused, want %d", r2.CachedPromptTokens, want)
	}
	second.Session = nil
	fresh, err := e.Generate(ctx, second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r2.GeneratedIDs, fresh.GeneratedIDs) || fresh.CachedPromptTokens != 0 {
		t.Errorf("with the session: %v; computed afresh: %v (%d cached)", r2.GeneratedIDs, fresh.GeneratedIDs, fresh.CachedPromptTokens)
	}
	// A prompt that diverges early reuses only the common prefix; the same prompt again reuses all but its last.
	r3, err := e.Generate(ctx, Request{PromptIDs: []int{1, 5, 4}, MaxNewTokens: 2, StopIDs: []int{}, Session: s}, nil)
	if err != nil || r3.CachedPromptTokens != 2 {
		t.Errorf("diverging prompt: %v, %d cached, want 2", err, r3.CachedPromptTokens)
	}
	// One request at a time per session.
	hold := make(chan struct{})
	go e.Generate(ctx, Request{PromptIDs: []int{1}, MaxNewTokens: 3, StopIDs: []int{}, Session: s}, func(Token) error { <-hold; return nil })
	time.Sleep(20 * time.Millisecond)
	if _, err := e.Generate(ctx, Request{PromptIDs: []int{1}, MaxNewTokens: 1, Session: s}, nil); err == nil {
		t.Error("two requests of one session ran at once")
	}
	close(hold)
}

// TestLogprobs: the reported log-probabilities are the log-softmax of the model's logits (Engine.Logits), and
// the greedy token is the first of the top ones.
func TestLogprobs(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 34})
	e := open(t, model, Options{})
	ctx := context.Background()
	prompt := []int{1, 5, 9}
	var toks []Token
	res, err := e.Generate(ctx, Request{PromptIDs: prompt, MaxNewTokens: 3, StopIDs: []int{}, TopLogprobs: 4}, func(tok Token) error {
		toks = append(toks, tok)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	logits, err := e.Logits(ctx, append(slices.Clone(prompt), res.GeneratedIDs[:2]...))
	if err != nil {
		t.Fatal(err)
	}
	for i, tok := range toks {
		l := logits[len(prompt)-1+i]
		m := math.Inf(-1)
		for _, v := range l {
			m = max(m, float64(v))
		}
		sum := 0.0
		for _, v := range l {
			sum += math.Exp(float64(v) - m)
		}
		want := float64(l[tok.ID]) - m - math.Log(sum)
		if math.Abs(tok.Logprob-want) > 1e-4 {
			t.Errorf("step %d: logprob %g, want %g", tok.Step, tok.Logprob, want)
		}
		if len(tok.TopLogprobs) != 4 || tok.TopLogprobs[0].ID != tok.ID || tok.TopLogprobs[0].Logprob != tok.Logprob {
			t.Errorf("step %d: top logprobs %v, want 4 starting with the greedy token %d", tok.Step, tok.TopLogprobs, tok.ID)
		}
		for k := 1; k < len(tok.TopLogprobs); k++ {
			if tok.TopLogprobs[k].Logprob > tok.TopLogprobs[k-1].Logprob {
				t.Errorf("step %d: top logprobs out of order: %v", tok.Step, tok.TopLogprobs)
			}
		}
	}
	if _, err := e.Generate(ctx, Request{PromptIDs: prompt, TopLogprobs: MaxTopLogprobs + 1}, nil); err == nil {
		t.Error("TopLogprobs beyond the bound was accepted")
	}
}

// TestCloseEndsQueuedRequests: requests waiting when the engine closes end with ErrClosed; later ones are refused.
func TestCloseEndsQueuedRequests(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 35})
	e, err := Open(context.Background(), model, Options{MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	started, release := make(chan struct{}), make(chan struct{})
	go e.Generate(ctx, Request{PromptIDs: []int{1, 2}, MaxNewTokens: 5, StopIDs: []int{}}, func(tok Token) error {
		if tok.Step == 1 {
			close(started)
			<-release
		}
		return nil
	})
	<-started
	queued := make(chan error, 1)
	go func() {
		_, err := e.Generate(ctx, Request{PromptIDs: []int{1, 3}, MaxNewTokens: 5}, nil)
		queued <- err
	}()
	for e.Load().Queued == 0 {
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { e.Close(); close(closed) }()
	if err := <-queued; !errors.Is(err, ErrClosed) {
		t.Errorf("queued request: %v, want ErrClosed", err)
	}
	close(release)
	<-closed
	if _, err := e.Generate(ctx, Request{PromptIDs: []int{1}}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	if _, err := e.Logits(ctx, []int{1}); !errors.Is(err, ErrClosed) {
		t.Errorf("Logits after Close: %v, want ErrClosed", err)
	}
	if _, err := e.CacheFootprint(1); !errors.Is(err, ErrClosed) {
		t.Errorf("CacheFootprint after Close: %v, want ErrClosed", err)
	}
}

// TestPrefillBudget: long prompts joining a running sequence are computed in chunks of at most PrefillBudget
// tokens between them, one pass per step, while the running sequence decodes a token at every step; every result
// (ids and log-probabilities, to the last bit) is that of the request alone, on the host kernels and on the
// graphs. The second prompt gets what the first leaves of the budget, which is not a multiple of 64: it waits.
func TestPrefillBudget(t *testing.T) {
	shape := tinyShape(true)
	shape.MaxPositionEmbeddings = 512
	model := writeTiny(t, synth.Options{Shape: shape, Seed: 33})
	ctx := context.Background()
	prompt := func(n, seed int) Request {
		r := Request{MaxNewTokens: 6, StopIDs: []int{}, Logprobs: true}
		for i := range n {
			r.PromptIDs = append(r.PromptIDs, 1+(i*7+seed)%60)
		}
		return r
	}
	reqs := []Request{{PromptIDs: []int{1, 5, 9}, MaxNewTokens: 40, StopIDs: []int{}, Logprobs: true}, prompt(150, 0), prompt(90, 3)}
	for _, c := range []struct {
		name string
		opts Options
		// tokens the running sequence decodes while the prompts join: one per pass, the passes bringing the
		// chunks 64, 64, 22 (the second prompt waits: the 42 tokens left would not end at a multiple of 64), 64
		// and 26; without a budget, one pass
		during int
		gguf   string // a file of ../gguf/testdata/tiny to run instead of the synthetic model
	}{
		{"host", Options{PrefillBudget: 64}, 5, ""},
		{"graphs", Options{PrefillBudget: 64, GraphDecode: true}, 5, ""},
		{"no budget", Options{PrefillBudget: -1}, 1, ""},
		// Q4_K products: the chunks of 22 and 26 take the tiled kernels as the 64s do (sequence.tiledPrompt), so
		// the chunked prompts give one pass's bits.
		{"host Q4_K", Options{PrefillBudget: 64}, 5, "tiny-llama-Q4_K.gguf"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := model
			if c.gguf != "" {
				if !kernels.PromptTiled() {
					t.Log("this CPU has no AVX-512 VNNI: the prompts take LinearQuant, so this checks no tiling")
				}
				m = filepath.Join("..", "gguf", "testdata", "tiny", c.gguf)
				c.opts.ShardDir = filepath.Join(t.TempDir(), "shards")
			}
			e := open(t, m, c.opts)
			var alone [3][]Token
			for i, r := range reqs {
				if _, err := e.Generate(ctx, r, func(tok Token) error { alone[i] = append(alone[i], tok); return nil }); err != nil {
					t.Fatal(err)
				}
			}
			var got [3][]Token
			var wg sync.WaitGroup
			during := -1 // the running sequence's tokens from the prompts' joining to the last one's first token
			_, err := e.Generate(ctx, reqs[0], func(tok Token) error {
				got[0] = append(got[0], tok)
				if tok.Step != 1 {
					return nil
				}
				for i := 1; i <= 2; i++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for deadline := time.Now().Add(10 * time.Second); e.Load().Queued != i-1 && time.Now().Before(deadline); {
							time.Sleep(time.Millisecond) // in order
						}
						_, err := e.Generate(ctx, reqs[i], func(tok Token) error {
							if tok.Step == 1 && i == 2 {
								during = len(got[0]) - 1
							}
							got[i] = append(got[i], tok)
							return nil
						})
						if err != nil {
							t.Error(err)
						}
					}()
				}
				for deadline := time.Now().Add(10 * time.Second); e.Load().Queued != 2 && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond) // both prompts join at the next step
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			for i := range reqs {
				if !reflect.DeepEqual(got[i], alone[i]) {
					t.Errorf("request %d: %v\nalone: %v", i, got[i], alone[i])
				}
			}
			if during != c.during {
				t.Errorf("the running sequence decoded %d tokens while the prompts joined, want %d", during, c.during)
			}
		})
	}
	if _, err := Open(ctx, model, Options{PrefillBudget: 16}); err == nil || !strings.Contains(err.Error(), "prefill budget must be at least 64") {
		t.Errorf("a budget of 16: got %v", err)
	}
}

// TestLogitsBetweenSteps: Logits called while a generation runs returns between two of its steps (it used to
// wait for the batch loop to go idle), with the logits of an idle engine, and the generation goes on to its
// solo result (the loop's stream is stopped for Logits' pass and started again).
func TestLogitsBetweenSteps(t *testing.T) {
	e := open(t, writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 34}), Options{})
	ctx := context.Background()
	ids := []int{1, 4, 9, 16, 25}
	want, err := e.Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{PromptIDs: []int{1, 2, 3}, MaxNewTokens: 40, StopIDs: []int{}}
	alone, err := e.Generate(ctx, req, nil)
	if err != nil {
		t.Fatal(err)
	}
	var tokens atomic.Int64
	called := make(chan struct{})
	type out struct {
		logits [][]float32
		err    error
		tokens int64 // the generation's, when Logits returned
	}
	done := make(chan out, 1)
	res, err := e.Generate(ctx, req, func(tok Token) error {
		tokens.Add(1)
		if tok.Step == 3 {
			go func() {
				close(called)
				l, err := e.Logits(ctx, ids)
				done <- out{l, err, tokens.Load()}
			}()
			<-called
			for deadline := time.Now().Add(10 * time.Second); e.passes.waiting.Load() == 0 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond) // Logits waits for the step to end
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	if o.tokens >= int64(req.MaxNewTokens) {
		t.Errorf("Logits returned after the generation's %d tokens: it waited for the batch loop to go idle", o.tokens)
	}
	if d := maxDiff(o.logits, want); d != 0 {
		t.Errorf("logits between steps differ from an idle engine's by %g", d)
	}
	if !slices.Equal(res.GeneratedIDs, alone.GeneratedIDs) {
		t.Errorf("generation around Logits: %v, alone %v", res.GeneratedIDs, alone.GeneratedIDs)
	}
}

// TestPrefixCache: under Options.PrefixCache a request whose prompt starts with what a finished request's row
// holds computes only the rest, with the result of computing it all (a float model with full attention: the same
// bits); a prompt sharing nothing reuses nothing; without the option nothing is reused.
func TestPrefixCache(t *testing.T) {
	ctx := context.Background()
	model := filepath.Join("..", "gguf", "testdata", "tiny", "tiny-llama-F32.gguf")
	system := []int{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 300, 301, 302, 303}
	first := Request{PromptIDs: append(slices.Clone(system), 17, 18), MaxNewTokens: 6, StopIDs: []int{}}
	second := Request{PromptIDs: append(slices.Clone(system), 40, 41, 42), MaxNewTokens: 6, StopIDs: []int{}}
	plain := open(t, model, Options{ShardDir: filepath.Join(t.TempDir(), "s")})
	want, err := plain.Generate(ctx, second, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := open(t, model, Options{ShardDir: filepath.Join(t.TempDir(), "s"), PrefixCache: true})
	if _, err := e.Generate(ctx, first, nil); err != nil {
		t.Fatal(err)
	}
	got, err := e.Generate(ctx, second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.CachedPromptTokens != len(system) || !slices.Equal(got.GeneratedIDs, want.GeneratedIDs) {
		t.Errorf("second request: %d prompt tokens reused (want %d), %v (computed whole: %v)", got.CachedPromptTokens, len(system), got.GeneratedIDs, want.GeneratedIDs)
	}
	other, err := e.Generate(ctx, Request{PromptIDs: []int{1, 9, 9, 9}, MaxNewTokens: 2, StopIDs: []int{}}, nil)
	if err != nil || other.CachedPromptTokens != 1 { // only the BOS id is shared
		t.Errorf("an unrelated prompt: %d reused (%v), want 1 (BOS)", other.CachedPromptTokens, err)
	}
	if res, err := plain.Generate(ctx, second, nil); err != nil || res.CachedPromptTokens != 0 {
		t.Errorf("without PrefixCache: %d reused (%v)", res.CachedPromptTokens, err)
	}
}
