package queue

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/layerstream/layerstream/batchfile"
)

// output is submit's results file: one JSON object per line of the batch file, in input order, appended and
// synced as results come, so that after an interruption it holds whole lines (a torn last line is cut off when
// resumed) and every line it holds is on disk.
type output struct {
	f    *os.File
	path string
	w    *bufio.Writer
	n    int // lines written
}

// openOutput creates path, or with resume opens it and checks that its lines are results of ids' first lines
// (a torn last line is cut off). Without resume an existing path is refused.
func openOutput(path string, ids []string, resume bool) (*output, error) {
	if !resume {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("--out %s exists: give --resume to continue it, or remove it", path)
		}
		if err != nil {
			return nil, fmt.Errorf("--out: %w", err)
		}
		return &output{f: f, path: path, w: bufio.NewWriter(f)}, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--out: %w", err)
	}
	n, size, err := readOutput(f, path, ids)
	if err == nil {
		err = f.Truncate(size)
	}
	if err == nil {
		_, err = f.Seek(size, 0)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &output{f: f, path: path, w: bufio.NewWriter(f), n: n}, nil
}

// readOutput reads the whole lines of a results file, checking each one's id against ids, and returns how many
// there are and the size of the file up to the end of the last.
func readOutput(f *os.File, path string, ids []string) (n int, size int64, err error) {
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return 0, 0, fmt.Errorf("--out %s: %w", path, err)
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break // torn: written up to here when the run ended
		}
		var r batchfile.Result
		if err := json.Unmarshal(b[:i], &r); err != nil {
			return 0, 0, fmt.Errorf("--out %s line %d: %w", path, n+1, err)
		}
		if n >= len(ids) || r.ID != ids[n] {
			return 0, 0, fmt.Errorf("--out %s line %d: result %q is not this batch file's line %d (is the file the output of another batch file or settings?)", path, n+1, r.ID, n+1)
		}
		n++
		size += int64(i + 1)
		b = b[i+1:]
	}
	return n, size, nil
}

// write appends one result.
func (o *output) write(r *batchfile.Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	o.w.Write(b)
	if err := o.w.WriteByte('\n'); err != nil {
		return fmt.Errorf("--out %s: %w", o.path, err)
	}
	o.n++
	return nil
}

// sync flushes what was written and syncs it to disk.
func (o *output) sync() error {
	if err := o.w.Flush(); err != nil {
		return fmt.Errorf("--out %s: %w", o.path, err)
	}
	if err := o.f.Sync(); err != nil {
		return fmt.Errorf("--out %s: %w", o.path, err)
	}
	return nil
}

// close syncs and closes the file.
func (o *output) close() error {
	return errors.Join(o.sync(), o.f.Close())
}
