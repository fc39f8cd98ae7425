package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/layerstream/layerstream/batchfile"
	"github.com/layerstream/layerstream/engine"
)

// batchResultJSON is the output object of one line (batchfile.Result).
type batchResultJSON = batchfile.Result

// runBatch is generate --batch-file: every line becomes a request, and the requests go through the engine's
// batch loop, --batch-size at a time: a line joins as soon as another ends (continuous batching), and one JSON
// object per line is written to stdout in input order, each as soon as it and the lines before it are done.
// Aggregate timings go to stderr. Each line has its own guard monitor (strict with --strict): a line whose
// sequence a problem ended (NaN logits always) says so in its "error" and the others go on; the exit status is
// then 1. After Ctrl-C, the lines printed are those up to the first that had generated nothing.
func runBatch(ctx context.Context, o generateOptions, stdout, stderr io.Writer) error {
	lines, err := batchfile.Read(o.batchFile)
	if err != nil {
		return err
	}
	o.eng.MaxBatch = o.batchSize
	e, err := openEngine(ctx, o.model, o.eng, "")
	if err != nil {
		return err
	}
	defer e.Close()
	tok, tokErr := e.Tokenizer() // nil without tokenizer files: then only "ids" lines work

	reqs := make([]engine.Request, len(lines))
	watch := make([]*batchfile.Watcher, len(lines))
	run := batchfile.Settings{MaxNewTokens: o.maxNew, Sampling: samplingFor(o, e), Chat: o.chat}
	for i, l := range lines {
		where := fmt.Sprintf("--batch-file %s line %d", o.batchFile, l.Number)
		r, err := l.Request(run, tok, tokErr)
		if err == nil {
			err = e.CheckRequest(r)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		r.Monitor = batchfile.NewMonitor(o.strict, l.Number)
		reqs[i] = r
		watch[i] = batchfile.Watch(&reqs[i], tok) // the guards see each line's token text as it comes
	}
	onToken := func(i int, t engine.Token) error { return watch[i].OnToken(t) }
	enc := json.NewEncoder(stdout)
	start, passes := time.Now(), e.Load().Steps
	var generated, printed int
	var failed []int // lines a problem ended
	var ttfts []float64
	err = e.GenerateEach(ctx, reqs, onToken, func(i int, res *engine.Result, err error) error {
		if ctx.Err() != nil && len(res.GeneratedIDs) == 0 {
			return ctx.Err() // interrupted: the lines printed stay a prefix of the file
		}
		generated += len(res.GeneratedIDs)
		if res.Timings.TTFT > 0 {
			ttfts = append(ttfts, res.Timings.TTFT.Seconds())
		}
		out := watch[i].Result(res, err)
		if out.StopReason == engine.StopError {
			failed = append(failed, lines[i].Number)
		}
		printed++
		return enc.Encode(out)
	})
	if ctx.Err() != nil {
		return fmt.Errorf("--batch-file %s: interrupted; the first %d of %d lines are printed: %w", o.batchFile, printed, len(reqs), ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("--batch-file %s: %w", o.batchFile, err)
	}
	d := time.Since(start)
	fmt.Fprintf(stderr, "%d sequences, %d tokens generated in %.2f s: %.1f tokens/s aggregate (--batch-size %d, %d forward passes); first token after %s s (median, max)\n",
		len(reqs), generated, d.Seconds(), float64(generated)/d.Seconds(), o.batchSize, e.Load().Steps-passes, medianMax(ttfts))
	if len(failed) > 0 {
		return fmt.Errorf("--batch-file %s: %d of %d lines ended with an error (their \"error\" says why), the first at line %d",
			o.batchFile, len(failed), len(reqs), failed[0])
	}
	return nil
}

// medianMax formats the median and the largest of xs ("-" when empty).
func medianMax(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	slices.Sort(xs)
	return fmt.Sprintf("%.2f, %.2f", xs[len(xs)/2], xs[len(xs)-1])
}
