// Package server is an HTTP server over an engine.Engine speaking three APIs: OpenAI's (/v1/chat/completions
// and /v1/completions, streamed with server-sent events or not, /v1/models), Ollama's (/api/chat and
// /api/generate, streamed as JSON lines or not, /api/tags, /api/show, /api/version) and Anthropic's Messages
// (/v1/messages); besides, /health, /metrics (Prometheus text format), a chat page at / with a live view of the
// pipeline (/api/info, /api/pipeline: the profiler's events as server-sent events).
//
// Concurrent requests share the engine's batch loop (engine.Engine.Generate): each joins the running batch at
// the next step and leaves when done, so N clients cost about one pass over the layers per step. Requests past
// the batch wait in the engine's queue; past Config.MaxQueue more they are answered 429. A client that
// disconnects cancels its sequence at the next step (counted as StatusClientClosedRequest, not as an error). Bodies, max_tokens and the request fields are bounded and
// checked (request.go lists the field policy).
package server

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/profiler"
)

// Config configures a Server.
type Config struct {
	// Engine generates; its Options.MaxBatch bounds the sequences computed together.
	Engine *engine.Engine
	// ModelID is the model's name in /v1/models and in requests' "model" (any other name is refused).
	ModelID string
	// MaxInFlight bounds the requests being generated or waiting; one more is answered 429 (default 64).
	MaxInFlight int
	// MaxBodyBytes bounds a request body; a larger one is answered 413 (default 4 MiB).
	MaxBodyBytes int64
	// ReadTimeout bounds the reading of a request: its headers (Serve's http.Server.ReadHeaderTimeout), then its
	// body, each must arrive within it, else the connection closes (a body late: 408). Default 30 s.
	ReadTimeout time.Duration
	// MaxTokens bounds max_tokens, and is the default of chat requests that give none (default 2048; the
	// model's context bounds it too). Completions requests default to 16 tokens, as OpenAI's.
	MaxTokens int
	// Host is the address the server listens on (serve --host): a request's Host naming it, on the server's
	// port, is the server's own, as the loopback names are. AllowedHosts are more names it may be reached by,
	// on any port ("*": any name); others are answered 421 (policy.go).
	Host         string
	AllowedHosts []string
	// AllowedOrigins are the origins (scheme://host[:port]) of the web pages that may use the API besides the
	// server's own (the chat page); "*": any. Their requests get CORS headers; requests from other pages, 403.
	AllowedOrigins []string
	// APIKey, when set, is required as "Authorization: Bearer KEY" (or Anthropic's "x-api-key: KEY") on every
	// path but /health and the chat page's files.
	APIKey string
	// Profiler, the engine's (engine.Options.Profiler), feeds the chat page's live view of the pipeline
	// (/api/pipeline); nil: no such view. profiler.NewLive costs next to nothing while no page watches.
	Profiler *profiler.Profiler
	// Strict ends a request whose health checks see a problem (activations out of range, degenerate output...)
	// with a 500 naming it, as generate --strict does; by default such problems are logged with the request's
	// id, once per kind. Logits holding NaN or ±Inf end a request either way.
	Strict bool
	// Logger receives one line per request (default slog.Default()).
	Logger *slog.Logger
}

// DefaultReadTimeout is Config.ReadTimeout's default.
const DefaultReadTimeout = 30 * time.Second

// Server serves the API. Use it as an http.Handler.
type Server struct {
	cfg      Config
	mux      *http.ServeMux
	inFlight atomic.Int64
	draining atomic.Bool
	drained  chan struct{} // closed by Drain: long-lived streams (/api/pipeline) end
	drain    sync.Once
	bodies   sync.Map // the *http.ResponseController of each request whose body is being read
	metrics  metrics
	created  int64
	facts    modelFacts

	// Test hooks: admitted runs once a generation request holds its place, before its body is read; reading
	// as its body starts to be read; token runs on the engine's goroutine for every chunk.
	admitted func()
	reading  func()
	token    func()
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Engine == nil {
		return nil, errors.New("server: no engine")
	}
	if cfg.ModelID == "" {
		return nil, errors.New("server: no model id")
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 64
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 4 << 20
	}
	if cfg.MaxTokens <= 0 {
		cfg.MaxTokens = 2048
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = DefaultReadTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), created: time.Now().Unix(), drained: make(chan struct{})}
	tok, err := cfg.Engine.Tokenizer()
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.facts = s.readFacts()
	s.routes(tok.HasChatTemplate())
	return s, nil
}

