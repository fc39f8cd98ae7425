package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/layerstream/layerstream/batchfile"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/progress"
)

// SubmitOptions configure Submit.
type SubmitOptions struct {
	JS     jetstream.JetStream
	Config Config
	// BatchFile is the JSONL file of prompts (batchfile format); Out the results file written.
	BatchFile, Out string
	// Resume continues an Out that an interrupted Submit of the same file and settings left.
	Resume bool
	// Settings are the job's defaults for its lines. Settings.Seed is replaced by the batch file's ContentSeed
	// unless SeedGiven.
	Settings  Settings
	SeedGiven bool
	// Progress receives a progress bar (nil: none).
	Progress io.Writer
}

// Summary is what a Submit did.
type Summary struct {
	Job   string // the job's id (JobID): the results' subjects are <stream>.result.<job>.<line>
	Lines int
	// Resumed lines were already in Out; Answered lines already had a result in the results stream, and were
	// not published; Published prompts were stored in the prompt stream, Queued ones were there already (the
	// duplicate window dropped them).
	Resumed, Answered, Published, Queued int
	// Dropped counts results received twice (a prompt generated again after its worker died), dropped by id.
	Dropped int
	// Failed counts the lines written by this run whose result has stop_reason "error".
	Failed int
}

// Submit publishes every line of the batch file not answered yet as a prompt message, then writes one result
// per line to Out, in input order, as the results arrive (each written line synced to disk), until every line
// has one or ctx ends; the results file then holds the lines answered so far, in order, and a Submit with
// Resume continues it.
func Submit(ctx context.Context, o SubmitOptions) (*Summary, error) {
	c, err := o.Config.withDefaults()
	if err != nil {
		return nil, err
	}
	content, err := os.ReadFile(o.BatchFile)
	if err != nil {
		return nil, fmt.Errorf("--batch-file: %w", err)
	}
	lines, err := batchfile.Parse(content, o.BatchFile)
	if err != nil {
		return nil, err
	}
	s := o.Settings
	if !o.SeedGiven {
		s.Seed = ContentSeed(content)
	}
	job := JobID(content, s)
	ids := make([]string, len(lines))
	index := make(map[string]int, len(lines))
	for i, l := range lines {
		ids[i] = lineID(job, l.Number)
		index[ids[i]] = i
	}
	out, err := openOutput(o.Out, ids, o.Resume)
	if err != nil {
		return nil, err
	}
	defer out.close()
	sum := &Summary{Job: job, Lines: len(lines), Resumed: out.n}
	slog.Info("submit", "job", job, "lines", len(lines), "in_out_already", out.n, "stream", c.Stream)
	if out.n == len(lines) {
		return sum, nil
	}
	if err := ensureStreams(ctx, o.JS, c); err != nil {
		return nil, err
	}
	results, stop, err := subscribeResults(ctx, o.JS, c, job)
	if err != nil {
		return nil, err
	}
	defer stop()
	answered, err := answeredLines(ctx, o.JS, c, job)
	if err != nil {
		return nil, err
	}
	var prompts []*nats.Msg
	raw := bytes.Split(content, []byte("\n")) // raw[n-1] is line n as batchfile.Parse numbers them
	for i := out.n; i < len(lines); i++ {
		if answered[c.resultSubject(ids[i])] {
			sum.Answered++
			continue
		}
		line := json.RawMessage(bytes.TrimSpace(raw[lines[i].Number-1]))
		body, err := json.Marshal(Prompt{ID: ids[i], Line: lines[i].Number, Request: line, Settings: s})
		if err != nil {
			return nil, err
		}
		m := &nats.Msg{Subject: c.promptSubject(ids[i]), Data: body, Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, ids[i])
		prompts = append(prompts, m)
	}
	if sum.Published, sum.Queued, err = publishAll(ctx, o.JS, prompts); err != nil {
		return sum, err
	}
	return sum, collect(ctx, out, results, index, sum, progress.NewCount(o.Progress, "results", "lines"))
}

