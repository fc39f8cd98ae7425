package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/layerstream/layerstream/engine"
)

// dialect is one of the APIs the generation endpoints speak (OpenAI's, Ollama's, Anthropic's): it reads a
// request body and writes answers, streams and errors in its own shapes. What lies between (admission, the
// engine's batch loop, health checks, metrics) is the same for all of them: Server.generate.
type dialect interface {
	// parse reads a request body; maxTokens bounds the tokens a request may ask for.
	parse(body []byte, maxTokens int) (*request, error)
	// idPrefix starts the ids of its responses.
	idPrefix() string
	// errorBody is the JSON body of a refused or failed request.
	errorBody(e *requestError) any
	// answer is the JSON body of a response not streamed: one result per choice (OpenAI's n; one for the other
	// dialects); tokens are each choice's generated tokens when the request asked for logprobs.
	answer(g *generation, res []*engine.TextResult, tokens [][]*engine.TextToken) any
	// events returns the writer of a streamed response's events.
	events(g *generation) eventWriter
}

// eventWriter turns a streamed generation into the events of its dialect.
type eventWriter interface {
	// ndjson: events are JSON lines (Ollama); otherwise server-sent events.
	ndjson() bool
	// open is what precedes the first text; chunk what a piece of text of choice i adds (none: nothing to
	// send); end what closes a finished stream (one result per choice), fail what closes a failed one.
	open() []event
	chunk(i int, c engine.TextChunk) []event
	end(res []*engine.TextResult) []event
	fail(e *requestError) []event
}

// event is one message of a stream: its JSON data, with an SSE event name when the dialect names its events
// (Anthropic's), or a raw data line (OpenAI's "[DONE]").
type event struct {
	name string
	data any
	raw  string
}

// writeErrorAs answers a refused or failed request in d's error shape.
func writeErrorAs(w http.ResponseWriter, d dialect, e *requestError) {
	if e.status == http.StatusTooManyRequests || e.status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.status, d.errorBody(e))
}

// eventTimeout bounds the writing of one event: a client that stops reading (without closing the connection)
// does not hold its handler for ever.
const eventTimeout = time.Minute

// writeEvent writes one event in the framing of ndjson or server-sent events.
func writeEvent(w http.ResponseWriter, ndjson bool, ev event) error {
	data := []byte(ev.raw)
	if ev.raw == "" {
		var err error
		if data, err = json.Marshal(ev.data); err != nil {
			return err
		}
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(eventTimeout)) // not every writer has deadlines
	var err error
	switch {
	case ndjson:
		_, err = fmt.Fprintf(w, "%s\n", data)
	case ev.name != "":
		_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, data)
	default:
		_, err = fmt.Fprintf(w, "data: %s\n\n", data)
	}
	return err
}