// routes registers every endpoint; template reports whether the model has a chat template (Ollama's generate
// renders its prompt with it).
func (s *Server) routes(template bool) {
	gen := func(d dialect) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { s.generate(w, r, d) }
	}
	s.mux.HandleFunc("POST /v1/chat/completions", gen(openAI{chat: true}))
	s.mux.HandleFunc("POST /v1/completions", gen(openAI{}))
	s.mux.HandleFunc("POST /v1/messages", gen(anthropic{}))
	s.mux.HandleFunc("POST /api/chat", gen(ollama{chat: true, template: template}))
	s.mux.HandleFunc("POST /api/generate", gen(ollama{template: template}))
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("GET /v1/models/{id...}", s.model)
	s.mux.HandleFunc("GET /api/tags", s.ollamaTags)
	s.mux.HandleFunc("POST /api/show", s.ollamaShow)
	s.mux.HandleFunc("GET /api/version", s.ollamaVersionInfo)
	s.mux.HandleFunc("GET /api/info", s.info)
	s.mux.HandleFunc("GET /api/pipeline", s.pipeline)
	s.mux.HandleFunc("GET /health", s.health)
	s.mux.HandleFunc("GET /metrics", s.serveMetrics)
	index, files := pageHandler()
	s.mux.Handle("GET /{$}", index)
	s.mux.Handle("GET /page/", files)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d := dialectFor(r.URL.Path)
		if m := routeMethod(r.URL.Path); m != "" {
			w.Header().Set("Allow", m)
			writeErrorAs(w, d, &requestError{status: http.StatusMethodNotAllowed, msg: fmt.Sprintf("%s %s: this route takes %s", r.Method, r.URL.Path, m), code: "method_not_allowed"})
			return
		}
		writeErrorAs(w, d, &requestError{status: http.StatusNotFound, msg: fmt.Sprintf("no route %s %s (see /v1/models, /v1/chat/completions, /v1/completions, /v1/messages, /api/chat, /api/generate, /api/tags, /health, /metrics)", r.Method, r.URL.Path), code: "not_found"})
	})
}

// dialectFor is the API whose error shape answers a path's refusals before its handler runs (a wrong key, no
// route): Ollama's under /api/ (but for the chat page's /api/info and /api/pipeline), Anthropic's for
// /v1/messages, OpenAI's elsewhere.
func dialectFor(path string) dialect {
	switch {
	case path == "/api/info" || path == "/api/pipeline":
		return openAI{}
	case strings.HasPrefix(path, "/api/"):
		return ollama{}
	case path == "/v1/messages":
		return anthropic{}
	}
	return openAI{}
}

// Drain makes the server refuse new generations (503) and report unhealthy, while those in flight go on, and
// ends the pipeline views' streams and the reading of bodies still arriving (answered 503), which would
// otherwise hold the shutdown: the first step of a graceful shutdown.
func (s *Server) Drain() {
	s.draining.Store(true)
	s.drain.Do(func() { close(s.drained) })
	s.bodies.Range(func(rc, _ any) bool {
		rc.(*http.ResponseController).SetReadDeadline(time.Now())
		return true
	})
}

// ServeHTTP checks the API key, serves the request and counts it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	// A body must arrive within ReadTimeout, whatever the answer: a client sending it slowly, or not at all,
	// holds its connection no longer (readBody ends the deadline once the body is in, for long streams). A
	// request without one gets no deadline: net/http's read watching for the client leaving would fail at it,
	// ending a long stream (/api/pipeline).
	if r.ContentLength != 0 {
		http.NewResponseController(w).SetReadDeadline(start.Add(s.cfg.ReadTimeout))
	}
	body := &trackedBody{ReadCloser: r.Body}
	r = r.WithContext(r.Context()) // a copy, whose body is tracked: net/http's own request keeps its body
	r.Body = body
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK, body: body, hasBody: r.ContentLength != 0}
	if e := s.policyRefusal(r); e != nil {
		writeErrorAs(rec, dialectFor(r.URL.Path), e)
	} else if !s.cors(rec, r) {
		s.mux.ServeHTTP(rec, r)
	}
	endpoint := r.URL.Path
	switch {
	case routeMethod(endpoint) == "" && !isPage(endpoint):
		endpoint = "other"
	case strings.HasPrefix(endpoint, "/v1/models/"):
		endpoint = "/v1/models/{id}"
	case isPage(endpoint):
		endpoint = "page"
	}
	s.metrics.request(endpoint, rec.status, time.Since(start))
	s.cfg.Logger.Debug("request", "method", r.Method, "path", r.URL.Path, "status", rec.status, "seconds", fmt.Sprintf("%.3f", time.Since(start).Seconds()))
}

