package hub

import (
	"fmt"
	"io"

	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/progress"
)

// downloadProgress draws one bar per file (internal/progress) followed by the overall share of this download.
// A nil *downloadProgress draws nothing.
type downloadProgress struct {
	w           io.Writer
	total, done int64 // overall bytes to fetch and fetched
	bar         *progress.Bar
}

func newProgress(w io.Writer) *downloadProgress {
	if w == nil {
		return nil
	}
	return &downloadProgress{w: w}
}

func (p *downloadProgress) addTotal(n int64) {
	if p != nil {
		p.total += n
	}
}

func (p *downloadProgress) beginFile(name string, size, have int64) {
	if p == nil {
		return
	}
	p.bar = progress.New(p.w, name, have)
	p.bar.Suffix = func() string {
		if p.total <= 0 {
			return ""
		}
		return fmt.Sprintf("all %3.0f%% of %s", 100*min(1, float64(p.done)/float64(p.total)), bytesize.Format(p.total))
	}
	p.bar.Update(have, size)
}

func (p *downloadProgress) add(n int64) {
	if p == nil {
		return
	}
	p.done += n
	p.bar.Add(n)
}

// endFile draws the file's last state and ends its line.
func (p *downloadProgress) endFile() {
	if p != nil {
		p.bar.Finish()
	}
}
