package main

// Burst mode (--burst N): what a burst of requests with long prompts does to the streams already decoding. R
// running streams (--running) start and decode; once each has its second token, N clients (--burst) send long
// prompts (every prompt of the list, rotated, --burst-repeat times: ~110 tokens each) at once. Measured, for
// each prefill budget of --prefill-budgets in one run (the model served anew with each): the burst's time to
// first token, and the gaps between the running streams' tokens from the burst's arrival to its last first
// token. Every answer is checked against the same prompt answered alone first.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/layerstream/layerstream/engine"
)

// burstTokens is max_tokens of the burst's requests.
const burstTokens = 8

// burstReport is one prefill budget's outcome.
type burstReport struct {
	Budget          int     `json:"prefill_budget"` // -1: no bound
	BurstTTFTMedian float64 `json:"burst_ttft_median_s"`
	BurstTTFTMax    float64 `json:"burst_ttft_max_s"`
	Window          float64 `json:"window_s"` // the burst's arrival to its last first token
	GapBefore       float64 `json:"running_gap_before_median_s"`
	GapMedian       float64 `json:"running_gap_median_s"`
	GapP90          float64 `json:"running_gap_p90_s"`
	GapMax          float64 `json:"running_gap_max_s"`
	RunningTokens   int     `json:"running_tokens_in_window"`
	Passes          int64   `json:"forward_passes"`
	Mismatched      int     `json:"mismatched"`
	Lost            int     `json:"lost"`
	Outlasted       bool    `json:"running_outlasted_burst"` // every running stream still decoded at the window's end
}

func runBurst(ctx context.Context, o options) error {
	if o.url != "" {
		return errors.New("--burst serves the model in process, anew for each prefill budget: drop --url")
	}
	if o.running < 1 || o.running > len(prompts) || o.burstRepeat < 1 || o.runningTokens < 2 {
		return fmt.Errorf("--running in [1, %d], --burst-repeat ≥ 1, --running-tokens ≥ 2", len(prompts))
	}
	var budgets []int
	for _, f := range strings.Split(o.budgets, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || b == 0 {
			return fmt.Errorf("--prefill-budgets %q: want a list of token counts (-1: no bound)", o.budgets)
		}
		budgets = append(budgets, b)
	}
	dir, err := prepare(o)
	if err != nil {
		return err
	}
	running := prompts[:o.running]
	burst := make([]string, o.burst)
	for i := range burst {
		rotated := slices.Concat(prompts[i%len(prompts):], prompts[:i%len(prompts)])
		burst[i] = strings.Repeat(strings.Join(rotated, " ")+" ", o.burstRepeat)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.running + o.burst}}
	batch, maxTokens := o.running+o.burst, max(o.runningTokens, burstTokens)

	// Each prompt alone: the reference answers (and the engine warmed up).
	e, base, stop, err := serveInProcess(ctx, o, dir, -1, batch, maxTokens)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "loadtest: %s\n", describe(o, dir, e, base))
	model, err := modelID(ctx, base)
	if err != nil {
		stop()
		return err
	}
	want := map[string]string{}
	for i, p := range slices.Concat(running, burst) {
		n := o.runningTokens
		if i >= len(running) {
			n = burstTokens
		}
		a := ask(ctx, client, base, model, p, n, nil)
		if a.err != nil {
			stop()
			return fmt.Errorf("alone %d: %w", i, a.err)
		}
		want[p] = a.text
		fmt.Fprintf(os.Stderr, "loadtest: alone %d/%d: %d tokens in %.1f s\n", i+1, len(running)+len(burst), a.tokens, a.total.Seconds())
	}
	stop()

	var reports []burstReport
	for _, b := range budgets {
		e, base, stop, err := serveInProcess(ctx, o, dir, b, batch, maxTokens)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "loadtest: prefill budget %d: %d running streams, then a burst of %d\n", b, len(running), len(burst))
		r, err := burstPhase(ctx, client, e, base, model, running, burst, o.runningTokens, want)
		stop()
		if err != nil {
			return err
		}
		r.Budget = b
		reports = append(reports, r)
	}
	if o.jsonOut {
		return json.NewEncoder(os.Stdout).Encode(reports)
	}
	fmt.Printf("%d running streams (max_tokens %d), then %d clients at once with prompts of ~%d words (max_tokens %d); GOMAXPROCS %d\n",
		len(running), o.runningTokens, len(burst), len(strings.Fields(burst[0])), burstTokens, runtime.GOMAXPROCS(0))
	fmt.Printf("%-14s %-22s %-9s %-44s %-7s %s\n", "prefill budget", "burst TTFT median/max", "window", "running gaps in the window: median p90 max", "passes", "≠ solo, lost")
	for _, r := range reports {
		name := strconv.Itoa(r.Budget)
		if r.Budget < 0 {
			name = "none"
		}
		note := ""
		if !r.Outlasted {
			note = " (a running stream ended inside the window: raise --running-tokens)"
		}
		fmt.Printf("%-14s %7.1f s / %7.1f s    %6.1f s  %6.2f s %6.2f s %6.2f s (before: %.2f s)      %-7d %d, %d%s\n",
			name, r.BurstTTFTMedian, r.BurstTTFTMax, r.Window, r.GapMedian, r.GapP90, r.GapMax, r.GapBefore, r.Passes, r.Mismatched, r.Lost, note)
	}
	for _, r := range reports {
		if r.Mismatched > 0 || r.Lost > 0 {
			os.Exit(1)
		}
	}
	return nil
}

