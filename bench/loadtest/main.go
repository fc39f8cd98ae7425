// Command loadtest measures the server's continuous batching on loopback: C concurrent streaming clients
// against the same requests sent one at a time, on a synthetic checkpoint at a real shape (default
// TinyLlama-1.1B, streamed), or against a running server (--url).
//
//	go run ./bench/loadtest                        # 64 clients, TinyLlama-1.1B shape, 22 layers: ~10-20 minutes
//	go run ./bench/loadtest --layers 4 --clients 16 --max-tokens 16   # a few minutes
//	go run ./bench/loadtest --burst 8                # running streams under a burst of long prompts (burst.go)
//
// Each of the K prompts (--sequential, default 8) is answered alone, one after the other (greedy; half before
// the concurrent phase, half after): the sequential rate, and each prompt's reference text. C clients (--clients, default 64) send those prompts
// at once (client i sends prompt i mod K), streamed: the aggregate rate. Every concurrent answer must equal its
// prompt's answer alone, and none may be lost. The result is the ratio of the two rates (goal ≥ 10 on the
// TinyLlama shape); exit status 1 when an answer differs or is lost, 2 on an error.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/server"
	"github.com/layerstream/layerstream/synth"
)

var prompts = []string{
	"Once upon a time, in a small village by the sea, there lived an old fisherman who",
	"The capital of France is",
	"Here is a short poem about the autumn rain:",
	"To make a good cup of tea, first",
	"In 1969, the first humans walked on the Moon. The mission was called",
	"def fibonacci(n):",
	"The three primary colours are",
	"Dear hiring manager, I am writing to apply for the position of",
}

type options struct {
	url        string
	shape      string
	layers     int
	tokenizer  string
	cache      string
	clients    int
	sequential int
	maxTokens  int
	timeout    time.Duration
	jsonOut    bool
	directIO   bool
	budget     int // engine.Options.PrefillBudget of the in-process server (0: the engine's default)

	// --burst (burst.go)
	burst, running             int
	budgets                    string
	burstRepeat, runningTokens int
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "", "a running server's base URL (e.g. http://127.0.0.1:8080/v1); default: serve the synthetic model in this process, on loopback")
	flag.StringVar(&o.shape, "shape", "tinyllama-1.1b", "synthetic model shape: "+strings.Join(synth.ShapeNames(), ", "))
	flag.IntVar(&o.layers, "layers", 0, "decoder layers (default: the shape's)")
	flag.StringVar(&o.tokenizer, "tokenizer", "", "tokenizer.json of the synthetic model (default: ../shared/models/tokenizers/llama2-32k beside the repository, Llama 2's 32000 tokens as TinyLlama's)")
	flag.StringVar(&o.cache, "cache", filepath.Join(os.TempDir(), "layerstream-loadtest"), "where the synthetic checkpoint is kept")
	flag.IntVar(&o.clients, "clients", 64, "concurrent streaming clients (at most 256)")
	flag.IntVar(&o.sequential, "sequential", len(prompts), fmt.Sprintf("prompts answered one at a time first (at most %d): the sequential rate and the reference answers", len(prompts)))
	flag.IntVar(&o.maxTokens, "max-tokens", 32, "max_tokens of every request")
	flag.DurationVar(&o.timeout, "timeout", time.Hour, "bound on the whole run")
	flag.BoolVar(&o.jsonOut, "json", false, "print the report as JSON")
	flag.BoolVar(&o.directIO, "direct-io", true, "read the shards with O_DIRECT, as for a model larger than memory (what scripts/speed.sh's targets 2 and 4 measure); false: from the page cache")
	flag.IntVar(&o.budget, "prefill-budget", 0, "the in-process server's prefill budget (engine.Options.PrefillBudget; 0: the engine's default, negative: no bound)")
	flag.IntVar(&o.burst, "burst", 0, "instead: N clients with long prompts join at once while --running streams decode (time to first token of the burst, inter-token gaps of the running streams), for each of --prefill-budgets")
	flag.IntVar(&o.running, "running", 4, "with --burst: streams decoding when the burst comes")
	flag.StringVar(&o.budgets, "prefill-budgets", "-1,64", "with --burst: the prefill budgets to compare, in this order, in one run (-1: no bound, every joining prompt in one pass)")
	flag.IntVar(&o.burstRepeat, "burst-repeat", 1, "with --burst: each burst prompt is every prompt of the list (~110 tokens) this many times")
	flag.IntVar(&o.runningTokens, "running-tokens", 48, "with --burst: max_tokens of the running streams (they must outlast the burst)")
	flag.Parse()
	if o.burst > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
		defer cancel()
		if err := runBurst(ctx, o); err != nil {
			fmt.Fprintln(os.Stderr, "loadtest:", err)
			os.Exit(2)
		}
		return
	}
	if o.clients < 1 || o.clients > 256 || o.sequential < 1 || o.sequential > len(prompts) || o.maxTokens < 1 {
		fmt.Fprintf(os.Stderr, "loadtest: --clients in [1, 256], --sequential in [1, %d], --max-tokens ≥ 1\n", len(prompts))
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	rep, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(2)
	}
	if o.jsonOut {
		json.NewEncoder(os.Stdout).Encode(rep)
	} else {
		rep.print()
	}
	if rep.Mismatched > 0 || rep.Lost > 0 {
		os.Exit(1)
	}
}

