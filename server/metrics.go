package server

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
)

// metrics are the server's counters, written in the Prometheus text format by /metrics.
type metrics struct {
	mu               sync.Mutex
	requests         map[[2]string]int64 // endpoint, status → count
	promptTokens     int64
	generatedTokens  int64
	cachedTokens     int64
	cacheHits        int64 // requests that reused cached prompt tokens
	ttft, duration   histogram
	requestsByFinish map[string]int64
	problems         map[guard.Kind]int64
}

// histogram is a Prometheus histogram of seconds.
type histogram struct {
	counts []int64 // per bucket of histogramBuckets (not cumulative)
	sum    float64
	n      int64
}

var histogramBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}

func (h *histogram) observe(v float64) {
	if h.counts == nil {
		h.counts = make([]int64, len(histogramBuckets))
	}
	if i, _ := slices.BinarySearch(histogramBuckets, v); i < len(histogramBuckets) {
		h.counts[i]++
	}
	h.sum += v
	h.n++
}

func (h *histogram) write(w io.Writer, name, help string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	var cum int64
	for i, b := range histogramBuckets {
		if h.counts != nil {
			cum += h.counts[i]
		}
		fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", name, b, cum)
	}
	fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", name, h.n, name, h.sum, name, h.n)
}

func (m *metrics) request(endpoint string, status int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.requests == nil {
		m.requests = map[[2]string]int64{}
	}
	m.requests[[2]string{endpoint, fmt.Sprint(status)}]++
	if slices.Contains(generationEndpoints, endpoint) && status == http.StatusOK {
		m.duration.observe(d.Seconds())
	}
}

// generation counts a finished (or ended) generation's tokens, its time to first token and the problems its
// health checks saw.
func (m *metrics) generation(res *engine.TextResult, start, first time.Time, problems []*guard.Problem) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range problems {
		if m.problems == nil {
			m.problems = map[guard.Kind]int64{}
		}
		m.problems[p.Kind]++
	}
	if res == nil {
		return
	}
	m.promptTokens += int64(len(res.PromptIDs))
	m.cachedTokens += int64(res.CachedPromptTokens)
	if res.CachedPromptTokens > 0 {
		m.cacheHits++
	}
	m.generatedTokens += int64(len(res.GeneratedIDs))
	if !first.IsZero() {
		m.ttft.observe(first.Sub(start).Seconds())
	}
	if m.requestsByFinish == nil {
		m.requestsByFinish = map[string]int64{}
	}
	m.requestsByFinish[res.StopReason]++
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	m := &s.metrics
	load := s.cfg.Engine.Load()
	m.mu.Lock()
	defer m.mu.Unlock()
	p := func(name, typ, help string, v any) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %v\n", name, help, name, typ, name, v)
	}
	fmt.Fprintf(w, "# HELP layerstream_requests_total HTTP requests answered, by endpoint and status code (499: the client closed the connection before its answer).\n# TYPE layerstream_requests_total counter\n")
	keys := make([][2]string, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]string) int { return strings.Compare(a[0]+" "+a[1], b[0]+" "+b[1]) })
	for _, k := range keys {
		fmt.Fprintf(w, "layerstream_requests_total{endpoint=%q,code=%q} %d\n", k[0], k[1], m.requests[k])
	}
	fmt.Fprintf(w, "# HELP layerstream_generations_total Generations ended, by stop reason (eos, max_new_tokens, context, stop_string, cancelled, error...).\n# TYPE layerstream_generations_total counter\n")
	reasons := make([]string, 0, len(m.requestsByFinish))
	for k := range m.requestsByFinish {
		reasons = append(reasons, k)
	}
	slices.Sort(reasons)
	for _, k := range reasons {
		fmt.Fprintf(w, "layerstream_generations_total{reason=%q} %d\n", k, m.requestsByFinish[k])
	}
	fmt.Fprintf(w, "# HELP layerstream_health_problems_total Problems the generations' health checks saw (warnings, and errors with serve --strict), by kind; each names its TROUBLESHOOTING.md section in the log.\n# TYPE layerstream_health_problems_total counter\n")
	for _, k := range slices.Sorted(maps.Keys(m.problems)) {
		fmt.Fprintf(w, "layerstream_health_problems_total{kind=%q} %d\n", k, m.problems[k])
	}
	p("layerstream_requests_in_flight", "gauge", "Generation requests being answered or waiting.", s.inFlight.Load())
	p("layerstream_batch_sequences", "gauge", "Sequences in the engine's running batch.", load.Active)
	p("layerstream_queue_waiting", "gauge", "Requests waiting to join the batch.", load.Queued)
	p("layerstream_forward_passes_total", "counter", "Forward passes (steps) the batch loop has run: each serves every sequence of the batch.", load.Steps)
	p("layerstream_prompt_tokens_total", "counter", "Prompt tokens of the generations.", m.promptTokens)
	p("layerstream_prompt_tokens_cached_total", "counter", "Prompt tokens not computed again (kept by a session, or by the prefix cache).", m.cachedTokens)
	p("layerstream_prefix_cache_hits_total", "counter", "Requests whose prompt started with ids the cache still held (a session's, or the prefix cache's).", m.cacheHits)
	p("layerstream_generation_tokens_total", "counter", "Tokens generated.", m.generatedTokens)
	p("layerstream_draining", "gauge", "1 while the server shuts down.", boolInt(s.draining.Load()))
	m.ttft.write(w, "layerstream_time_to_first_token_seconds", "Time from a request's arrival to its first generated token.")
	m.duration.write(w, "layerstream_request_duration_seconds", "Time to answer a successful generation request.")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
