package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/queue"
)

func init() {
	register(command{
		name:    "worker",
		summary: "generate the prompts of a NATS JetStream work queue (see 'submit' and docs/scale-out.md)",
		usage:   "--queue nats://HOST:PORT --model MODEL",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			var o workerOptions
			addQueueFlags(fs, &o.url, &o.q)
			fs.StringVar(&o.model, "model", "", modelFlagHelp)
			fs.IntVar(&o.batchSize, "batch-size", 16, "most prompts generated together (a prompt is pulled as soon as another ends)")
			fs.DurationVar(&o.q.AckWait, "ack-wait", queue.DefaultAckWait, "how long the queue waits for a prompt's acknowledgement or heartbeat (sent every third of it) before delivering it to another worker (the consumer's, set by the last worker started)")
			fs.DurationVar(&o.grace, "shutdown-timeout", time.Minute, "on SIGTERM or Ctrl-C: how long the prompts held may take to finish before they go back to the queue")
			fs.StringVar(&o.listen, "listen", "127.0.0.1:9464", "`address` of /health and /metrics (\"\" for none; 0.0.0.0:9464 for a Kubernetes probe)")
			addEngineFlags(fs, &o.eng)
			return func(ctx context.Context, args []string) error {
				if len(args) != 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				switch {
				case o.url == "":
					return usageErrorf("--queue is required")
				case o.model == "":
					return usageErrorf("--model is required")
				case o.batchSize < 1:
					return usageErrorf("--batch-size must be at least 1, got %d", o.batchSize)
				case o.q.AckWait < time.Second:
					return usageErrorf("--ack-wait must be at least 1s, got %v", o.q.AckWait)
				case o.grace < 0:
					return usageErrorf("--shutdown-timeout must be at least 0, got %v", o.grace)
				}
				return runWorker(ctx, o)
			}
		},
	})
}

// workerOptions are worker's flags.
type workerOptions struct {
	url, model, listen string
	batchSize          int
	grace              time.Duration
	q                  queue.Config
	eng                engine.Options
}

// runWorker serves /health and /metrics, opens the model, and generates the queue's prompts until ctx ends
// (then finishes or gives back what it holds: queue.Worker.Run).
func runWorker(ctx context.Context, o workerOptions) error {
	m := &queue.Metrics{}
	if o.listen != "" {
		ln, err := net.Listen("tcp", o.listen)
		if err != nil {
			return fmt.Errorf("--listen: %w", err)
		}
		srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				slog.Error("worker: /health and /metrics", "err", err)
			}
		}()
		defer srv.Close()
		slog.Info("worker: /health and /metrics", "url", "http://"+ln.Addr().String())
	}
	o.eng.MaxBatch = o.batchSize
	e, err := openEngine(ctx, o.model, o.eng, "")
	if err != nil {
		return err
	}
	defer e.Close()
	host, _ := os.Hostname()
	nc, js, err := queue.Connect(o.url, "layerstream worker "+host)
	if err != nil {
		return err
	}
	defer nc.Close()
	w := &queue.Worker{JS: js, Config: o.q, Engine: e, BatchSize: o.batchSize, Grace: o.grace, Metrics: m}
	return w.Run(ctx)
}
