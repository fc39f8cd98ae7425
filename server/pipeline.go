package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/layerstream/layerstream/profiler"
)

// Live pipeline view (GET /api/pipeline): the profiler's events as server-sent events, in batches.
const (
	pipelineBuffer    = 8192                   // events a subscriber holds before dropping
	pipelineBatch     = 100 * time.Millisecond // how often a batch is sent (when there are events)
	pipelineHeartbeat = 15 * time.Second       // a comment line while idle, to notice a client gone
)

// pipelineEvent is one profiler event as the page reads it: times in milliseconds from the profiler's start.
type pipelineEvent struct {
	Category profiler.Category `json:"c"`
	Step     int               `json:"s"`
	Layer    int               `json:"l"`
	Start    float64           `json:"t"`
	Dur      float64           `json:"d"`
	Bytes    int64             `json:"b,omitempty"`
}

// pipelineBatchJSON is one server-sent event: the events since the last, how many were dropped in all (the
// subscriber fell behind), and the batch loop's state (tokens: generated since the engine opened).
type pipelineBatchJSON struct {
	Events  []pipelineEvent `json:"events"`
	Dropped int64           `json:"dropped"`
	Active  int             `json:"active"`
	Queued  int             `json:"queued"`
	Steps   int64           `json:"steps"`
	Tokens  int64           `json:"tokens"`
}

// pipeline streams the engine's profiler events as they happen: a batch every pipelineBatch while there are
// any, until the client leaves or the server drains. The profiler drops events for a client that falls behind rather than making
// the engine wait.
func (s *Server) pipeline(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Profiler == nil {
		writeError(w, &requestError{status: http.StatusNotFound, code: "not_found",
			msg: "the pipeline view needs the engine's profiler (server.Config.Profiler; serve always gives one)"})
		return
	}
	sub := s.cfg.Profiler.Subscribe(pipelineBuffer)
	defer sub.Close()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if s.send(w, rc, event{data: s.pipelineBatch(nil, sub)}) != nil { // at once: the page sees the stream is up
		return
	}
	tick := time.NewTicker(pipelineBatch)
	defer tick.Stop()
	var batch []pipelineEvent
	idle := time.Now()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.drained:
			return
		case ev := <-sub.C:
			batch = append(batch, pipelineEvent{Category: ev.Category, Step: ev.Step, Layer: ev.Layer,
				Start: ms(ev.Start), Dur: ms(ev.Dur), Bytes: ev.Bytes})
			continue
		case <-tick.C:
		}
		var err error
		switch {
		case len(batch) > 0:
			err = s.send(w, rc, event{data: s.pipelineBatch(batch, sub)})
			batch, idle = batch[:0], time.Now()
		case time.Since(idle) > pipelineHeartbeat:
			_, err = fmt.Fprint(w, ": idle\n\n")
			if err == nil {
				err = rc.Flush()
			}
			idle = time.Now()
		}
		if err != nil {
			return
		}
	}
}

func (s *Server) pipelineBatch(events []pipelineEvent, sub *profiler.Subscription) pipelineBatchJSON {
	load := s.cfg.Engine.Load()
	if events == nil {
		events = []pipelineEvent{}
	}
	return pipelineBatchJSON{Events: events, Dropped: sub.Dropped(), Active: load.Active, Queued: load.Queued, Steps: load.Steps, Tokens: load.Tokens}
}

// send writes one server-sent event and flushes it.
func (s *Server) send(w http.ResponseWriter, rc *http.ResponseController, ev event) error {
	if err := writeEvent(w, false, ev); err != nil {
		return err
	}
	return rc.Flush()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// info answers GET /api/info, what the chat page shows of the model: its id, context length, layers, the
// bound of max_tokens and whether the pipeline view is available.
func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	f := s.facts
	writeJSON(w, http.StatusOK, map[string]any{"model": s.cfg.ModelID, "context_length": f.context, "max_tokens": s.cfg.MaxTokens,
		"family": f.family, "layers": f.layers, "hidden_size": f.hidden, "dtype": f.dtype, "pipeline": s.cfg.Profiler != nil})
}