// collect writes the results in input order as they arrive, until every line has one or ctx ends.
func collect(ctx context.Context, out *output, results <-chan *batchfile.Result, index map[string]int, sum *Summary, bar *progress.Bar) error {
	defer bar.Finish()
	pending := map[int]*batchfile.Result{}
	bar.Update(int64(out.n), int64(sum.Lines))
	for out.n < sum.Lines {
		select {
		case r := <-results:
			i, ok := index[r.ID]
			if ok && i < sum.Resumed {
				continue // in Out already when this run began
			}
			if !ok || i < out.n || pending[i] != nil {
				sum.Dropped++
				continue
			}
			pending[i] = r
			wrote := false
			for pending[out.n] != nil {
				if pending[out.n].StopReason == engine.StopError {
					sum.Failed++
				}
				if err := out.write(pending[out.n]); err != nil {
					return err
				}
				delete(pending, out.n-1)
				wrote = true
			}
			if wrote {
				if err := out.sync(); err != nil {
					return err
				}
				bar.Update(int64(out.n), int64(sum.Lines))
			}
		case <-ctx.Done():
			return fmt.Errorf("submit: interrupted with %d of %d lines in %s (%d more results received out of order; --resume continues): %w",
				out.n, sum.Lines, out.path, len(pending), ctx.Err())
		}
	}
	return nil
}

// subscribeResults delivers every result of job in the results stream, those already there first, then the
// others as they are stored, until stop is called; an ordered consumer, which survives the server restarting.
func subscribeResults(ctx context.Context, js jetstream.JetStream, c Config, job string) (<-chan *batchfile.Result, func(), error) {
	var cons jetstream.Consumer
	err := retry(ctx, func(ctx context.Context) error {
		var err error
		cons, err = js.OrderedConsumer(ctx, c.ResultsStream(), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{c.Stream + ".result." + job + ".>"}})
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("submit: results of job %s: %w", job, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, nil, fmt.Errorf("submit: results of job %s: %w", job, err)
	}
	ch := make(chan *batchfile.Result)
	go func() {
		for {
			msg, err := it.Next()
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return
			}
			if err != nil {
				slog.Debug("submit: reading results", "err", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			var r batchfile.Result
			if err := json.Unmarshal(msg.Data(), &r); err != nil {
				slog.Warn("submit: a result that is not JSON", "subject", msg.Subject(), "err", err)
				continue
			}
			select {
			case ch <- &r:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, it.Stop, nil
}

// answeredLines returns the subjects of the results stream holding a result of job.
func answeredLines(ctx context.Context, js jetstream.JetStream, c Config, job string) (map[string]bool, error) {
	var info *jetstream.StreamInfo
	err := retry(ctx, func(ctx context.Context) error {
		st, err := js.Stream(ctx, c.ResultsStream())
		if err == nil {
			info, err = st.Info(ctx, jetstream.WithSubjectFilter(c.Stream+".result."+job+".>"))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("submit: results of job %s: %w", job, err)
	}
	answered := make(map[string]bool, len(info.State.Subjects))
	for s := range info.State.Subjects {
		answered[s] = true
	}
	return answered, nil
}

// publishAll publishes the prompt messages, asynchronously, again and again until JetStream acknowledged each
// (a disconnection or the server restarting fails some of a round) or ctx ends; queued counts those JetStream
// already held (dropped as duplicates by their ids).
func publishAll(ctx context.Context, js jetstream.JetStream, msgs []*nats.Msg) (published, queued int, err error) {
	for wait := 100 * time.Millisecond; len(msgs) > 0; wait = min(2*wait, 2*time.Second) {
		futures := make([]jetstream.PubAckFuture, 0, len(msgs))
		var failed []*nats.Msg
		for _, m := range msgs {
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				failed = append(failed, m)
				continue
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case ack := <-f.Ok():
				if ack.Duplicate {
					queued++
				} else {
					published++
				}
			case err := <-f.Err():
				slog.Debug("submit: publish failed; again", "subject", f.Msg().Subject, "err", err)
				failed = append(failed, f.Msg())
			case <-ctx.Done():
				return published, queued, fmt.Errorf("submit: interrupted while publishing: %w", ctx.Err())
			}
		}
		if msgs = failed; len(msgs) > 0 {
			slog.Warn("submit: some prompts were not stored; publishing them again", "count", len(msgs), "after", wait)
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return published, queued, fmt.Errorf("submit: interrupted while publishing: %w", ctx.Err())
			}
		}
	}
	return published, queued, nil
}
