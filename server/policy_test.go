package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// do sends a request with the given Host (empty: the URL's) and headers, returning the status and the answer's
// headers.
func do(t *testing.T, method, url, host, body string, headers ...string) (int, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// TestBrowserPolicy (issue #36 case 3): a web page of another site cannot drive a key-less loopback server.
// Host must be one of the server's names on its port (DNS rebinding: 421), a request from a page of another
// origin is refused (403) unless --allowed-origins lists it (then with CORS headers, its preflight answered
// without the key), and the generation endpoints take JSON bodies only (a form's or text/plain: 415). The chat
// page's own requests (same origin) pass.
func TestBrowserPolicy(t *testing.T) {
	_, ts := newTestServer(t, Config{Host: "127.0.0.1", AllowedHosts: []string{"my.box"}, AllowedOrigins: []string{"https://app.example"}})
	port := ts.URL[strings.LastIndex(ts.URL, ":")+1:]
	comp := ts.URL + "/v1/completions"
	body := `{"prompt": "Once", "max_tokens": 2}`
	json := []string{"Content-Type", "application/json"}
	for _, c := range []struct {
		name, method, url, host, body string
		headers                       []string
		want                          int
	}{
		{"loopback IP", "GET", ts.URL + "/v1/models", "", "", nil, 200},
		{"localhost", "GET", ts.URL + "/v1/models", "localhost:" + port, "", nil, 200},
		{"[::1]", "GET", ts.URL + "/v1/models", "[::1]:" + port, "", nil, 200},
		{"a rebound name", "GET", ts.URL + "/v1/models", "evil.example:" + port, "", nil, 421},
		{"a rebound name, POST", "POST", comp, "attacker.test:" + port, body, json, 421},
		{"another port", "GET", ts.URL + "/v1/models", "127.0.0.1:1", "", nil, 421},
		{"no port", "GET", ts.URL + "/v1/models", "localhost", "", nil, 421},
		{"an allowed name", "GET", ts.URL + "/v1/models", "my.box:443", "", nil, 200},
		{"/health, any name", "GET", ts.URL + "/health", "evil.example", "", nil, 200},
		{"the page's own origin", "POST", comp, "", body, append([]string{"Origin", ts.URL}, json...), 200},
		{"another origin", "POST", comp, "", body, append([]string{"Origin", "http://evil.example"}, json...), 403},
		{"another origin, GET", "GET", ts.URL + "/metrics", "", "", []string{"Origin", "http://evil.example"}, 403},
		{"origin null", "POST", comp, "", body, append([]string{"Origin", "null"}, json...), 403},
		{"an allowed origin", "POST", comp, "", body, append([]string{"Origin", "https://app.example"}, json...), 200},
		{"text/plain", "POST", comp, "", body, []string{"Content-Type", "text/plain"}, 415},
		{"a form", "POST", ts.URL + "/api/chat", "", body, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"multipart", "POST", ts.URL + "/v1/messages", "", body, []string{"Content-Type", "multipart/form-data; boundary=x"}, 415},
		{"no Content-Type", "POST", comp, "", body, nil, 415},
		{"JSON with a charset", "POST", comp, "", body, []string{"Content-Type", "application/json; charset=utf-8"}, 200},
	} {
		code, h := do(t, c.method, c.url, c.host, c.body, c.headers...)
		if code != c.want {
			t.Errorf("%s: %d, want %d", c.name, code, c.want)
		}
		if cors := h.Get("Access-Control-Allow-Origin"); (cors != "") != (c.name == "an allowed origin") {
			t.Errorf("%s: Access-Control-Allow-Origin %q", c.name, cors)
		}
	}
}

// TestPreflight: an allowed origin's preflight is answered without the API key; another origin's is refused.
func TestPreflight(t *testing.T) {
	_, ts := newTestServer(t, Config{APIKey: "k", AllowedOrigins: []string{"https://app.example"}})
	code, h := do(t, "OPTIONS", ts.URL+"/v1/chat/completions", "", "", "Origin", "https://app.example", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "authorization, content-type")
	if code != 204 || h.Get("Access-Control-Allow-Origin") != "https://app.example" || !strings.Contains(h.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Errorf("preflight of an allowed origin: %d %v", code, h)
	}
	if code, _ := do(t, "OPTIONS", ts.URL+"/v1/chat/completions", "", "", "Origin", "https://evil.example", "Access-Control-Request-Method", "POST"); code != 403 {
		t.Errorf("preflight of another origin: %d, want 403", code)
	}
	if code, _ := do(t, "POST", ts.URL+"/v1/chat/completions", "", `{}`, "Origin", "https://app.example", "Content-Type", "application/json"); code != 401 {
		t.Errorf("an allowed origin without the key: %d, want 401", code)
	}
}

// TestHostOfAllInterfaces: a server listening on all interfaces (--host 0.0.0.0) answers a Host naming the
// address the request came in on, with its port, and no other name.
func TestHostOfAllInterfaces(t *testing.T) {
	s := &Server{cfg: Config{Host: "0.0.0.0"}}
	for _, c := range []struct {
		host string
		want bool
	}{{"192.168.1.5:8080", true}, {"192.168.1.6:8080", false}, {"192.168.1.5:9090", false}, {"box.lan:8080", false}, {"localhost:8080", true}} {
		r := httptest.NewRequest("GET", "/v1/models", nil)
		r.Host = c.host
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.ParseIP("192.168.1.5"), Port: 8080}))
		if got := s.hostAllowed(r); got != c.want {
			t.Errorf("Host %s: allowed %v, want %v", c.host, got, c.want)
		}
	}
}
