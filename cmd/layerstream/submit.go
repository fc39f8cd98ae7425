package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/layerstream/layerstream/queue"
)

func init() {
	register(command{
		name:    "submit",
		summary: "publish a --batch-file to a NATS JetStream work queue and write its results in input order",
		usage:   "--queue nats://HOST:PORT --batch-file PROMPTS.jsonl --out RESULTS.jsonl",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			var o submitOptions
			addQueueFlags(fs, &o.url, &o.q)
			fs.StringVar(&o.batchFile, "batch-file", "", "JSONL `file` of prompts, as generate --batch-file reads it")
			fs.StringVar(&o.out, "out", "", "results `file`: one JSON object per line of the batch file, in input order, as generate --batch-file prints them, with the line's \"id\"")
			fs.BoolVar(&o.resume, "resume", false, "continue an --out that an interrupted submit of the same file and settings left")
			fs.DurationVar(&o.q.ResultsMaxAge, "results-max-age", queue.DefaultResultsMaxAge, "how long the results stream keeps results (when submit makes it)")
			fs.IntVar(&o.gen.maxNew, "max-new-tokens", 256, "most tokens to generate per line, unless the line says")
			addSamplingFlags(fs, &o.gen)
			fs.BoolVar(&o.gen.chat, "chat", false, "wrap text prompts in the model's chat template as a user message")
			fs.BoolVar(&o.gen.strict, "strict", false, "end a line with an error when its guards detect broken output")
			return func(ctx context.Context, args []string) error {
				if len(args) != 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				switch {
				case o.url == "":
					return usageErrorf("--queue is required")
				case o.batchFile == "" || o.out == "":
					return usageErrorf("--batch-file and --out are required")
				case o.gen.maxNew < 0:
					return usageErrorf("--max-new-tokens must be at least 0, got %d", o.gen.maxNew)
				}
				return runSubmit(ctx, o)
			}
		},
	})
}

// submitOptions are submit's flags; gen holds the generate flags a job's settings come from.
type submitOptions struct {
	url, batchFile, out string
	resume              bool
	q                   queue.Config
	gen                 generateOptions
}

// settings are the job's settings from the flags (unset sampling flags: the model's generation_config.json, on
// the worker).
func (o *submitOptions) settings() queue.Settings {
	g := &o.gen
	s := queue.Settings{MaxNewTokens: g.maxNew, Seed: g.seed.v, Chat: g.chat, Strict: g.strict}
	if g.temperature >= 0 {
		s.Temperature = &g.temperature
	}
	if g.topK >= 0 {
		s.TopK = &g.topK
	}
	if g.topP >= 0 {
		s.TopP = &g.topP
	}
	if g.repetitionPenalty >= 0 {
		s.RepetitionPenalty = &g.repetitionPenalty
	}
	return s
}

// runSubmit publishes the batch file's lines and writes their results (queue.Submit); as generate --batch-file,
// it fails (exit status 1) when a line ended with an error.
func runSubmit(ctx context.Context, o submitOptions) error {
	nc, js, err := queue.Connect(o.url, "layerstream submit")
	if err != nil {
		return err
	}
	defer nc.Close()
	start := time.Now()
	sum, err := queue.Submit(ctx, queue.SubmitOptions{JS: js, Config: o.q, BatchFile: o.batchFile, Out: o.out, Resume: o.resume,
		Settings: o.settings(), SeedGiven: o.gen.seed.set, Progress: progressOut()})
	if sum != nil {
		fmt.Fprintf(errOut, "submit: job %s: %d lines (%d already in %s, %d already answered, %d published, %d already queued), %d duplicate results dropped, in %.1f s\n",
			sum.Job, sum.Lines, sum.Resumed, o.out, sum.Answered, sum.Published, sum.Queued, sum.Dropped, time.Since(start).Seconds())
	}
	if err == nil && sum.Failed > 0 {
		err = fmt.Errorf("--batch-file %s: %d of %d lines ended with an error (their \"error\" in %s says why)", o.batchFile, sum.Failed, sum.Lines, o.out)
	}
	return err
}

// addQueueFlags defines the flags worker and submit share: the NATS server and the streams they make.
func addQueueFlags(fs *flag.FlagSet, url *string, q *queue.Config) {
	fs.StringVar(url, "queue", "", "NATS server `url` (nats://HOST:PORT; several, comma-separated, for a cluster) with JetStream enabled")
	fs.StringVar(&q.Stream, "stream", queue.DefaultStream, "the prompt stream's `name` (the results stream is NAME_RESULTS); made when absent, with file storage")
	fs.IntVar(&q.Replicas, "replicas", 1, "how many servers of a NATS cluster hold each stream, when this command makes them (3 in a cluster of 3: a server lost loses nothing)")
}
