package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rawRequest sends head (a request line and headers, without the blank line ending them) and the start of a
// body, then waits: a slow or stalled client. It returns the answer's status (0: none) and whether the server
// closed the connection, within limit. A nil body sends the headers without their end.
func rawRequest(t *testing.T, addr, head string, body *string, limit time.Duration) (status int, closed bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(limit))
	if body == nil {
		fmt.Fprintf(conn, "%s\r\nHost: %s\r\n", head, addr)
	} else {
		fmt.Fprintf(conn, "%s\r\nHost: %s\r\n\r\n%s", head, addr, *body)
	}
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, nil); err == nil {
		status = resp.StatusCode
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	_, err = br.ReadByte()
	return status, err == io.EOF
}

// TestSlowBodies (issue #36 case 1): a request whose body arrives partly, or not at all, holds its connection
// no longer than the read timeout: answered 408 and closed; and a refusal that does not read the body (no API
// key, no route, another method, shutting down) closes the connection at once rather than waiting for the body.
func TestSlowBodies(t *testing.T) {
	s, ts := newTestServer(t, Config{APIKey: "k", ReadTimeout: 300 * time.Millisecond})
	addr := strings.TrimPrefix(ts.URL, "http://")
	partial := "Content-Type: application/json\r\nContent-Length: 100"
	for _, c := range []struct {
		name, head string
		want       int
		within     time.Duration
	}{
		{"a partial body", "POST /v1/completions HTTP/1.1\r\nAuthorization: Bearer k\r\n" + partial, 408, 2 * time.Second},
		{"no API key", "POST /v1/completions HTTP/1.1\r\n" + partial, 401, 200 * time.Millisecond},
		{"no route", "POST /v1/nothing HTTP/1.1\r\nAuthorization: Bearer k\r\n" + partial, 404, 200 * time.Millisecond},
		{"another method", "PUT /v1/completions HTTP/1.1\r\nAuthorization: Bearer k\r\n" + partial, 405, 200 * time.Millisecond},
		{"a chunked body", "POST /api/chat HTTP/1.1\r\nAuthorization: Bearer k\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked", 408, 2 * time.Second},
	} {
		start := time.Now()
		status, closed := rawRequest(t, addr, c.head, ptr(`{"prompt": `), c.within+2*time.Second)
		if d := time.Since(start); status != c.want || !closed || d > c.within {
			t.Errorf("%s: status %d, closed %v after %v; want %d and closed within %v", c.name, status, closed, d.Round(time.Millisecond), c.want, c.within)
		}
	}
	// A body still arriving when the server drains is cut at once: answered 503, not waited for.
	reading := make(chan struct{}, 1)
	s.reading = func() { reading <- struct{}{} }
	type result struct {
		status int
		closed bool
	}
	cut := make(chan result, 1)
	go func() {
		status, closed := rawRequest(t, addr, "POST /v1/completions HTTP/1.1\r\nAuthorization: Bearer k\r\n"+partial, ptr(`{`), 3*time.Second)
		cut <- result{status, closed}
	}()
	<-reading
	s.reading = nil
	s.Drain()
	start := time.Now()
	if r := <-cut; r.status != 503 || !r.closed || time.Since(start) > 200*time.Millisecond {
		t.Errorf("a body arriving while the server drains: status %d, closed %v after %v; want 503 and closed at once", r.status, r.closed, time.Since(start))
	}
	start = time.Now()
	if status, closed := rawRequest(t, addr, "POST /v1/completions HTTP/1.1\r\nAuthorization: Bearer k\r\n"+partial, ptr(`{`), 3*time.Second); status != 503 || !closed || time.Since(start) > 200*time.Millisecond {
		t.Errorf("while draining: status %d, closed %v after %v; want 503 and closed at once", status, closed, time.Since(start))
	}
}

// TestSlowHeaders: Serve closes a connection whose headers do not all arrive within the read timeout.
func TestSlowHeaders(t *testing.T) {
	s, _ := newTestServer(t, Config{ReadTimeout: 300 * time.Millisecond})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln, time.Second) }()
	start := time.Now()
	if _, closed := rawRequest(t, ln.Addr().String(), "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json", nil, 5*time.Second); !closed {
		t.Errorf("headers never ended: the connection is still open after %v", time.Since(start))
	} else if d := time.Since(start); d > 2*time.Second {
		t.Errorf("headers never ended: closed after %v, want the read timeout", d)
	}
	cancel()
	if err := <-served; err != nil {
		t.Error(err)
	}
}

func ptr[T any](v T) *T { return &v }

// TestAdmissionBeforeBody (issue #36 case 2): a request is admitted before its body is read, parsed and
// tokenized: with MaxInFlight 2, of 8 concurrent large bodies 2 are read while the others are answered 429
// without being read.
func TestAdmissionBeforeBody(t *testing.T) {
	s, ts := newTestServer(t, Config{MaxInFlight: 2})
	hold := make(chan struct{})
	var admitted, reading atomic.Int32
	s.admitted = func() { admitted.Add(1); <-hold }
	s.reading = func() { reading.Add(1) }
	body := `{"prompt": "` + strings.Repeat("a ", 32<<10) + `", "max_tokens": 1}`
	var wg sync.WaitGroup
	codes := make(chan int, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil { // the server closed the connection before the client sent all of the body
				codes <- 0
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	refused := 0
	for refused < 6 {
		select {
		case code := <-codes:
			if code != http.StatusTooManyRequests && code != 0 {
				t.Fatalf("a request past MaxInFlight: %d, want 429", code)
			}
			refused++
		case <-time.After(10 * time.Second):
			t.Fatalf("%d requests refused, want 6", refused)
		}
	}
	if n, r := admitted.Load(), reading.Load(); n != 2 || r != 0 {
		t.Errorf("%d requests admitted, %d bodies read; want 2 admitted, none read while they are held", n, r)
	}
	close(hold)
	wg.Wait()
	for range 2 {
		if code := <-codes; code != http.StatusBadRequest { // the prompt overflows the context
			t.Errorf("an admitted request: %d, want 400", code)
		}
	}
	if r := reading.Load(); r != 2 {
		t.Errorf("%d bodies read, want the 2 admitted", r)
	}
}

// TestLongStreamsOutliveTheReadTimeout: the read deadline bounds the reading of a request, not its answer: a
// stream generated for longer than the read timeout ends normally, and the pipeline view's stream (a GET) stays
// open past it.
func TestLongStreamsOutliveTheReadTimeout(t *testing.T) {
	s, ts := newTestServer(t, Config{ReadTimeout: 200 * time.Millisecond})
	s.token = func() { time.Sleep(20 * time.Millisecond) } // 30 tokens: 0.6 s
	resp, err := http.Post(ts.URL+"/v1/completions", "application/json", strings.NewReader(`{"prompt": "Once upon a time", "max_tokens": 30, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	events, done := readStream(t, resp.Body)
	resp.Body.Close()
	if _, finish, _ := streamText(events); !done || finish != "length" {
		t.Errorf("a stream longer than the read timeout: done %v, finish %q", done, finish)
	}
	resp, err = http.Get(ts.URL + "/api/pipeline")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ended := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); ended <- err }()
	select {
	case err := <-ended:
		t.Errorf("/api/pipeline ended after less than 4 read timeouts: %v", err)
	case <-time.After(800 * time.Millisecond):
	}
}
