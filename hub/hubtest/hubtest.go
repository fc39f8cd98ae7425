// Package hubtest serves an imitation of the Hugging Face Hub for tests: the model metadata API
// (GET /api/models/{repo}/revision/{rev}), resolve URLs (HEAD and GET, with the Hub's X-Error-Code answers for
// missing repos, revisions and files and for gated repos) and a CDN path with Range support that LFS files
// redirect to. Point hub.Options.Endpoint (or HF_ENDPOINT) at Server.URL.
package hubtest

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
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Repo is a repository served by Server. Files ending in .safetensors are LFS files: their resolve URL
// redirects (302) to /cdn/<sha256> on another origin (this server as localhost rather than 127.0.0.1), with
// X-Linked-Etag and X-Linked-Size on the redirect, as the real Hub does. Other files are served directly with
// their git blob sha1 as ETag.
type Repo struct {
	Revs  map[string]string            // revision (branch/tag) → commit
	Files map[string]map[string][]byte // commit → file name → content
	Token string                       // non-empty: gated, file requests need "Authorization: Bearer <Token>"
}

// Request is one request the Server answered. Path is as sent, still escaped.
type Request struct {
	Method, Path, Range, Authorization string
}

// Server imitates the Hub endpoints package hub uses. Add repositories before the first request, and leave
// a file's bytes unchanged once requested.
type Server struct {
	*httptest.Server
	Repos map[string]*Repo // repo id → repository

	mu       sync.Mutex
	requests []Request
	lfsSHA   map[string]string  // repo@commit/file → sha256, computed on first request
	cdn      map[string][]byte  // sha256 → content of LFS files requested so far
	faults   map[string][]fault // sha256 → what goes wrong with the next CDN GETs, one each, in order
	corrupt  map[string]bool    // sha256 → the CDN serves altered bytes
	cdnDelay time.Duration      // wait before answering a CDN GET
}

// NewServer starts a Server, closed when the test ends.
func NewServer(t testing.TB) *Server {
	h := &Server{Repos: map[string]*Repo{}, lfsSHA: map[string]string{}, cdn: map[string][]byte{},
		faults: map[string][]fault{}, corrupt: map[string]bool{}}
	h.Server = httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(h.Close)
	return h
}

// fault is one misbehaviour of a CDN GET: after sending n bytes of the body, drop the connection (cut) or
// stop sending until the client gives up (stall); or answer status instead of the file.
type fault struct {
	cut, stall bool
	n          int
	status     int
}

func (h *Server) addFault(sha256 string, f fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.faults[sha256] = append(h.faults[sha256], f)
}

// CutOnce makes the next CDN GET of the LFS file with this sha256 send only n bytes and drop the connection.
func (h *Server) CutOnce(sha256 string, n int) { h.addFault(sha256, fault{cut: true, n: n}) }

// StallOnce makes the next CDN GET of the LFS file send n bytes, then nothing until the client hangs up.
func (h *Server) StallOnce(sha256 string, n int) { h.addFault(sha256, fault{stall: true, n: n}) }

// FailOnce makes the next CDN GET of the LFS file answer with status (e.g. 503) instead.
func (h *Server) FailOnce(sha256 string, status int) { h.addFault(sha256, fault{status: status}) }

// Corrupt makes the CDN serve the LFS file with this sha256 with one byte altered.
func (h *Server) Corrupt(sha256 string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.corrupt[sha256] = true
}

// SetCDNDelay makes every CDN answer wait d first.
func (h *Server) SetCDNDelay(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cdnDelay = d
}

// AddRepo adds repository id with one commit (40 hex digits) holding files, reachable as revision "main".
func (h *Server) AddRepo(id, commit string, files map[string][]byte) *Repo {
	r := &Repo{Revs: map[string]string{"main": commit}, Files: map[string]map[string][]byte{commit: files}}
	h.Repos[id] = r
	return r
}

// Requests returns the requests answered so far, in order.
func (h *Server) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.requests...)
}

// Count returns how many requests had the method and a path containing substr.
func (h *Server) Count(method, substr string) int {
	n := 0
	for _, r := range h.Requests() {
		if r.Method == method && strings.Contains(r.Path, substr) {
			n++
		}
	}
	return n
}

