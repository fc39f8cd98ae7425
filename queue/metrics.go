package queue

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
)

// Metrics counts a worker's prompts, for /metrics (Prometheus text) and /health.
type Metrics struct {
	done, failures, redeliveries, naks, duplicates, inFlight atomic.Int64
	serving, draining                                        atomic.Bool
}

// Done is how many prompts the worker answered (its result stored and the prompt acknowledged).
func (m *Metrics) Done() int64 { return m.done.Load() }

// Redeliveries is how many prompts it received that had been delivered before (to a worker that died, stopped
// or failed to store their result).
func (m *Metrics) Redeliveries() int64 { return m.redeliveries.Load() }

// Naks is how many prompts it gave back to the queue unfinished.
func (m *Metrics) Naks() int64 { return m.naks.Load() }

// InFlight is how many prompts it holds now.
func (m *Metrics) InFlight() int64 { return m.inFlight.Load() }

// Handler serves /health and /metrics (Prometheus text format). /health answers 200 {"status": "ok"} while the
// worker serves the queue (connected or reconnecting), 503 with "starting" before (the model loading, the
// streams being made) and "draining" once it is stopping: a Kubernetes probe's answer.
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		status := "ok"
		switch {
		case m.draining.Load():
			status = "draining"
		case !m.serving.Load():
			status = "starting"
		}
		if status != "ok" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(map[string]any{"status": status, "in_flight": m.inFlight.Load(), "done": m.done.Load()})
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		for _, c := range []struct {
			name, typ, help string
			v               int64
		}{
			{"layerstream_queue_prompts_done_total", "counter", "Prompts answered: result stored in the results stream, then the prompt acknowledged.", m.done.Load()},
			{"layerstream_queue_prompt_failures_total", "counter", "Prompts answered with stop_reason \"error\" (refused by the engine, or ended by an error), and messages dropped as not prompts.", m.failures.Load()},
			{"layerstream_queue_redeliveries_total", "counter", "Prompts received that had been delivered before (a worker died, stopped or failed to store the result).", m.redeliveries.Load()},
			{"layerstream_queue_naks_total", "counter", "Prompts given back to the queue unfinished (stopping, or the result could not be stored).", m.naks.Load()},
			{"layerstream_queue_duplicate_results_total", "counter", "Results JetStream dropped as duplicates of one already stored (a prompt generated twice).", m.duplicates.Load()},
			{"layerstream_queue_in_flight", "gauge", "Prompts held now: generating, or publishing their result.", m.inFlight.Load()},
		} {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %d\n", c.name, c.help, c.name, c.typ, c.name, c.v)
		}
	})
	return mux
}