// report is the outcome of a run.
type report struct {
	Model            string  `json:"model"`
	Clients          int     `json:"clients"`
	Sequential       int     `json:"sequential"`
	MaxTokens        int     `json:"max_tokens"`
	SeqTokens        int     `json:"sequential_tokens"`
	SeqSeconds       float64 `json:"sequential_seconds"`
	SeqRate          float64 `json:"sequential_tokens_per_s"`
	ConcTokens       int     `json:"concurrent_tokens"`
	ConcSeconds      float64 `json:"concurrent_seconds"`
	ConcRate         float64 `json:"concurrent_tokens_per_s"`
	Ratio            float64 `json:"ratio"`
	Passes           int64   `json:"forward_passes,omitempty"`
	TTFTMedian       float64 `json:"ttft_median_s"`
	TTFTMax          float64 `json:"ttft_max_s"`
	Mismatched       int     `json:"mismatched"`
	Lost             int     `json:"lost"`
	GOMAXPROCS       int     `json:"gomaxprocs"`
	SequentialFor64s float64 `json:"sequential_seconds_for_all_clients"`
}

func (r *report) print() {
	fmt.Printf("model %s, max_tokens %d, GOMAXPROCS %d\n", r.Model, r.MaxTokens, r.GOMAXPROCS)
	fmt.Printf("sequential  %3d requests one at a time: %5d tokens in %8.1f s = %7.2f tokens/s (all %d clients' requests so: ~%.0f s)\n",
		r.Sequential, r.SeqTokens, r.SeqSeconds, r.SeqRate, r.Clients, r.SequentialFor64s)
	fmt.Printf("concurrent  %3d streaming clients:      %5d tokens in %8.1f s = %7.2f tokens/s", r.Clients, r.ConcTokens, r.ConcSeconds, r.ConcRate)
	if r.Passes > 0 {
		fmt.Printf(" (%d forward passes)", r.Passes)
	}
	fmt.Printf("\ntime to first token: median %.1f s, max %.1f s\n", r.TTFTMedian, r.TTFTMax)
	fmt.Printf("ratio %.1f× (goal ≥ 10 on the TinyLlama shape); answers differing from their solo run: %d; lost: %d\n", r.Ratio, r.Mismatched, r.Lost)
}

