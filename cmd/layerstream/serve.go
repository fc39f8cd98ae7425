package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/hub"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/profiler"
	"github.com/layerstream/layerstream/server"
)

func init() {
	register(command{
		name:    "serve",
		summary: "serve the model over OpenAI's, Ollama's and Anthropic's HTTP APIs, with a chat page; concurrent requests share each layer pass",
		usage:   "--model MODEL",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			var o serveOptions
			fs.StringVar(&o.model, "model", "", modelFlagHelp)
			fs.StringVar(&o.name, "model-name", "", "the model's id in the API (default: the --model argument, or its folder's name)")
			fs.StringVar(&o.host, "host", "127.0.0.1", "address to listen on; any other than a loopback address needs --api-key")
			fs.IntVar(&o.port, "port", 8080, "TCP port (0: any free port, printed at start)")
			fs.StringVar(&o.apiKey, "api-key", "", "require \"Authorization: Bearer KEY\" (or \"x-api-key: KEY\") on every request but /health and the chat page's files (default $LAYERSTREAM_API_KEY)")
			fs.Var(&o.allowedHosts, "allowed-hosts", "more `names` (comma-separated, repeatable; \"*\": any) clients may reach the server by, in the Host header, besides 127.0.0.1, localhost, [::1], --host and the address connected to, on its port: others are answered 421 (DNS rebinding)")
			fs.Var(&o.allowedOrigins, "allowed-origins", "`origins` (scheme://host:port, comma-separated, repeatable; \"*\": any) of the web pages that may use the API besides the server's own chat page: they get CORS headers, other pages 403")
			fs.IntVar(&o.parallel, "parallel", 16, "most sequences generated together (the batch); more requests wait in the queue")
			fs.IntVar(&o.queue, "max-queue", 64, "most requests waiting beyond the batch; one more is answered 429")
			fs.IntVar(&o.eng.PrefillBudget, "prefill-budget", engine.DefaultPrefillBudget, "most prompt tokens a step computes beside the sequences decoding (at least 64; 0: no bound): joining prompts are computed in chunks, so running answers keep streaming")
			fs.BoolVar(&o.eng.PrefixCache, "prefix-cache", true, "keep finished requests' keys and values in the batch's cache rows until they are needed, so that a request starting with the same ids (a chat's next turn, a shared system prompt) computes only the rest (/metrics: layerstream_prompt_tokens_cached_total, layerstream_prefix_cache_hits_total)")
			fs.IntVar(&o.maxTokens, "max-tokens", 2048, "most tokens a request may generate (max_tokens), and the default of chat requests")
			fs.Var(byteSize{&o.maxBody}, "max-body", "largest request body, a `size` (default 4MiB)")
			fs.DurationVar(&o.readTimeout, "read-timeout", server.DefaultReadTimeout, "a request's headers, then its body, must each arrive within this; else it is answered 408 and its connection closed")
			fs.DurationVar(&o.grace, "shutdown-timeout", 30*time.Second, "on SIGTERM or Ctrl-C: how long requests in flight may take to finish before they are cancelled")
			fs.BoolVar(&o.strict, "strict", false, "end a request with an error (500, health_check_failed) when its guards detect broken output (activations out of range, all-zero logits, degenerate repetition); without it they are logged with the request id (NaN logits end a request either way)")
			addEngineFlags(fs, &o.eng)
			return func(ctx context.Context, args []string) error {
				if len(args) != 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				if o.model == "" {
					return usageErrorf("--model is required")
				}
				if o.apiKey == "" {
					o.apiKey = os.Getenv("LAYERSTREAM_API_KEY")
				}
				if err := o.check(); err != nil {
					return err
				}
				return runServe(ctx, o, nil)
			}
		},
	})
}