func (h *Server) serve(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, Request{r.Method, r.URL.EscapedPath(), r.Header.Get("Range"), r.Header.Get("Authorization")})
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
func (h *Server) lookup(w http.ResponseWriter, id, rev string) (*Repo, string, bool) {
	repo := h.Repos[id]
	if repo == nil {
		hubError(w, http.StatusUnauthorized, "RepoNotFound", "Repository not found")
		return nil, "", false
	}
	commit, ok := repo.Revs[rev]
	if !ok {
		if _, isCommit := repo.Files[rev]; !isCommit {
			hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
			return nil, "", false
		}
		commit = rev
	}
	return repo, commit, true
}

func (h *Server) serveAPI(w http.ResponseWriter, r *http.Request, rest string) {
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
	for name := range repo.Files[commit] {
		sib = append(sib, sibling{name})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": id, "sha": commit, "siblings": sib, "gated": repo.Token != ""})
}

func (h *Server) serveResolve(w http.ResponseWriter, r *http.Request, p string) {
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
	if repo.Token != "" {
		switch r.Header.Get("Authorization") {
		case "Bearer " + repo.Token:
		case "":
			hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to model "+id+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
			return
		default:
			hubError(w, http.StatusForbidden, "GatedRepo", "Access to model "+id+" is restricted and you are not in the authorized list.")
			return
		}
	}
	data, ok := repo.Files[commit][name]
	if !ok {
		hubError(w, http.StatusNotFound, "EntryNotFound", name+" does not exist")
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if strings.HasSuffix(name, ".safetensors") {
		sha := h.lfsBlob(id+"@"+commit+"/"+name, data)
		w.Header().Set("X-Linked-Etag", `"`+sha+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(data)))
		w.Header().Set("ETag", `W/"not-the-content-hash"`)
		// Another origin, like the Hub's CDN: clients must not follow it on HEAD nor send the token there.
		w.Header().Set("Location", strings.Replace(h.URL, "127.0.0.1", "localhost", 1)+"/cdn/"+sha)
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+GitBlobSHA1(data)+`"`)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

func (h *Server) serveCDN(w http.ResponseWriter, r *http.Request, sha string) {
	data := h.blob(sha)
	if data == nil {
		http.NotFound(w, r)
		return
	}
	h.mu.Lock()
	var f fault
	faulty := r.Method == http.MethodGet && len(h.faults[sha]) > 0
	if faulty {
		f = h.faults[sha][0]
		h.faults[sha] = h.faults[sha][1:]
	}
	if h.corrupt[sha] {
		data = append([]byte(nil), data...)
		data[len(data)/2] ^= 0xff
	}
	delay := h.cdnDelay
	h.mu.Unlock()
	time.Sleep(delay)
	switch {
	case !faulty:
	case f.status != 0:
		hubError(w, f.status, "", http.StatusText(f.status))
		return
	default:
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
		w.Write(data[:f.n])
		w.(http.Flusher).Flush()
		if f.stall {
			<-r.Context().Done()
		}
		panic(http.ErrAbortHandler) // drop the connection mid-body
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

// lfsBlob returns the sha256 of an LFS file (key names its repo, commit and path), hashing it only on the first
// request, and makes the file available on the CDN path.
func (h *Server) lfsBlob(key string, data []byte) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	sha, ok := h.lfsSHA[key]
	if !ok {
		sha = SHA256(data)
		h.lfsSHA[key] = sha
		h.cdn[sha] = data
	}
	return sha
}

// blob finds an LFS file on the CDN by its sha256.
func (h *Server) blob(sha string) []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cdn[sha]
}

// GitBlobSHA1 is the git object id of data, the ETag the Hub gives a file not stored in LFS.
func GitBlobSHA1(data []byte) string {
	s := sha1.New()
	fmt.Fprintf(s, "blob %d\x00", len(data))
	s.Write(data)
	return hex.EncodeToString(s.Sum(nil))
}

// SHA256 is the hex sha256 of data, the etag the Hub gives an LFS file.
func SHA256(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// ReadDir returns the regular files directly inside dir (a local model folder) by name, ready for AddRepo.
func ReadDir(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		files[e.Name()] = b
	}
	return files, nil
}
