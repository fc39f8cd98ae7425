package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// defaultClient bounds connecting and waiting for response headers but not the body: a multi-gigabyte shard
// may take long, and a stalled body is caught by the downloader's stall timer instead.
var defaultClient = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	ForceAttemptHTTP2:     true,
	TLSHandshakeTimeout:   30 * time.Second,
	ResponseHeaderTimeout: 60 * time.Second,
	IdleConnTimeout:       90 * time.Second,
	MaxIdleConnsPerHost:   4,
}}

const userAgent = "layerstream/hub (Go)"

// invalidCredentials is the Hub's X-Error-Message for a token it does not know.
const invalidCredentials = "Invalid credentials in Authorization header"

// transient marks an error worth retrying: a dropped connection, a stalled body, a 5xx or 429 answer.
type transient struct{ error }

func (t transient) Unwrap() error { return t.error }

// repoInfo is the part of GET /api/models/{repo}/revision/{rev} that Resolve uses.
type repoInfo struct {
	SHA      string `json:"sha"`
	Siblings []struct {
		RFilename string `json:"rfilename"`
	} `json:"siblings"`
}

// fileMeta is what a HEAD on a file's resolve URL tells: the blob's etag (sha256 for LFS files), its size and
// the commit it was served from.
type fileMeta struct {
	name   string
	etag   string
	size   int64  // -1 when the Hub did not say
	commit string // the commit the file is downloaded from
}

// lfs reports whether the etag is a sha256 of the content, which the download is checked against.
func (m fileMeta) lfs() bool { return len(m.etag) == 64 && isHex(m.etag) }

func (d *downloader) newRequest(ctx context.Context, method, u string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	req.Header.Set("User-Agent", userAgent)
	// identity: sizes and Range offsets must refer to the stored bytes, not a gzip stream.
	req.Header.Set("Accept-Encoding", "identity")
	if d.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.opts.Token)
	}
	return req, nil
}

// do sends req with client; a failure to get any answer is ErrNoNetwork (transient), a cancelled ctx is
// returned as the context's error.
func (d *downloader) do(client *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := client.Do(req)
	if err == nil {
		return resp, nil
	}
	if cerr := req.Context().Err(); cerr != nil {
		if cause := context.Cause(req.Context()); cause != nil {
			return nil, cause
		}
		return nil, cerr
	}
	return nil, transient{fmt.Errorf("%w: %w", ErrNoNetwork, err)} // err names the method and URL
}

// repoInfo resolves the revision to a commit and lists the repository's files.
func (d *downloader) repoInfo(ctx context.Context) (*repoInfo, error) {
	u := fmt.Sprintf("%s/api/models/%s/revision/%s", d.opts.Endpoint, d.id, url.PathEscape(d.opts.Revision))
	req, err := d.newRequest(ctx, http.MethodGet, u)
	if err != nil {
		return nil, err
	}
	resp, err := d.do(d.opts.Client, req)
	if err != nil {
		if errors.Is(err, ErrNoNetwork) {
			hint := ""
			if dir, cerr := d.repo.cachedSnapshot(d.opts.Revision); cerr == nil {
				hint = fmt.Sprintf("; %s is in the cache at %s: set HF_HUB_OFFLINE=1 (or pass --offline) to use it without network", d.id, dir)
			}
			return nil, fmt.Errorf("%w%s (see TROUBLESHOOTING.md, \"No network or offline\")", err, hint)
		}
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, d.statusError(resp, "")
	}
	var info repoInfo
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&info); err != nil {
		return nil, fmt.Errorf("%s: reading the Hub's answer from %s: %w", d.id, u, err)
	}
	if !isCommit(info.SHA) {
		return nil, fmt.Errorf("%s: the Hub's answer from %s has sha %q, expected a 40-hex-digit commit", d.id, u, info.SHA)
	}
	return &info, nil
}

