package hub

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/filelock"
)

// Retry policy for a blob download; variables so tests can shorten the waits.
var (
	maxAttempts  = 5
	retryDelay   = time.Second      // times the attempt number
	stallTimeout = 60 * time.Second // no body bytes for this long counts as a dropped connection
)

var errStalled = errors.New("no data received for too long")

// downloader fetches one repository revision into the cache.
type downloader struct {
	opts Options
	repo cacheRepo
	id   string
	buf  []byte
	prog *downloadProgress
}

func (d *downloader) run(ctx context.Context) (string, error) {
	info, err := d.repoInfo(ctx)
	if err != nil {
		return "", err
	}
	commit := info.SHA
	have := make(map[string]bool, len(info.Siblings))
	for _, s := range info.Siblings {
		have[s.RFilename] = true
	}
	if !have[configFile] {
		return "", fmt.Errorf("%w: %s (revision %s, commit %s) has no %s; is it a transformers model repository?",
			ErrNotFound, d.id, d.opts.Revision, commit, configFile)
	}
	names := []string{configFile}
	for _, f := range optionalFiles {
		if have[f] {
			names = append(names, f)
		}
	}
	switch {
	case have[singleWeights]:
		names = append(names, singleWeights)
	case have[weightsIndex]:
		names = append(names, weightsIndex)
	default:
		return "", d.noSafetensorsError(commit, info)
	}
	d.buf = make([]byte, 1<<20)
	d.prog = newProgress(d.opts.Progress)
	if err := d.fetch(ctx, commit, names); err != nil {
		return "", err
	}
	snapshot := d.repo.snapshotDir(commit)
	if !have[singleWeights] {
		b, err := os.ReadFile(filepath.Join(snapshot, weightsIndex))
		if err != nil {
			return "", fmt.Errorf("%s: %w", d.id, err)
		}
		shards, err := parseIndex(b)
		if err != nil {
			return "", fmt.Errorf("%s (commit %s): %w", d.id, commit, err)
		}
		for _, s := range shards {
			if !have[s] {
				return "", fmt.Errorf("%w: %s (commit %s): %s names shard %s, which the repository does not have",
					ErrNotFound, d.id, commit, weightsIndex, s)
			}
		}
		if err := d.fetch(ctx, commit, shards); err != nil {
			return "", err
		}
	}
	if err := d.repo.writeRef(d.opts.Revision, commit); err != nil {
		return "", fmt.Errorf("%s: recording revision %s: %w", d.id, d.opts.Revision, err)
	}
	slog.Debug("hub: model resolved", "repo", d.id, "revision", d.opts.Revision, "commit", commit, "dir", snapshot)
	return snapshot, nil
}

func (d *downloader) noSafetensorsError(commit string, info *repoInfo) error {
	var other []string
	for _, s := range info.Siblings {
		for _, ext := range []string{".bin", ".pt", ".pth", ".ckpt", ".gguf", ".onnx", ".h5", ".msgpack"} {
			if strings.HasSuffix(s.RFilename, ext) {
				other = append(other, s.RFilename)
			}
		}
	}
	found := "no weight files"
	if len(other) > 0 {
		found = "only " + strings.Join(other, ", ")
	}
	return fmt.Errorf("%w: %s (revision %s, commit %s) has no %s or %s (%s); layerstream reads safetensors only: "+
		"convert the checkpoint with transformers' save_pretrained(..., safe_serialization=True)",
		ErrNotFound, d.id, d.opts.Revision, commit, singleWeights, weightsIndex, found)
}