// serveOptions are serve's flags.
type serveOptions struct {
	model, name, host, apiKey string
	port, parallel, queue     int
	maxTokens                 int
	maxBody                   int64
	grace, readTimeout        time.Duration
	strict                    bool
	allowedHosts              stringsFlag
	allowedOrigins            stringsFlag
	eng                       engine.Options
}

// list is a repeatable flag's values, each split at commas, blanks dropped.
func list(values []string) []string {
	var out []string
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}

func (o *serveOptions) check() error {
	switch {
	case o.parallel < 1:
		return usageErrorf("--parallel must be at least 1, got %d", o.parallel)
	case o.queue < 0:
		return usageErrorf("--max-queue must be at least 0, got %d", o.queue)
	case o.maxTokens < 1:
		return usageErrorf("--max-tokens must be at least 1, got %d", o.maxTokens)
	case o.grace < 0:
		return usageErrorf("--shutdown-timeout must be at least 0, got %v", o.grace)
	case o.readTimeout <= 0:
		return usageErrorf("--read-timeout must be positive, got %v", o.readTimeout)
	case o.port < 0 || o.port > 65535:
		return usageErrorf("--port must be in [0, 65535], got %d", o.port)
	case o.eng.PrefillBudget < 0 || (o.eng.PrefillBudget > 0 && o.eng.PrefillBudget < 64):
		return usageErrorf("--prefill-budget must be 0 (no bound) or at least 64 tokens, got %d", o.eng.PrefillBudget)
	}
	if o.eng.PrefillBudget == 0 {
		o.eng.PrefillBudget = -1 // engine.Options: negative is no bound
	}
	if ip := net.ParseIP(o.host); (ip == nil || !ip.IsLoopback()) && o.host != "localhost" && o.apiKey == "" {
		return usageErrorf("--host %s accepts connections from other machines: give --api-key (or $LAYERSTREAM_API_KEY; see %s)", o.host, sections.Anchor(sections.Server))
	}
	return nil
}

// runServe opens the model and serves until ctx ends, then shuts down gracefully: no new requests, those in
// flight get --shutdown-timeout to finish, then are cancelled. ready, when not nil, receives the address
// listened on. The engine is profiled live (profiler.NewLive: nothing kept, next to no cost while no chat page
// watches its pipeline view).
func runServe(ctx context.Context, o serveOptions, ready chan<- string) error {
	o.eng.MaxBatch = o.parallel
	if o.eng.Profiler == nil {
		o.eng.Profiler = profiler.NewLive()
	}
	e, err := openEngine(ctx, o.model, o.eng, "the server needs the model's tokenizer")
	if err != nil {
		return err
	}
	defer e.Close()
	name := o.name
	if name == "" {
		name = o.model
		if !hub.IsRepoID(o.model) {
			name = filepath.Base(filepath.Clean(o.model))
		}
	}
	srv, err := server.New(server.Config{Engine: e, ModelID: name, MaxInFlight: o.parallel + o.queue,
		Host: o.host, AllowedHosts: list(o.allowedHosts), AllowedOrigins: list(o.allowedOrigins),
		MaxBodyBytes: o.maxBody, ReadTimeout: o.readTimeout, MaxTokens: o.maxTokens, APIKey: o.apiKey, Strict: o.strict, Profiler: o.eng.Profiler})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(o.host, strconv.Itoa(o.port)))
	if err != nil {
		return err
	}
	addr := "http://" + ln.Addr().String()
	slog.Info("serving", "model", name, "url", addr+"/v1", "parallel", o.parallel, "max_queue", o.queue, "api_key", o.apiKey != "")
	fmt.Fprintf(errOut, "layerstream: serving %s at %s/v1 (OpenAI), %s/api (Ollama), %s/v1/messages (Anthropic); chat page %s/ (Ctrl-C to stop)\n", name, addr, addr, addr, addr)
	if ready != nil {
		ready <- addr
	}
	if err := srv.Serve(ctx, ln, o.grace); err != nil {
		return err
	}
	slog.Info("stopped")
	return nil
}
