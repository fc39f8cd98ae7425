package hub

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeRepo is a repository served by fakeHub. Files ending in .safetensors are LFS files: their resolve URL
// redirects (302, absolute URL) to /cdn/<sha256>, with X-Linked-Etag and X-Linked-Size on the redirect, as the
// real Hub does. Other files are served directly with their git blob sha1 as ETag.
type fakeRepo struct {
	revs  map[string]string            // revision (branch/tag) → commit
	files map[string]map[string][]byte // commit → file name → content
	token string                       // non-empty: gated, file requests need "Bearer <token>"
}

// request is one request fakeHub saw.
type request struct {
	method, path, rangeHdr, auth string
}

// fakeHub imitates the Hub endpoints hub uses: the model metadata API, resolve (HEAD and GET) and a CDN path
// with Range support.
type fakeHub struct {
	t     *testing.T
	srv   *httptest.Server
	repos map[string]*fakeRepo

	mu       sync.Mutex
	requests []request
	cutOnce  map[string]int  // sha256 → the first CDN GET sends only this many bytes, then drops the connection
	corrupt  map[string]bool // sha256 → the CDN serves altered bytes
	cdnDelay time.Duration   // wait before answering a CDN GET
}

func newFakeHub(t *testing.T) *fakeHub {
	h := &fakeHub{t: t, repos: map[string]*fakeRepo{}, cutOnce: map[string]int{}, corrupt: map[string]bool{}}
	h.srv = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.srv.Close)
	return h
}

// addRepo adds repo id with one commit holding files, reachable as revision "main".
func (h *fakeHub) addRepo(id, commit string, files map[string][]byte) *fakeRepo {
	r := &fakeRepo{revs: map[string]string{"main": commit}, files: map[string]map[string][]byte{commit: files}}
	h.repos[id] = r
	return r
}

func (h *fakeHub) reqs() []request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]request(nil), h.requests...)
}

// count returns how many requests had the method and a path containing substr.
func (h *fakeHub) count(method, substr string) int {
	n := 0
	for _, r := range h.reqs() {
		if r.method == method && strings.Contains(r.path, substr) {
			n++
		}
	}
	return n
}

func (h *fakeHub) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, request{r.Method, r.URL.Path, r.Header.Get("Range"), r.Header.Get("Authorization")})
	h.mu.Unlock()
	p := r.URL.EscapedPath()
	switch {
	case strings.HasPrefix(p, "/api/models/"):
		h.serveAPI(w, r, strings.TrimPrefix(p, "/api/models/"))
	case strings.HasPrefix(p, "/cdn/"):
		h.serveCDN(w, r, strings.TrimPrefix(p, "/cdn/"))
	case strings.Contains(p, "/resolve/"):
		h.serveResolve(w, r, p)
	default:
		http.NotFound(w, r)
	}
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// lookup finds the repo and the commit for rev (a branch or a commit), answering the Hub's errors itself.
func (h *fakeHub) lookup(w http.ResponseWriter, id, rev string) (*fakeRepo, string, bool) {
	repo := h.repos[id]
	if repo == nil {
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
		return nil, "", false
	}
	commit, ok := repo.revs[rev]
	if !ok {
		if _, isCommit := repo.files[rev]; !isCommit {
			hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
			return nil, "", false
		}
		commit = rev
	}
	return repo, commit, true
}

func (h *fakeHub) serveAPI(w http.ResponseWriter, r *http.Request, rest string) {
	id, escRev, ok := strings.Cut(rest, "/revision/")
	rev, err := url.PathUnescape(escRev)
	if !ok || err != nil || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	repo, commit, ok := h.lookup(w, id, rev)
	if !ok {
		return
	}
	type sibling struct {
		RFilename string `json:"rfilename"`
	}
	var sib []sibling
	for name := range repo.files[commit] {
		sib = append(sib, sibling{name})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": id, "sha": commit, "siblings": sib, "gated": repo.token != ""})
}

func (h *fakeHub) serveResolve(w http.ResponseWriter, r *http.Request, p string) {
	id, rest, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/resolve/")
	escRev, escName, _ := strings.Cut(rest, "/")
	rev, err1 := url.PathUnescape(escRev)
	name, err2 := url.PathUnescape(escName)
	if err1 != nil || err2 != nil {
		http.NotFound(w, r)
		return
	}
	repo, commit, ok := h.lookup(w, id, rev)
	if !ok {
		return
	}
	if repo.token != "" {
		switch r.Header.Get("Authorization") {
		case "Bearer " + repo.token:
		case "":
			hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+id+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
			return
		default:
			hubError(w, http.StatusForbidden, "GatedRepo", "Access to model "+id+" is restricted and you are not in the authorized list.")
			return
		}
	}
	data, ok := repo.files[commit][name]
	if !ok {
		hubError(w, http.StatusNotFound, "EntryNotFound", name+" does not exist")
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if strings.HasSuffix(name, ".safetensors") {
		sum := sha256.Sum256(data)
		sha := hex.EncodeToString(sum[:])
		w.Header().Set("X-Linked-Etag", `"`+sha+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
		w.Header().Set("ETag", `W/"not-the-content-hash"`)
		w.Header().Set("Location", h.srv.URL+"/cdn/"+sha)
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+gitBlobSHA1(data)+`"`)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

func (h *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request, sha string) {
	data := h.blob(sha)
	if data == nil {
		http.NotFound(w, r)
		return
	}
	h.mu.Lock()
	cut, doCut := h.cutOnce[sha]
	delete(h.cutOnce, sha)
	if h.corrupt[sha] {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0xff
	}
	delay := h.cdnDelay
	h.mu.Unlock()
	time.Sleep(delay)
	if doCut && r.Method == http.MethodGet {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:cut])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // drop the connection mid-body
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

// blob finds an LFS file by its sha256 in any repo.
func (h *fakeHub) blob(sha string) []byte {
	for _, repo := range h.repos {
		for _, files := range repo.files {
			for _, data := range files {
				if s := sha256.Sum256(data); hex.EncodeToString(s[:]) == sha {
					return data
				}
			}
		}
	}
	return nil
}

func gitBlobSHA1(data []byte) string {
	s := sha1.New()
	fmt.Fprintf(s, "blob %d\x00", len(data))
	s.Write(data)
	return hex.EncodeToString(s.Sum(nil))
}

func sha256Hex(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}
