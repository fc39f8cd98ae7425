package server

import (
	"embed"
	"io/fs"
	"net/http"
)

// The chat page (GET /): one HTML page, its script and style, embedded in the binary, using nothing from
// elsewhere (it works offline). It talks to /api/info, /v1/chat/completions (streamed) and /api/pipeline with
// the API key the user gives it, kept in the tab's sessionStorage.
//
//go:embed page
var pageFiles embed.FS

// pageSecurity are the headers of the page's files: its own scripts and styles only, no framing, no sniffing.
var pageSecurity = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Content-Type-Options": "nosniff",
	"Referrer-Policy":        "no-referrer",
}

// pageHandler serves the page at / and its files under /page/.
func pageHandler() (index, files http.Handler) {
	sub, err := fs.Sub(pageFiles, "page")
	if err != nil {
		panic(err) // the embedded folder is part of the binary
	}
	static := http.FileServerFS(sub)
	secure := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for k, v := range pageSecurity {
				w.Header().Set(k, v)
			}
			w.Header().Set("Cache-Control", "no-cache")
			h.ServeHTTP(w, r)
		})
	}
	index = secure(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, sub, "index.html")
	}))
	return index, secure(http.StripPrefix("/page/", static))
}

// isPage reports whether a path is the page or one of its files: served without the API key (they hold no
// data; the page asks for the key).
func isPage(path string) bool {
	return path == "/" || (len(path) > len("/page/") && path[:len("/page/")] == "/page/")
}