func run(ctx context.Context, o options) (*report, error) {
	rep := &report{Clients: o.clients, Sequential: o.sequential, MaxTokens: o.maxTokens, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	base := strings.TrimSuffix(o.url, "/")
	var e *engine.Engine
	if base == "" {
		dir, err := prepare(o)
		if err != nil {
			return nil, err
		}
		var stop func()
		e, base, stop, err = serveInProcess(ctx, o, dir, o.budget, o.clients, o.maxTokens)
		if err != nil {
			return nil, err
		}
		defer stop()
		rep.Model = describe(o, dir, e, base)
	} else {
		rep.Model = base
	}
	model, err := modelID(ctx, base)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.clients}}

	// Sequential: each prompt alone, half of them before the concurrent clients and half after, so that a change
	// in the machine's load during the run weighs on both rates alike.
	want := make([]string, o.sequential)
	var seqTime time.Duration
	sequential := func(from, to int) error {
		for i := from; i < to; i++ {
			a := ask(ctx, client, base, model, prompts[i], o.maxTokens, nil)
			if a.err != nil {
				return fmt.Errorf("sequential request %d: %w", i, a.err)
			}
			want[i] = a.text
			rep.SeqTokens += a.tokens
			seqTime += a.total
			fmt.Fprintf(os.Stderr, "loadtest: alone %d/%d: %d tokens in %.1f s\n", i+1, o.sequential, a.tokens, a.total.Seconds())
		}
		return nil
	}
	half := (o.sequential + 1) / 2
	if err := sequential(0, half); err != nil {
		return nil, err
	}

	// Concurrent: every client at once.
	var passes0 int64
	if e != nil {
		passes0 = e.Load().Steps
	}
	answers := make([]answer, o.clients)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range o.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			answers[i] = ask(ctx, client, base, model, prompts[i%o.sequential], o.maxTokens, nil)
		}()
	}
	fmt.Fprintf(os.Stderr, "loadtest: %d concurrent clients\n", o.clients)
	start := time.Now()
	close(gate)
	wg.Wait()
	rep.ConcSeconds = time.Since(start).Seconds()
	if e != nil {
		rep.Passes = e.Load().Steps - passes0
	}
	if err := sequential(half, o.sequential); err != nil {
		return nil, err
	}
	rep.SeqSeconds = seqTime.Seconds()
	rep.SeqRate = float64(rep.SeqTokens) / rep.SeqSeconds
	rep.SequentialFor64s = float64(o.clients) * rep.SeqSeconds / float64(o.sequential)

	var ttfts []float64
	for i, a := range answers {
		switch {
		case a.err != nil:
			rep.Lost++
			fmt.Fprintf(os.Stderr, "loadtest: client %d lost: %v\n", i, a.err)
		case a.text != want[i%o.sequential]:
			rep.Mismatched++
			fmt.Fprintf(os.Stderr, "loadtest: client %d: %q\n  alone: %q\n", i, a.text, want[i%o.sequential])
		}
		rep.ConcTokens += a.tokens
		if a.ttft > 0 {
			ttfts = append(ttfts, a.ttft.Seconds())
		}
	}
	rep.ConcRate = float64(rep.ConcTokens) / rep.ConcSeconds
	rep.Ratio = rep.ConcRate / rep.SeqRate
	if len(ttfts) > 0 {
		slices.Sort(ttfts)
		rep.TTFTMedian, rep.TTFTMax = ttfts[len(ttfts)/2], ttfts[len(ttfts)-1]
	}
	return rep, nil
}

