package server

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/layerstream/layerstream/internal/sections"
)

// Who may use the server from a web browser. A server without a key answers anyone who can reach its port,
// and any web page the user opens can send requests to 127.0.0.1; three checks keep pages of other sites out:
//   - Host: a page on a name the attacker controls that resolves to 127.0.0.1 (DNS rebinding) would be
//     same-origin with the server; its requests carry that name in Host, which must be one of the server's own
//     (the loopback names and Config.Host, on the server's port; Config.AllowedHosts). Else 421.
//   - Origin: a browser names the page sending a request (cross-origin, and every POST); it must be the
//     server's own (the chat page's) or one of Config.AllowedOrigins. Else 403.
//   - Content-Type: a form, or fetch without a preflight, can only send text/plain, form or multipart bodies;
//     the generation endpoints require JSON. Else 415.

// policyRefusal is the refusal of a request by those checks and the API key's, nil when it passes them.
func (s *Server) policyRefusal(r *http.Request) *requestError {
	path := r.URL.Path
	switch {
	case path != "/health" && !s.hostAllowed(r):
		return &requestError{status: http.StatusMisdirectedRequest, code: "host_not_allowed",
			msg: fmt.Sprintf("the Host %q is none of this server's names (127.0.0.1, localhost, [::1] or --host, with its port; serve --allowed-hosts adds more; see %s)", r.Host, sections.Anchor(sections.Server))}
	case !s.originAllowed(r):
		return &requestError{status: http.StatusForbidden, code: "origin_not_allowed",
			msg: fmt.Sprintf("requests from web pages of the origin %q are not allowed (serve --allowed-origins; see %s)", r.Header.Get("Origin"), sections.Anchor(sections.Server))}
	case r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "":
		return nil // a preflight, from an origin allowed: it carries no key (cors answers it)
	case s.cfg.APIKey != "" && path != "/health" && !isPage(path) && !s.authorized(r):
		return &requestError{status: http.StatusUnauthorized, code: "invalid_api_key",
			msg: "missing or wrong API key: send the header \"Authorization: Bearer KEY\" (or \"x-api-key: KEY\")"}
	case r.Method == http.MethodPost && routeMethod(path) == http.MethodPost && !isJSON(r.Header.Get("Content-Type")):
		return &requestError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
			msg: fmt.Sprintf("Content-Type %q: send the body as JSON, with \"Content-Type: application/json\" (see %s)", r.Header.Get("Content-Type"), sections.Anchor(sections.Server))}
	}
	return nil
}

// hostAllowed reports whether the request's Host names this server: a loopback name (127.0.0.1, localhost,
// [::1]), Config.Host or the address the request came in on (a server listening on 0.0.0.0 reached by its IP),
// on the port the request came in on; or a name of Config.AllowedHosts, on any port ("*": any name).
func (s *Server) hostAllowed(r *http.Request) bool {
	name, port, err := net.SplitHostPort(r.Host)
	if err != nil {
		name, port = r.Host, "80"
	}
	name = strings.ToLower(strings.TrimSuffix(strings.Trim(name, "[]"), "."))
	if name == "" {
		return false
	}
	for _, h := range s.cfg.AllowedHosts {
		if h == "*" || strings.EqualFold(strings.Trim(h, "[]"), name) {
			return true
		}
	}
	localIP, localPort := "", ""
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		localIP, localPort, _ = net.SplitHostPort(local.String())
	}
	ip := net.ParseIP(name)
	own := name == "localhost" || ip != nil && (ip.IsLoopback() || ip.Equal(net.ParseIP(localIP))) ||
		strings.EqualFold(name, strings.Trim(s.cfg.Host, "[]"))
	// Not served from a listener (a test's recorder): no port to compare.
	return own && (localPort == "" || port == localPort)
}

// originAllowed reports whether a request from a web page may be served: no Origin (not from a page), the
// server's own origin (Host already checked), or one of Config.AllowedOrigins ("*": any).
func (s *Server) originAllowed(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || s.ownOrigin(r, origin) {
		return true
	}
	return s.crossOriginAllowed(origin)
}

func (s *Server) ownOrigin(r *http.Request, origin string) bool {
	return strings.EqualFold(origin, "http://"+r.Host) || strings.EqualFold(origin, "https://"+r.Host)
}

func (s *Server) crossOriginAllowed(origin string) bool {
	return slices.ContainsFunc(s.cfg.AllowedOrigins, func(o string) bool {
		return o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin)
	})
}

// cors adds the CORS headers that let a page of an allowed other origin read the answer, and answers its
// preflight (OPTIONS with Access-Control-Request-Method), reporting whether it did.
func (s *Server) cors(w http.ResponseWriter, r *http.Request) (answered bool) {
	origin := r.Header.Get("Origin")
	if origin == "" || s.ownOrigin(r, origin) || !s.crossOriginAllowed(origin) {
		return false
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	if r.Method != http.MethodOptions || r.Header.Get("Access-Control-Request-Method") == "" {
		return false
	}
	h.Set("Access-Control-Allow-Methods", "GET, POST")
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key, Anthropic-Version")
	h.Set("Access-Control-Max-Age", "600")
	w.WriteHeader(http.StatusNoContent)
	return true
}

// isJSON reports whether a Content-Type is JSON's (application/json, or application/...+json).
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"))
}