// authorized reports whether a request carries the API key: as "Authorization: Bearer KEY" (the scheme's name
// in any case, as RFC 7235 says), or as Anthropic's clients send it, "x-api-key: KEY".
func (s *Server) authorized(r *http.Request) bool {
	key, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		key = r.Header.Get("X-Api-Key")
	}
	return key != "" && subtle.ConstantTimeCompare([]byte(key), []byte(s.cfg.APIKey)) == 1
}

// bearer returns the credentials of an Authorization header of the Bearer scheme, whose name is
// case-insensitive (RFC 7235 section 2.1), separated from them by one or more spaces.
func bearer(header string) (string, bool) {
	scheme, cred, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(cred, " "), true
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting down"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// modelJSON is a model in /v1/models: OpenAI's fields and Anthropic's (type, display_name, created_at,
// lifecycle, max_input_tokens), which both APIs' clients read from this one path.
type modelJSON struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`

	Type           string `json:"type"`
	DisplayName    string `json:"display_name"`
	CreatedAt      string `json:"created_at"`
	Lifecycle      string `json:"lifecycle"`
	MaxInputTokens int    `json:"max_input_tokens"`
	MaxTokens      int    `json:"max_tokens"`
}

func (s *Server) modelInfo() modelJSON {
	return modelJSON{ID: s.cfg.ModelID, Object: "model", Created: s.created, OwnedBy: "layerstream",
		Type: "model", DisplayName: s.cfg.ModelID, CreatedAt: time.Unix(s.created, 0).UTC().Format(time.RFC3339),
		Lifecycle: "active", MaxInputTokens: s.facts.context, MaxTokens: s.cfg.MaxTokens}
}

// models answers GET /v1/models in OpenAI's list shape, with Anthropic's paging fields (one page).
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []modelJSON{s.modelInfo()},
		"has_more": false, "first_id": s.cfg.ModelID, "last_id": s.cfg.ModelID})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("id") != s.cfg.ModelID {
		writeError(w, s.unknownModel(r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, s.modelInfo())
}

// knownModel reports whether a request's model names this server's (or names none): its id, or, as Ollama's
// clients write names, its id with the tag ":latest".
func (s *Server) knownModel(name string) bool {
	return name == "" || name == s.cfg.ModelID || name == s.cfg.ModelID+":latest"
}

func (s *Server) unknownModel(name string) *requestError {
	return &requestError{status: http.StatusNotFound, param: "model", code: "model_not_found",
		msg: fmt.Sprintf("the model %q does not exist: this server serves %q (GET /v1/models)", name, s.cfg.ModelID)}
}

// readBody reads a request body bounded by MaxBodyBytes, which must arrive within ReadTimeout of the request's
// start (ServeHTTP's deadline: a body late is answered 408, and its connection closes); then it ends the
// deadline, which would otherwise cancel a long stream (net/http's read watching for the client leaving fails at
// it; hence not http.Server.ReadTimeout either).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	rc := http.NewResponseController(w)
	s.bodies.Store(rc, nil)
	defer s.bodies.Delete(rc)
	if s.draining.Load() { // Drain may have passed the requests being read before this one joined them
		rc.SetReadDeadline(time.Now())
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var tooBig *http.MaxBytesError
	var netErr net.Error
	timeout := errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
	switch {
	case errors.As(err, &tooBig):
		return nil, &requestError{status: http.StatusRequestEntityTooLarge, code: "request_too_large",
			msg: fmt.Sprintf("the request body exceeds %d bytes (serve --max-body)", s.cfg.MaxBodyBytes)}
	case timeout && s.draining.Load():
		return nil, &requestError{status: http.StatusServiceUnavailable, msg: "the server is shutting down", code: "shutting_down"}
	case timeout:
		return nil, &requestError{status: http.StatusRequestTimeout, code: "request_timeout",
			msg: fmt.Sprintf("the request body did not arrive within %v (serve --read-timeout)", s.cfg.ReadTimeout)}
	case err != nil:
		return nil, &requestError{status: http.StatusBadRequest, msg: "reading the request body: " + err.Error()}
	}
	rc.SetReadDeadline(time.Time{})
	return body, nil
}

// trackedBody is a request body that remembers whether it was read to its end.
type trackedBody struct {
	io.ReadCloser
	eof bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// errorJSON is OpenAI's error body.
type errorJSON struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func newErrorJSON(e *requestError) errorJSON {
	var b errorJSON
	b.Error.Message = e.msg
	switch {
	case e.status == http.StatusTooManyRequests:
		b.Error.Type = "rate_limit_error"
	case e.status >= 500:
		b.Error.Type = "server_error"
	case e.status == http.StatusUnauthorized:
		b.Error.Type = "authentication_error"
	default:
		b.Error.Type = "invalid_request_error"
	}
	if e.param != "" {
		b.Error.Param = &e.param
	}
	if e.code != "" {
		b.Error.Code = &e.code
	}
	return b
}

// writeError answers a refused or failed request in OpenAI's error shape.
func writeError(w http.ResponseWriter, e *requestError) { writeErrorAs(w, openAI{}, e) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// statusRecorder remembers the status written, for metrics, and passes flushes through for streaming. An
// answer given before the request's body was read to its end (a refusal) closes the connection.
type statusRecorder struct {
	http.ResponseWriter
	status  int
	wrote   bool
	body    *trackedBody
	hasBody bool // the request has a body (Content-Length not 0)
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
		r.dropUnreadBody()
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.wrote = true
		r.dropUnreadBody()
	}
	return r.ResponseWriter.Write(b)
}

// dropUnreadBody closes the connection after the answer when the request's body was not read to its end:
// net/http would otherwise read what is left of it after the answer, as slowly as the client sends it. The read
// deadline passes at once, so that what net/http reads of it fails at once.
func (r *statusRecorder) dropUnreadBody() {
	if !r.hasBody || r.body == nil || r.body.eof {
		return
	}
	r.Header().Set("Connection", "close")
	http.NewResponseController(r.ResponseWriter).SetReadDeadline(time.Now())
}

func (r *statusRecorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// countAs makes /metrics and the request log count a request with status, whatever was sent (a stream its
// client abandoned after its 200: StatusClientClosedRequest).
func countAs(w http.ResponseWriter, status int) {
	if r, ok := w.(*statusRecorder); ok {
		r.status, r.wrote = status, true
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// StatusClientClosedRequest is the status a request is counted with (in /metrics and the request log) when
// its client disconnected before the answer: nginx's 499, not a server error. The client never sees it.
const StatusClientClosedRequest = 499

// errShuttingDown is the cause of the generations' cancellation when Serve's grace period ends; any other
// cancellation of a request's context is its client leaving.
var errShuttingDown = errors.New("the server is shutting down")

// cancelled reports whether err ended a generation because its request's context ended.
func cancelled(ctx context.Context, err error) bool {
	return ctx.Err() != nil && errors.Is(err, ctx.Err())
}

// Serve answers requests on ln until ctx ends, then shuts down gracefully: the listener closes and the server
// drains (new generations get 503, /health reports it), the requests in flight get grace to finish, then
// those left are cancelled (a stream ends with an error event, without [DONE]) and Serve returns.
func (s *Server) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	// Requests' contexts derive from generations: cancelling it ends every generation in flight.
	generations, cancelGenerations := context.WithCancelCause(context.Background())
	defer cancelGenerations(errShuttingDown)
	hs := &http.Server{Handler: s, ReadHeaderTimeout: s.cfg.ReadTimeout, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return generations }}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	s.cfg.Logger.Info("shutting down: finishing the requests in flight", "timeout", grace)
	s.Drain()
	shutdown, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(shutdown); errors.Is(err, context.DeadlineExceeded) {
		s.cfg.Logger.Warn("shutdown timeout: cancelling the requests still in flight", "requests", s.inFlight.Load())
		cancelGenerations(errShuttingDown)
		end, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := hs.Shutdown(end); err != nil {
			hs.Close()
		}
	}
	return nil
}

// routeMethod is the method a route of the API takes ("" for a path that is none of them): the catch-all
// handler answers a known path asked with another method 405, not 404.
func routeMethod(path string) string {
	switch path {
	case "/v1/chat/completions", "/v1/completions", "/v1/messages", "/api/chat", "/api/generate", "/api/show":
		return http.MethodPost
	case "/v1/models", "/health", "/metrics", "/api/tags", "/api/version", "/api/info", "/api/pipeline":
		return http.MethodGet
	}
	if strings.HasPrefix(path, "/v1/models/") {
		return http.MethodGet
	}
	return ""
}

// generationEndpoints are the paths whose successful requests /metrics times.
var generationEndpoints = []string{"/v1/chat/completions", "/v1/completions", "/v1/messages", "/api/chat", "/api/generate"}