// serveInProcess opens the synthetic checkpoint in dir with a batch of up to batch sequences and the given
// prefill budget, and serves it on a loopback port. stop ends the server and closes the engine.
func serveInProcess(ctx context.Context, o options, dir string, budget, batch, maxTokens int) (e *engine.Engine, base string, stop func(), err error) {
	dio := engine.DirectIOOff
	if o.directIO {
		dio = engine.DirectIOOn
	}
	e, err = engine.Open(ctx, dir, engine.Options{MaxBatch: batch, DirectIO: dio, ShardDir: filepath.Join(dir, "shards"), PrefillBudget: budget})
	if err != nil {
		return nil, "", nil, err
	}
	srv, err := server.New(server.Config{Engine: e, ModelID: "loadtest", MaxInFlight: batch + 8, MaxTokens: maxTokens})
	if err != nil {
		e.Close()
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.Close()
		return nil, "", nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() {
		srv.Serve(sctx, ln, time.Second)
		close(served)
	}()
	return e, "http://" + ln.Addr().String() + "/v1", func() { cancel(); <-served; e.Close() }, nil
}

// describe names the model served in process.
func describe(o options, dir string, e *engine.Engine, base string) string {
	how := "from the page cache"
	if e.DirectIO() {
		how = "with O_DIRECT"
	}
	return fmt.Sprintf("%s (%s), streamed %s, served in process on %s", o.shape, dir, how, base)
}

// prepare writes the synthetic checkpoint (bf16, with a tokenizer) unless it is cached; the engine splits it
// on first use.
func prepare(o options) (string, error) {
	shape, ok := synth.Shapes[o.shape]
	if !ok {
		return "", fmt.Errorf("--shape %q is not known (%s)", o.shape, strings.Join(synth.ShapeNames(), ", "))
	}
	if o.layers > 0 {
		shape.NumLayers = o.layers
	}
	tok := o.tokenizer
	if tok == "" {
		_, file, _, _ := runtime.Caller(0)
		tok = filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "models", "tokenizers", "llama2-32k", "tokenizer.json")
	}
	if _, err := os.Stat(tok); err != nil {
		return "", fmt.Errorf("the synthetic model needs a tokenizer.json of %d tokens: give --tokenizer (%w)", shape.VocabSize, err)
	}
	dir := filepath.Join(o.cache, fmt.Sprintf("%s-%dL-bf16", o.shape, shape.NumLayers))
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil { // written last
		return dir, nil
	}
	fmt.Fprintf(os.Stderr, "loadtest: writing the synthetic checkpoint %s\n", dir)
	os.RemoveAll(dir)
	return dir, synth.Write(dir, synth.Options{Shape: shape, DType: checkpoint.BF16, Seed: 1, Tokenizer: tok})
}

func modelID(ctx context.Context, base string) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/models", nil)
	if key := os.Getenv("LAYERSTREAM_API_KEY"); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) == 0 {
		return "", fmt.Errorf("%s/models: %d, no model (%v)", base, resp.StatusCode, err)
	}
	return list.Data[0].ID, nil
}

// answer is one streamed completion.
type answer struct {
	text        string
	tokens      int
	ttft, total time.Duration
	err         error
}

// ask sends one greedy streaming completion and reads it to the end; onText (which may be nil) is called when
// each piece of text arrives.
func ask(ctx context.Context, client *http.Client, base, model, prompt string, maxTokens int, onText func(time.Time)) answer {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": maxTokens, "temperature": 0,
		"stream": true, "stream_options": map[string]bool{"include_usage": true}})
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/completions", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	if key := os.Getenv("LAYERSTREAM_API_KEY"); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := peek(resp)
		return answer{err: fmt.Errorf("status %d: %s", resp.StatusCode, b)}
	}
	var a answer
	done := false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ev struct {
			Choices []struct {
				Text string `json:"text"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return answer{err: err}
		}
		if ev.Error != nil {
			return answer{err: errors.New(ev.Error.Message)}
		}
		for _, c := range ev.Choices {
			if c.Text == "" {
				continue
			}
			if a.ttft == 0 {
				a.ttft = time.Since(start)
			}
			if onText != nil {
				onText(time.Now())
			}
			a.text += c.Text
		}
		if ev.Usage != nil {
			a.tokens = ev.Usage.CompletionTokens
		}
	}
	a.total = time.Since(start)
	if !done {
		return answer{err: fmt.Errorf("the stream ended without [DONE] (%v)", sc.Err())}
	}
	return a
}

func peek(resp *http.Response) (string, error) {
	b := make([]byte, 300)
	n, err := resp.Body.Read(b)
	return string(b[:n]), err
}