// fetch places names into snapshots/<commit>: files already there are kept, blobs already cached are linked,
// the rest is downloaded after checking that the disk has room for it.
func (d *downloader) fetch(ctx context.Context, commit string, names []string) error {
	snapshot := d.repo.snapshotDir(commit)
	var todo []fileMeta
	for _, name := range names {
		if !safeRepoPath(name) {
			return fmt.Errorf("%s: file name %q leaves the snapshot folder", d.id, name)
		}
		if fileExists(filepath.Join(snapshot, filepath.FromSlash(name))) {
			continue
		}
		m, err := d.headFile(ctx, commit, name)
		if err != nil {
			return err
		}
		todo = append(todo, m)
	}
	if len(todo) == 0 {
		return nil
	}
	blobs := filepath.Join(d.repo.dir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return fmt.Errorf("%s: %w", d.id, err)
	}
	var need int64
	for _, m := range todo {
		if m.size > 0 && !fileExists(d.repo.blobPath(m.etag)) {
			need += max(0, m.size-fileSize(d.repo.blobPath(m.etag)+".incomplete"))
		}
	}
	if err := checkSpace(blobs, need); err != nil {
		return fmt.Errorf("%s: %w", d.id, err)
	}
	d.prog.addTotal(need)
	for _, m := range todo {
		if err := d.fetchBlob(ctx, m); err != nil {
			return fmt.Errorf("download %s: %s: %w", d.id, m.name, err)
		}
		if err := d.repo.link(commit, m.name, m.etag); err != nil {
			return fmt.Errorf("%s: linking %s into snapshot %s: %w", d.id, m.name, commit, err)
		}
	}
	return nil
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// freeSpace returns the bytes available to this user on dir's file system; a variable so tests can fake a full disk.
var freeSpace = statfsFree

func checkSpace(dir string, need int64) error {
	if need <= 0 {
		return nil
	}
	free, err := freeSpace(dir)
	if err != nil {
		slog.Debug("hub: cannot read free disk space", "dir", dir, "err", err)
		return nil
	}
	if free < need {
		return fmt.Errorf("%w: the download needs %s in %s but only %s is free; free some space or point HF_HUB_CACHE "+
			"(or HF_HOME) at a larger disk (see TROUBLESHOOTING.md, \"Disk full during split\")", ErrNoSpace, bytesize.Format(need), dir, bytesize.Format(free))
	}
	return nil
}

// fetchBlob downloads m into blobs/<etag> unless it is there already, holding blobs/<etag>.lock meanwhile.
// The bytes go to blobs/<etag>.incomplete, resumed across attempts and runs, and are renamed into place only
// once their size and (for LFS files) sha256 match.
func (d *downloader) fetchBlob(ctx context.Context, m fileMeta) error {
	blob := d.repo.blobPath(m.etag)
	if fileExists(blob) {
		return nil
	}
	// huggingface_hub (Python) flocks .locks/models--org--name/<etag>.lock around the same blob: take that lock
	// too, so a Python download and ours never append to one .incomplete file.
	for _, l := range []struct {
		path   string
		remove bool
	}{
		{filepath.Join(filepath.Dir(d.repo.dir), ".locks", filepath.Base(d.repo.dir), m.etag+".lock"), false},
		{blob + ".lock", true},
	} {
		if err := os.MkdirAll(filepath.Dir(l.path), 0o755); err != nil {
			return err
		}
		unlock, err := filelock.Lock(ctx, l.path, l.remove, func() {
			slog.Info("hub: waiting for another download of the same file", "file", m.name, "lock", l.path)
		})
		if err != nil {
			return err
		}
		defer unlock()
	}
	if fileExists(blob) {
		return nil
	}
	incomplete := blob + ".incomplete"
	for attempt := 1; ; attempt++ {
		err := d.getOnce(ctx, m, incomplete)
		if err == nil {
			break
		}
		var t transient
		if !errors.As(err, &t) || attempt == maxAttempts || ctx.Err() != nil {
			return err
		}
		slog.Warn("hub: download interrupted, resuming", "file", m.name, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retryDelay * time.Duration(attempt)):
		}
	}
	if err := os.Rename(incomplete, blob); err != nil {
		return fmt.Errorf("placing %s: %w", blob, err)
	}
	return nil
}

// getOnce brings path up to the full content of m with one GET (a Range request when part of it is there
// already) and verifies it. A transient error leaves the bytes received so far for the next attempt; a hash
// mismatch removes the file.
func (d *downloader) getOnce(ctx context.Context, m fileMeta, path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	h := sha256.New()
	fi, err := f.Stat()
	have := int64(0)
	if err == nil {
		have = fi.Size()
		if m.size >= 0 && have > m.size {
			have, err = 0, restart(f, h)
		} else {
			// Hash the part already there, leaving the offset at its end.
			_, err = io.CopyBuffer(h, io.LimitReader(f, have), d.buf)
		}
	}
	if err == nil && (m.size < 0 || have < m.size) {
		have, err = d.getBody(ctx, m, f, h, have)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) && !errors.Is(err, ErrNoSpace) {
			err = fmt.Errorf("%w: disk full while writing %s: %w", ErrNoSpace, path, err)
		}
		return err
	}
	if m.size >= 0 && have < m.size {
		return transient{fmt.Errorf("%w: %s: the connection ended after %d of %d bytes", ErrNoNetwork, m.name, have, m.size)}
	}
	if m.size >= 0 && have > m.size {
		os.Remove(path)
		return transient{fmt.Errorf("%s: got %d bytes, the Hub said %d; restarting", m.name, have, m.size)}
	}
	if m.lfs() {
		if sum := hex.EncodeToString(h.Sum(nil)); sum != m.etag {
			os.Remove(path)
			return fmt.Errorf("%w: %s: the downloaded bytes have sha256 %s but the Hub's etag is %s; nothing was "+
				"placed in the cache, run again to download it afresh", ErrChecksum, m.name, sum, m.etag)
		}
	}
	return nil
}

