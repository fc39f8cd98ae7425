package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/layerstream/layerstream/batchfile"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/tokenizer"
)

// Worker generates the prompts of a queue: Run pulls them from the prompt stream, up to BatchSize at once
// through the engine's batch loop, and publishes their results.
type Worker struct {
	JS     jetstream.JetStream
	Config Config
	// Engine generates; its Options.MaxBatch should be at least BatchSize.
	Engine *engine.Engine
	// BatchSize is the most prompts held (generating, or publishing their results) at once (at least 1).
	BatchSize int
	// Grace is how long prompts held when ctx ends may take to finish; those still unfinished then are
	// negatively acknowledged, so JetStream delivers them again at once (to another worker).
	Grace time.Duration
	// Metrics counts what the worker does (nil: not counted).
	Metrics *Metrics
	// PollWait bounds each pull request while the queue is empty (default 1 s).
	PollWait time.Duration
}

// Run serves the queue until ctx ends, then stops pulling, lets the prompts it holds finish within Grace, naks
// those that did not, and returns nil. It returns an error only when the streams or the consumer cannot be made.
func (w *Worker) Run(ctx context.Context) error {
	c, err := w.Config.withDefaults()
	if err != nil {
		return err
	}
	w.Config = c
	if w.Metrics == nil {
		w.Metrics = &Metrics{}
	}
	if w.BatchSize < 1 {
		return fmt.Errorf("queue: batch size must be at least 1, got %d", w.BatchSize)
	}
	if err := ensureStreams(ctx, w.JS, c); err != nil {
		return err
	}
	cons, err := ensureConsumer(ctx, w.JS, c)
	if err != nil {
		return err
	}
	tok, tokErr := w.Engine.Tokenizer()
	g := generator{w: w, tok: tok, tokErr: tokErr}
	// Generations run under hard, which outlives ctx by the grace period.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	var held sync.WaitGroup
	slots := make(chan struct{}, w.BatchSize)
	w.Metrics.serving.Store(true)
	slog.Info("worker: serving the queue", "stream", c.Stream, "batch_size", w.BatchSize, "ack_wait", c.AckWait)
	for ctx.Err() == nil {
		n := acquire(ctx, slots)
		if n == 0 {
			break
		}
		got := w.pull(ctx, cons, n, func(msg jetstream.Msg) {
			held.Go(func() {
				defer func() { <-slots }()
				g.handle(hard, msg)
			})
		})
		for range n - got {
			<-slots
		}
	}
	w.Metrics.draining.Store(true)
	w.drain(&held, cancelHard)
	return nil
}