// resolveURL is {endpoint}/{repo}/resolve/{revision}/{file}, the revision escaped as one path segment.
func (d *downloader) resolveURL(rev, name string) string {
	segs := strings.Split(name, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return fmt.Sprintf("%s/%s/resolve/%s/%s", d.opts.Endpoint, d.id, url.PathEscape(rev), strings.Join(segs, "/"))
}

// headFile reads a file's metadata. Like huggingface_hub it follows only redirects that stay on the same origin
// (a renamed repo): the redirect to the CDN carries the X-Linked-* headers and must not be followed.
func (d *downloader) headFile(ctx context.Context, commit, name string) (fileMeta, error) {
	req, err := d.newRequest(ctx, http.MethodHead, d.resolveURL(commit, name))
	if err != nil {
		return fileMeta{}, err
	}
	client := *d.opts.Client
	client.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return fmt.Errorf("stopped after %d redirects", len(via))
		}
		if prev := via[len(via)-1].URL; r.URL.Scheme == prev.Scheme && r.URL.Host == prev.Host {
			return nil
		}
		return http.ErrUseLastResponse
	}
	resp, err := d.do(&client, req)
	if err != nil {
		return fileMeta{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return fileMeta{}, d.statusError(resp, name)
	}
	// Download from the commit asked for, so every file of the snapshot comes from the same one.
	m := fileMeta{name: name, size: -1, commit: commit}
	if c := resp.Header.Get("X-Repo-Commit"); c != "" && c != commit {
		slog.Debug("hub: X-Repo-Commit differs from the requested commit", "file", name, "asked", commit, "got", c)
	}
	m.etag = normalizeEtag(resp.Header.Get("X-Linked-Etag"))
	if m.etag == "" {
		m.etag = normalizeEtag(resp.Header.Get("ETag"))
	}
	if n, err := strconv.ParseInt(resp.Header.Get("X-Linked-Size"), 10, 64); err == nil && n >= 0 {
		m.size = n
	} else if resp.StatusCode < 300 && resp.ContentLength >= 0 {
		m.size = resp.ContentLength // a redirect's Content-Length is its own body's, not the file's
	}
	if m.etag == "" || strings.ContainsAny(m.etag, `/\`) || m.etag == "." || m.etag == ".." {
		return fileMeta{}, fmt.Errorf("%s: %s: the Hub sent no usable ETag (got %q) for %s; cannot place the file in the cache",
			d.id, name, m.etag, req.URL.Redacted())
	}
	return m, nil
}

// normalizeEtag strips the weak marker and quotes, as huggingface_hub does.
func normalizeEtag(e string) string {
	return strings.Trim(strings.TrimPrefix(strings.TrimSpace(e), "W/"), `"`)
}

// statusError turns a Hub error answer into an error that names the repo, revision or file and says what to
// do; file is "" for the metadata API call.
func (d *downloader) statusError(resp *http.Response, file string) error {
	code := resp.Header.Get("X-Error-Code")
	msg := resp.Header.Get("X-Error-Message")
	if msg == "" {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var j struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &j) == nil && j.Error != "" {
			msg = j.Error
		} else {
			msg = strings.TrimSpace(string(body))
		}
	}
	detail := "HTTP " + strconv.Itoa(resp.StatusCode)
	if msg != "" {
		detail += ": " + msg
	}
	what := d.id
	if file != "" {
		what = fmt.Sprintf("%s: file %s", d.id, file)
	}
	page := d.opts.Endpoint + "/" + d.id
	switch {
	case code == "GatedRepo", resp.StatusCode == http.StatusForbidden,
		resp.StatusCode == http.StatusUnauthorized && (file != "" || msg == invalidCredentials):
		if d.opts.Token == "" {
			return fmt.Errorf("%w: %s (%s): accept the licence on the model page %s and set HF_TOKEN (or --token) "+
				"to an access token of that account (see TROUBLESHOOTING.md, \"Gated or private repository\")",
				ErrGated, what, detail, page)
		}
		return fmt.Errorf("%w: %s (%s): the token was refused or its account has no access: accept the licence on "+
			"the model page %s with the token's account, or check HF_TOKEN / --token (see TROUBLESHOOTING.md, "+
			"\"Gated or private repository\")", ErrGated, what, detail, page)
	case code == "RevisionNotFound":
		return fmt.Errorf("%w: revision %q of repository %s (%s): check the branch, tag or commit on %s",
			ErrNotFound, d.opts.Revision, d.id, detail, page)
	case code == "EntryNotFound":
		return fmt.Errorf("%w: %s at revision %s (%s)", ErrNotFound, what, d.opts.Revision, detail)
	case code == "RepoNotFound", resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%w: repository %s on %s (%s), and no local folder has that name: check the spelling; if "+
			"it is private or gated, set HF_TOKEN to a token with access (see TROUBLESHOOTING.md, \"Gated or private "+
			"repository\")", ErrNotFound, d.id, d.opts.Endpoint, detail)
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %s at revision %s (%s)", ErrNotFound, what, d.opts.Revision, detail)
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return transient{fmt.Errorf("%s: the Hub at %s answered %s; try again later", what, d.opts.Endpoint, detail)}
	}
	return fmt.Errorf("%s: unexpected answer from %s: %s", what, d.opts.Endpoint, detail)
}
