package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/stats"
	"github.com/layerstream/layerstream/internal/textout"
)

func init() {
	register(command{
		name:    "bench",
		summary: "measure prefill and decode speed on synthetic prompts: medians over several runs",
		usage:   "--model DIR",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			var o benchOptions
			fs.StringVar(&o.model, "model", "", modelFlagHelp)
			fs.IntVar(&o.promptTokens, "prompt-tokens", 128, "prompt length in tokens (synthetic ids)")
			fs.IntVar(&o.newTokens, "new-tokens", 32, "tokens to generate per run (end-of-sequence ids do not "+
				"stop a run, so every run generates exactly this many)")
			fs.IntVar(&o.runs, "runs", 3, "measured runs; the table reports their medians")
			fs.IntVar(&o.warmup, "warmup", 1, "unmeasured runs first (compile graphs, warm the page cache)")
			fs.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic prompt ids")
			fs.BoolVar(&o.json, "json", false, "print one JSON object instead of the table")
			fs.Var(intList{&o.passRows}, "pass-rows", "also time forward passes of these numbers of new positions of one sequence, as a draft's verification computes them (`list` such as 1,2,4,8,16,32; the first is the base of the ratios)")
			addEngineFlags(fs, &o.eng)
			prof := addProfileFlags(fs)
			return func(ctx context.Context, args []string) error {
				if len(args) != 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				if err := o.check(); err != nil {
					return err
				}
				rep, err := runBench(ctx, o, prof)
				if err != nil {
					return err
				}
				out := bufio.NewWriter(os.Stdout)
				if o.json {
					err = rep.writeJSON(out)
				} else {
					err = rep.writeTable(out)
				}
				return errors.Join(err, out.Flush())
			}
		},
	})
}

// benchOptions are bench's flags.
type benchOptions struct {
	model        string
	promptTokens int
	newTokens    int
	runs         int
	warmup       int
	seed         uint64
	json         bool
	passRows     []int
	eng          engine.Options
}

func (o *benchOptions) check() error {
	switch {
	case o.model == "":
		return usageErrorf("--model is required")
	case o.promptTokens < 1:
		return usageErrorf("--prompt-tokens must be at least 1, got %d", o.promptTokens)
	case o.newTokens < 1:
		return usageErrorf("--new-tokens must be at least 1, got %d", o.newTokens)
	case o.runs < 1:
		return usageErrorf("--runs must be at least 1, got %d", o.runs)
	case o.warmup < 0:
		return usageErrorf("--warmup must not be negative, got %d", o.warmup)
	}
	return nil
}

// runBench opens the model once and measures o.warmup + o.runs generations of the same synthetic prompt. The
// per-category profile, when asked for, covers the last run; pprof covers them all.
func runBench(ctx context.Context, o benchOptions, prof *profileFlags) (*benchReport, error) {
	p, finish := prof.Start()
	o.eng.Profiler = p
	e, err := engine.Open(ctx, o.model, o.eng)
	if err != nil {
		return nil, errors.Join(err, finish())
	}
	defer e.Close()
	prompt, err := syntheticPrompt(e.Config(), e.Generation(), o.promptTokens, o.seed)
	if err != nil {
		return nil, errors.Join(err, finish())
	}
	rep := &benchReport{Model: o.model, Device: string(o.eng.Device), Reads: "page cache", PromptTokens: o.promptTokens,
		NewTokens: o.newTokens, Warmup: o.warmup}
	var reads decodeReads
	gen := func(ctx context.Context, onToken func()) (int, error) {
		// A non-nil empty StopIDs disables the end-of-sequence stop: every run generates o.newTokens tokens.
		req := engine.Request{PromptIDs: prompt, MaxNewTokens: o.newTokens, StopIDs: []int{}}
		reads.start()
		res, err := e.Generate(ctx, req, func(engine.Token) error { reads.token(e.Stats().ReadBytes); onToken(); return nil })
		if err != nil {
			return 0, err
		}
		rep.TokensPerPass = float64(len(res.GeneratedIDs)) / float64(max(res.Passes, 1)) // the last run's
		if o.eng.Draft != "" {
			rep.Draft = &res.Draft
		}
		return len(res.GeneratedIDs), nil
	}
	if e.DirectIO() {
		rep.Reads = "O_DIRECT"
	}
	var startStats engine.Stats
	for i := range o.warmup + o.runs {
		if i == o.warmup+o.runs-1 {
			p.Reset() // the profile covers the last run only
		}
		if i == o.warmup {
			startStats = e.Stats() // the expert counters cover the measured runs
		}
		r, err := measureRun(ctx, gen, o.promptTokens)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("run %d: %w", i+1, err), finish())
		}
		if i < o.warmup {
			slog.Debug("bench: warm-up run", "run", i+1, "total", r.Total)
			continue
		}
		reads.count()
		slog.Debug("bench: run", "run", i+1-o.warmup, "ttft", r.TTFT, "decode tok/s", r.DecodeTokS)
		rep.Runs = append(rep.Runs, r)
	}
	if err := finish(); err != nil {
		return nil, err
	}
	st := e.Stats()
	rep.ResidentBytes, rep.StreamedBytes, rep.LayerBytes = st.ResidentBytes, st.StreamedBytes, st.LayerBytes
	rep.ReadBytesPerToken = reads.perToken()
	if st.Experts != (engine.ExpertStats{}) {
		x := st.Experts
		b := startStats.Experts
		d := engine.ExpertStats{Hits: x.Hits - b.Hits, Misses: x.Misses - b.Misses, Predicted: x.Predicted - b.Predicted,
			PredictedUsed: x.PredictedUsed - b.PredictedUsed, ReadAhead: x.ReadAhead - b.ReadAhead}
		rep.Experts = &benchExperts{HitRate: d.HitRate(), PredictionAccuracy: d.PredictionAccuracy(), Hits: d.Hits, Misses: d.Misses,
			Predicted: d.Predicted, ReadAhead: d.ReadAhead, CacheBytes: x.CacheBytes, BudgetBytes: x.BudgetBytes}
	}
	if rep.Passes, err = passTimes(ctx, e, prompt, o); err != nil {
		return nil, err
	}
	rep.summarize()
	rep.PeakRSS, rep.AnonRSS, rep.FileRSS = memStatus()
	return rep, nil
}