// acquire waits for one free slot, takes every other free one, and returns how many it took (0: ctx ended).
func acquire(ctx context.Context, slots chan struct{}) int {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < cap(slots) {
		select {
		case slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

// pull fetches up to n prompts and hands each to start, returning how many it started. The pull request runs
// its course (at most PollWait) even when ctx ends meanwhile: abandoned, it would leave the server delivering
// prompts to no one until their ack wait ran out; a prompt that arrives after ctx ended is naked instead
// (delivered again at once, elsewhere). Errors (a disconnection, the server restarting) are logged and waited
// out briefly: the next pull tries again.
func (w *Worker) pull(ctx context.Context, cons jetstream.Consumer, n int, start func(jetstream.Msg)) int {
	wait := w.PollWait
	if wait <= 0 {
		wait = time.Second
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	batch, err := cons.Fetch(n, jetstream.FetchContext(fctx))
	if err == nil {
		started := 0
		for msg := range batch.Messages() {
			if ctx.Err() != nil {
				nak(msg)
				continue
			}
			start(msg)
			started++
		}
		err = batch.Error()
		if started > 0 || err == nil || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return started
		}
	}
	if ctx.Err() == nil {
		slog.Warn("worker: pulling prompts", "err", err)
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return 0
}

// drain waits for the prompts held to finish, at most Grace; then cancels those still generating (each is
// naked when its generation returns) and waits for them.
func (w *Worker) drain(held *sync.WaitGroup, cancel context.CancelFunc) {
	done := make(chan struct{})
	go func() { held.Wait(); close(done) }()
	slog.Info("worker: stopping: no more pulls; finishing the prompts held", "in_flight", w.Metrics.inFlight.Load(), "grace", w.Grace)
	select {
	case <-done:
	case <-time.After(w.Grace):
		slog.Warn("worker: grace period over: the prompts still generating go back to the queue", "in_flight", w.Metrics.inFlight.Load())
		cancel()
		<-done
	}
	slog.Info("worker: stopped")
}

// nak negatively acknowledges msg, logging a failure (the prompt is then delivered again after AckWait).
func nak(msg jetstream.Msg) {
	if err := msg.Nak(); err != nil {
		slog.Warn("worker: nak failed; the prompt comes back after the ack wait", "subject", msg.Subject(), "err", err)
	}
}

// generator generates the prompts of one worker.
type generator struct {
	w      *Worker
	tok    *tokenizer.Tokenizer
	tokErr error
}

// handle generates one prompt message and publishes its result, then acknowledges the message; it naks it when
// ctx ends first. Heartbeats (in-progress acknowledgements) keep JetStream from delivering it elsewhere while
// it generates.
func (g *generator) handle(ctx context.Context, msg jetstream.Msg) {
	m := g.w.Metrics
	m.inFlight.Add(1)
	defer m.inFlight.Add(-1)
	if meta, err := msg.Metadata(); err == nil && meta.NumDelivered > 1 {
		m.redeliveries.Add(1)
	}
	p, err := decodePrompt(msg.Data())
	if err != nil {
		m.failures.Add(1)
		slog.Error("worker: dropping a message that is not a prompt", "subject", msg.Subject(), "err", err)
		msg.TermWithReason(err.Error())
		return
	}
	stop := heartbeat(msg, g.w.Config.AckWait/3)
	res, ok := g.generate(ctx, p)
	stop()
	if !ok {
		m.naks.Add(1)
		nak(msg)
		return
	}
	if err := g.publish(ctx, p, res); err != nil {
		m.naks.Add(1)
		slog.Warn("worker: result not stored; the prompt goes back to the queue", "id", p.ID, "err", err)
		nak(msg)
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*publishAttemptTimeout)
	defer cancel()
	if err := retry(actx, func(ctx context.Context) error {
		if err := msg.DoubleAck(ctx); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return err
		}
		return nil
	}); err != nil {
		// The result is stored: the prompt comes back after AckWait, and its second result is dropped by id.
		slog.Warn("worker: ack failed after the result was stored", "id", p.ID, "err", err)
	}
	m.done.Add(1)
	if res.StopReason == engine.StopError {
		m.failures.Add(1)
	}
}

// heartbeat sends msg's in-progress acknowledgement every interval until the returned function is called.
func heartbeat(msg jetstream.Msg, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(interval, 10*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := msg.InProgress(); err != nil {
					slog.Debug("worker: heartbeat failed", "subject", msg.Subject(), "err", err)
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// generate generates prompt p as generate --batch-file generates its line; ok is false when ctx ended it (the
// prompt is then to be generated again elsewhere). A line the engine refuses gets a result that says why.
func (g *generator) generate(ctx context.Context, p Prompt) (res batchfile.Result, ok bool) {
	e := g.w.Engine
	l, err := batchfile.ParseLine(p.Request, p.Line)
	var req engine.Request
	if err == nil {
		req, err = l.Request(p.Settings.run(e), g.tok, g.tokErr)
	}
	if err == nil {
		err = e.CheckRequest(req)
	}
	if err != nil {
		res = batchfile.Refused(req, fmt.Errorf("line %d: %w", p.Line, err))
		res.ID = p.ID
		return res, true
	}
	req.Monitor = batchfile.NewMonitor(p.Settings.Strict, p.Line)
	watch := batchfile.Watch(&req, g.tok)
	out, err := e.Generate(ctx, req, watch.OnToken)
	if ctx.Err() != nil || out == nil && errors.Is(err, engine.ErrClosed) {
		return res, false
	}
	if out == nil {
		res = batchfile.Refused(req, err)
	} else {
		res = watch.Result(out, err)
	}
	res.ID = p.ID
	return res, true
}

// publish stores p's result in the results stream under p's id, retrying (a disconnection, the server
// restarting) until JetStream acknowledged it or ctx ended. A result JetStream already holds (a prompt delivered
// again after its first result was stored) is dropped by JetStream as a duplicate and counted.
func (g *generator) publish(ctx context.Context, p Prompt, res batchfile.Result) error {
	body, err := json.Marshal(res)
	if err != nil {
		return err
	}
	c := g.w.Config
	return retry(ctx, func(ctx context.Context) error {
		msg := &nats.Msg{Subject: c.resultSubject(p.ID), Data: body}
		ack, err := g.w.JS.PublishMsg(ctx, msg, jetstream.WithMsgID(p.ID), jetstream.WithExpectStream(c.ResultsStream()))
		if err == nil && ack.Duplicate {
			g.w.Metrics.duplicates.Add(1)
		}
		return err
	})
}