// burstPhase starts the running streams, sends the burst once each has its second token, and measures.
func burstPhase(ctx context.Context, client *http.Client, e *engine.Engine, base, model string, running, burst []string, runningTokens int, want map[string]string) (burstReport, error) {
	var r burstReport
	times := make([][]time.Time, len(running)) // each written by its stream's goroutine only
	second := make(chan struct{}, len(running))
	answers := make([]answer, len(running)+len(burst))
	var wg sync.WaitGroup
	for i, p := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = ask(ctx, client, base, model, p, runningTokens, func(t time.Time) {
				times[i] = append(times[i], t)
				if len(times[i]) == 2 {
					second <- struct{}{}
				}
			})
			if len(times[i]) < 2 {
				second <- struct{}{} // ended (or failed) early: do not wait for it
			}
		}()
	}
	for range running {
		select {
		case <-second:
		case <-ctx.Done():
			return r, ctx.Err()
		}
	}
	passes := e.Load().Steps
	start := time.Now()
	for i, p := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[len(running)+i] = ask(ctx, client, base, model, p, burstTokens, nil)
		}()
	}
	wg.Wait()
	r.Passes = e.Load().Steps - passes

	var ttfts []float64
	end := start
	for i, a := range answers {
		p := slices.Concat(running, burst)[i]
		switch {
		case a.err != nil:
			r.Lost++
			fmt.Fprintf(os.Stderr, "loadtest: client %d lost: %v\n", i, a.err)
		case a.text != want[p]:
			r.Mismatched++
			fmt.Fprintf(os.Stderr, "loadtest: client %d: %q\n  alone: %q\n", i, a.text, want[p])
		}
		if i >= len(running) && a.ttft > 0 {
			ttfts = append(ttfts, a.ttft.Seconds())
			if t := start.Add(a.ttft); t.After(end) {
				end = t
			}
		}
	}
	r.Window = end.Sub(start).Seconds()
	r.BurstTTFTMedian, r.BurstTTFTMax = median(ttfts), slices.Max(append(ttfts, 0))
	var before, during []float64
	r.Outlasted = true
	for _, ts := range times {
		for k := 1; k < len(ts); k++ {
			gap := ts[k].Sub(ts[k-1]).Seconds()
			switch {
			case !ts[k].After(start):
				before = append(before, gap)
			case ts[k-1].Before(end):
				during = append(during, gap)
				if !ts[k].After(end) {
					r.RunningTokens++
				}
			}
		}
		if len(ts) == 0 || ts[len(ts)-1].Before(end) {
			r.Outlasted = false
		}
	}
	r.GapBefore, r.GapMedian = median(before), median(during)
	if len(during) > 0 {
		slices.Sort(during)
		r.GapP90, r.GapMax = during[len(during)*9/10], during[len(during)-1]
	}
	return r, nil
}

// median of xs (0 when empty); xs is sorted.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	return xs[len(xs)/2]
}