// syntheticPrompt draws n seeded token ids, avoiding the special ids below 3 and the end-of-sequence ids so the
// prompt looks like ordinary text to the engine.
func syntheticPrompt(cfg *checkpoint.Config, gen *checkpoint.GenerationConfig, n int, seed uint64) ([]int, error) {
	if cfg.VocabSize < 8 {
		return nil, fmt.Errorf("config.json vocab_size %d is too small for synthetic prompts", cfg.VocabSize)
	}
	eos := checkpoint.EOSTokenIDs(cfg, gen)
	rng := rand.New(rand.NewPCG(seed, 0x6c617965727374)) // "layerst"
	ids := make([]int, 0, n)
	for len(ids) < n {
		id := 3 + rng.IntN(cfg.VocabSize-3)
		if !slices.Contains(eos, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// benchRun is one measured generation. Times are taken around the engine call: TTFT from the call to the first
// token, decode from the first token to the last.
type benchRun struct {
	Generated   int           `json:"generated_tokens"`
	TTFT        time.Duration `json:"ttft_ns"`
	Decode      time.Duration `json:"decode_ns"`
	Total       time.Duration `json:"total_ns"`
	PrefillTokS float64       `json:"prefill_tok_s"` // prompt tokens / TTFT
	DecodeTokS  float64       `json:"decode_tok_s"`  // (generated − 1) / decode time; 0 with one token
}

// measureRun times one call of gen, which must call onToken once per generated token and return their count.
func measureRun(ctx context.Context, gen func(ctx context.Context, onToken func()) (int, error),
	promptTokens int) (benchRun, error) {
	var first, last time.Time
	n := 0
	start := time.Now()
	got, err := gen(ctx, func() {
		last = time.Now()
		if n == 0 {
			first = last
		}
		n++
	})
	end := time.Now()
	if err != nil {
		return benchRun{}, err
	}
	if n == 0 || got != n {
		return benchRun{}, fmt.Errorf("engine returned %d tokens but streamed %d", got, n)
	}
	r := benchRun{Generated: n, TTFT: first.Sub(start), Decode: last.Sub(first), Total: end.Sub(start)}
	if r.TTFT > 0 {
		r.PrefillTokS = float64(promptTokens) / r.TTFT.Seconds()
	}
	if n > 1 && r.Decode > 0 {
		r.DecodeTokS = float64(n-1) / r.Decode.Seconds()
	}
	return r, nil
}

// benchReport is bench's result: the medians at the top level (what scripts read), each run below.
type benchReport struct {
	Model        string  `json:"model"`
	Device       string  `json:"device"`
	Reads        string  `json:"reads"` // how shards are read: "page cache" or "O_DIRECT"
	PromptTokens int     `json:"prompt_tokens"`
	NewTokens    int     `json:"new_tokens"`
	Warmup       int     `json:"warmup_runs"`
	PrefillTokS  float64 `json:"prefill_tok_s"`
	DecodeTokS   float64 `json:"decode_tok_s"`
	SecPerToken  float64 `json:"s_per_token"` // 1 / decode tok/s
	TTFT         float64 `json:"ttft_s"`
	Total        float64 `json:"total_s"`
	PeakRSS      int64   `json:"peak_rss_bytes"` // the process's peak resident set (VmHWM); 0 when unknown
	// The resident set at the end, split (RssAnon, RssFile; 0 when unknown): the engine's own memory, and the
	// pages of mapped shard files it has touched, which stay page cache that the kernel can reclaim.
	AnonRSS int64 `json:"anon_rss_bytes"`
	FileRSS int64 `json:"file_rss_bytes"`
	// TokensPerPass is the last run's generated tokens per forward pass of the model (its prompt's counted as
	// one): above 1 with speculative decoding, whose draft tokens proposed and accepted Draft counts.
	TokensPerPass float64 `json:"tokens_per_pass"`
	// Passes are the --pass-rows measurements: a pass over k new positions against one over the first entry's.
	Passes []passRows `json:"pass_rows,omitempty"`
	// ResidentBytes are the decoder layers' shard bytes kept loaded (--resident, --memory-budget), StreamedBytes
	// those read for every forward pass.
	ResidentBytes int64 `json:"resident_bytes"`
	StreamedBytes int64 `json:"streamed_bytes"`
	// LayerBytes are all the decoder layers' shard bytes; ReadBytesPerToken the shard bytes read per decoded
	// token over the measured runs' decode steps (a mixture of experts' streamed layers read their routed
	// experts only; with O_DIRECT, bytes from the disk).
	LayerBytes        int64 `json:"layer_bytes"`
	ReadBytesPerToken int64 `json:"read_bytes_per_token"`
	// Experts is the expert cache over the measured runs, where routed experts stream (omitted otherwise).
	Experts *benchExperts      `json:"experts,omitempty"`
	Draft   *engine.DraftStats `json:"draft,omitempty"`
	Runs    []benchRun         `json:"runs"`
}

// benchExperts is the expert cache's record over the measured runs (engine.ExpertStats).
type benchExperts struct {
	HitRate            float64 `json:"hit_rate"`
	PredictionAccuracy float64 `json:"prediction_accuracy"`
	Hits               int64   `json:"hits"`
	Misses             int64   `json:"misses"`
	Predicted          int64   `json:"predicted"`
	ReadAhead          int64   `json:"read_ahead"`
	CacheBytes         int64   `json:"cache_bytes"`
	BudgetBytes        int64   `json:"budget_bytes"`
}

// decodeReads sums the shard bytes read between a run's first and last tokens: its decode steps.
type decodeReads struct {
	first, last, bytes int64
	tokens, decoded    int
}

func (d *decodeReads) start() { d.tokens = 0 }

// token records the engine's read counter at a token.
func (d *decodeReads) token(read int64) {
	if d.tokens == 0 {
		d.first = read
	}
	d.last = read
	d.tokens++
}

// count adds the run just ended to the sum.
func (d *decodeReads) count() {
	if d.tokens > 1 {
		d.bytes += d.last - d.first
		d.decoded += d.tokens - 1
	}
}

// perToken is the bytes read per decoded token, 0 when no run decoded.
func (d *decodeReads) perToken() int64 {
	if d.decoded == 0 {
		return 0
	}
	return d.bytes / int64(d.decoded)
}

// summarize sets the medians from the runs.
func (r *benchReport) summarize() {
	col := func(f func(benchRun) float64) float64 {
		xs := make([]float64, len(r.Runs))
		for i, run := range r.Runs {
			xs[i] = f(run)
		}
		return stats.Median(xs)
	}
	r.PrefillTokS = col(func(b benchRun) float64 { return b.PrefillTokS })
	r.DecodeTokS = col(func(b benchRun) float64 { return b.DecodeTokS })
	r.TTFT = col(func(b benchRun) float64 { return b.TTFT.Seconds() })
	r.Total = col(func(b benchRun) float64 { return b.Total.Seconds() })
	r.SecPerToken = 0
	if r.DecodeTokS > 0 {
		r.SecPerToken = 1 / r.DecodeTokS
	}
}

func (r *benchReport) writeJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(r)
}

func (r *benchReport) writeTable(w io.Writer) error {
	ew := &textout.Writer{W: w}
	runs := "runs"
	if len(r.Runs) == 1 {
		runs = "run"
	}
	ew.Printf("bench %s on %s (shard reads: %s): prompt %d tokens, %d new tokens, %d %s (+%d warm-up)\n",
		r.Model, r.Device, r.Reads, r.PromptTokens, r.NewTokens, len(r.Runs), runs, r.Warmup)
	ew.Printf("%-8s %14s %13s %10s %10s %10s\n", "run", "prefill tok/s", "decode tok/s", "s/token", "TTFT s",
		"total s")
	for i, run := range r.Runs {
		spt := 0.0
		if run.DecodeTokS > 0 {
			spt = 1 / run.DecodeTokS
		}
		ew.Printf("%-8d %14.1f %13.2f %10.4f %10.3f %10.3f\n", i+1, run.PrefillTokS, run.DecodeTokS, spt,
			run.TTFT.Seconds(), run.Total.Seconds())
	}
	ew.Printf("%-8s %14.1f %13.2f %10.4f %10.3f %10.3f\n", "median", r.PrefillTokS, r.DecodeTokS, r.SecPerToken,
		r.TTFT, r.Total)
	for _, p := range r.Passes {
		ew.Printf("a pass over %2d new positions: %8.2f ms (median of %d), %.2f× a pass over %d\n", p.Rows, p.Seconds*1e3, p.Runs, p.Ratio, r.Passes[0].Rows)
	}
	if r.ResidentBytes > 0 {
		ew.Printf("decoder layers: %s resident, %s streamed per pass\n", bytesize.Format(r.ResidentBytes), bytesize.Format(r.StreamedBytes))
	}
	if r.ReadBytesPerToken > 0 {
		ew.Printf("shard bytes read per decoded token: %s of %s of decoder layers\n", bytesize.Format(r.ReadBytesPerToken), bytesize.Format(r.LayerBytes))
	}
	if x := r.Experts; x != nil {
		ew.Printf("expert cache: %.1f%% hits (%d of %d), %s held of %s; prediction accuracy %.1f%% (of %d predicted; %d read ahead)\n", 100*x.HitRate, x.Hits, x.Hits+x.Misses,
			bytesize.Format(x.CacheBytes), bytesize.Format(x.BudgetBytes), 100*x.PredictionAccuracy, x.Predicted, x.ReadAhead)
	}
	if r.Draft != nil {
		ew.Printf("speculative decoding: %.2f tokens per pass; %d of %d draft tokens accepted (the last run)\n", r.TokensPerPass, r.Draft.Accepted, r.Draft.Proposed)
	}
	if r.PeakRSS > 0 {
		ew.Printf("peak RSS %s; at the end %s anonymous (the engine's own), %s file-backed (mapped shards: page cache)\n",
			bytesize.Format(r.PeakRSS), bytesize.Format(r.AnonRSS), bytesize.Format(r.FileRSS))
	} else {
		ew.Printf("peak RSS unknown (no /proc/self/status)\n")
	}
	return ew.Err
}

// memStatus returns the process's peak resident set (VmHWM) and its current anonymous and file-backed parts
// (RssAnon, RssFile) in bytes from /proc/self/status; 0 for what is unavailable.
func memStatus() (peak, anon, file int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, 0
	}
	s := string(b)
	return statusBytes(s, "VmHWM"), statusBytes(s, "RssAnon"), statusBytes(s, "RssFile")
}

// statusBytes is the value of key ("VmHWM: 1234 kB") in a /proc status file, in bytes; 0 when absent or malformed.
func statusBytes(status, key string) int64 {
	for line := range strings.Lines(status) {
		rest, ok := strings.CutPrefix(line, key+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0
		}
		return kb * 1024
	}
	return 0
}

// passRows is one --pass-rows measurement.
type passRows struct {
	Rows    int     `json:"rows"`
	Runs    int     `json:"runs"`
	Seconds float64 `json:"seconds"` // median
	Ratio   float64 `json:"ratio"`   // against the first entry's
}

// passTimes measures --pass-rows: o.runs passes of each number of rows after the prompt (engine.PassTime, the
// sizes interleaved run by run), after a round that warms up.
func passTimes(ctx context.Context, e *engine.Engine, prompt []int, o benchOptions) ([]passRows, error) {
	if len(o.passRows) == 0 {
		return nil, nil
	}
	times, err := e.PassTime(ctx, prompt, o.passRows, o.runs+1)
	if err != nil {
		return nil, fmt.Errorf("--pass-rows: %w", err)
	}
	out := make([]passRows, len(o.passRows))
	for i, k := range o.passRows {
		secs := make([]float64, o.runs)
		for j, d := range times[i][1:] { // the first round warms up
			secs[j] = d.Seconds()
		}
		out[i] = passRows{Rows: k, Runs: o.runs, Seconds: stats.Median(secs)}
		out[i].Ratio = out[i].Seconds / out[0].Seconds
	}
	return out, nil
}

// intList is a flag holding a comma-separated list of positive integers.
type intList struct{ p *[]int }

func (l intList) String() string {
	if l.p == nil {
		return ""
	}
	s := make([]string, len(*l.p))
	for i, v := range *l.p {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (l intList) Set(s string) error {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return fmt.Errorf("want positive integers separated by commas, got %q", f)
		}
		out = append(out, v)
	}
	*l.p = out
	return nil
}