func restart(f *os.File, h hash.Hash) error {
	h.Reset()
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.Seek(0, io.SeekStart)
	return err
}

// getBody requests the bytes from offset have on and appends them to f and h; it returns the new length.
func (d *downloader) getBody(ctx context.Context, m fileMeta, f *os.File, h hash.Hash, have int64) (int64, error) {
	reqCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(stallTimeout, func() { cancel(errStalled) })
	defer stall.Stop()

	req, err := d.newRequest(reqCtx, http.MethodGet, d.resolveURL(m.commit, m.name))
	if err != nil {
		return have, err
	}
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	resp, err := d.do(d.opts.Client, req)
	if err != nil {
		return have, d.stallOr(reqCtx, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if start, ok := rangeStart(resp.Header.Get("Content-Range")); !ok || start != have {
			return 0, transient{fmt.Errorf("%s: asked for bytes from %d, the server sent Content-Range %q; restarting",
				m.name, have, resp.Header.Get("Content-Range"))}.restartWith(f, h)
		}
	case http.StatusOK:
		if have > 0 {
			if err := restart(f, h); err != nil {
				return 0, err
			}
			have = 0
		}
	case http.StatusRequestedRangeNotSatisfiable:
		return 0, transient{fmt.Errorf("%s: the server cannot resume at byte %d; restarting", m.name, have)}.restartWith(f, h)
	default:
		return have, d.statusError(resp, m.name)
	}
	d.prog.beginFile(m.name, m.size, have)
	defer d.prog.endFile()
	for {
		n, rerr := resp.Body.Read(d.buf)
		if n > 0 {
			stall.Reset(stallTimeout)
			if _, werr := f.Write(d.buf[:n]); werr != nil {
				if errors.Is(werr, syscall.ENOSPC) {
					return have, fmt.Errorf("%w: disk full while writing %s after %s of %s; free some space and run "+
						"again, the download resumes where it stopped (see TROUBLESHOOTING.md, \"Disk full during split\"): %w", ErrNoSpace, f.Name(), bytesize.Format(have),
						bytesize.Format(m.size), werr)
				}
				return have, fmt.Errorf("writing %s: %w", f.Name(), werr)
			}
			h.Write(d.buf[:n])
			have += int64(n)
			d.prog.add(int64(n))
		}
		if rerr == io.EOF {
			return have, nil
		}
		if rerr != nil {
			if ctx.Err() != nil {
				return have, ctx.Err()
			}
			if context.Cause(reqCtx) == nil {
				rerr = transient{fmt.Errorf("%w: reading %s after %d bytes: %w", ErrNoNetwork, m.name, have, rerr)}
			}
			return have, d.stallOr(reqCtx, rerr)
		}
	}
}

// stallOr reports a request cancelled by the stall timer as a transient network error.
func (d *downloader) stallOr(reqCtx context.Context, err error) error {
	if errors.Is(context.Cause(reqCtx), errStalled) {
		return transient{fmt.Errorf("%w: %w after %s", ErrNoNetwork, errStalled, stallTimeout)}
	}
	return err
}

// restartWith empties the partial file so the next attempt starts from byte 0.
func (t transient) restartWith(f *os.File, h hash.Hash) error {
	if err := restart(f, h); err != nil {
		return err
	}
	return t
}

// rangeStart parses the first byte position of a Content-Range header ("bytes 100-199/200").
func rangeStart(cr string) (int64, bool) {
	rest, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return 0, false
	}
	start, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(start, 10, 64)
	return n, err == nil
}
