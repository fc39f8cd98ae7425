// Package progress draws progress bars: the project's one progress helper (split, download, the first-use
// split inside generate).
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/layerstream/layerstream/internal/bytesize"
)

// drawEvery bounds the redraws of a bar.
const drawEvery = 100 * time.Millisecond

// Bar is one line of progress in bytes (or another count: NewCount),
//
//	split            42% [============>                  ] 1.20 GB / 2.86 GB   850.0 MB/s  ETA 2s
//
// redrawn in place (carriage return) at most ten times a second on a terminal. On any other writer (a log
// file, a pipe) it writes only its final state, once, as a plain line. A nil *Bar draws nothing.
type Bar struct {
	w     io.Writer
	label string
	tty   bool
	// Suffix, when set, adds text after the bar (e.g. the share of a whole download).
	Suffix func() string

	start       time.Time
	base        int64 // bytes present when the bar began: not counted in the rate
	done, total int64
	last        time.Time
	width       int // of the last line drawn
	drawn       bool
	updated     bool // Update was called: there is something to show
	// unit, when not empty, counts things of that name instead of bytes (NewCount).
	unit string
}

// New starts a bar writing to w (nil: no bar) labelled label, with have bytes already done before it started
// (a resumed download), which the rate leaves out.
func New(w io.Writer, label string, have int64) *Bar {
	if w == nil {
		return nil
	}
	return &Bar{w: w, label: label, tty: IsTerminal(w), start: time.Now(), base: have, done: have, total: -1}
}

// NewCount starts a bar that counts things named unit ("tokens") instead of bytes.
func NewCount(w io.Writer, label, unit string) *Bar {
	b := New(w, label, 0)
	if b != nil {
		b.unit = unit
	}
	return b
}

// amount formats n in the bar's unit.
func (b *Bar) amount(n int64) string {
	if b.unit == "" {
		return bytesize.Format(n)
	}
	if n < 0 {
		return "?"
	}
	return fmt.Sprintf("%d", n)
}

// IsTerminal reports whether w is a terminal (a character device).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Update sets the bytes done of total (negative: unknown) and redraws when it is time.
func (b *Bar) Update(done, total int64) {
	if b == nil {
		return
	}
	b.done, b.total, b.updated = done, total, true
	if b.tty && (time.Since(b.last) >= drawEvery || (total >= 0 && done >= total)) {
		b.draw()
	}
}

// Add counts n more bytes done.
func (b *Bar) Add(n int64) { b.Update(b.done+n, b.total) }

// Finish draws the final state and ends the line; a bar that was never updated (the work failed before it
// began) draws nothing.
func (b *Bar) Finish() {
	if b == nil || !b.updated {
		return
	}
	b.draw()
	fmt.Fprintln(b.w)
}

func (b *Bar) draw() {
	now := time.Now()
	b.last, b.drawn = now, true
	const width = 30
	frac := 0.0
	if b.total > 0 {
		frac = min(1, float64(b.done)/float64(b.total))
	} else if b.total == 0 {
		frac = 1
	}
	n := int(frac * width)
	bar := strings.Repeat("=", n)
	if n < width {
		bar += ">" + strings.Repeat(" ", width-n-1)
	}
	rate, eta := "", ""
	if el := now.Sub(b.start).Seconds(); el > 0.05 {
		r := float64(b.done-b.base) / el
		if rate = bytesize.Format(int64(r)) + "/s"; b.unit != "" {
			rate = fmt.Sprintf("%.0f %s/s", r, b.unit)
		}
		if r > 0 && b.total > b.done {
			eta = "ETA " + time.Duration(float64(b.total-b.done)/r*float64(time.Second)).Round(time.Second).String()
		}
	}
	line := fmt.Sprintf("%-24s %3.0f%% [%s] %9s / %-9s %12s  %s", b.label, 100*frac, bar, b.amount(b.done),
		b.amount(b.total), rate, eta)
	if b.Suffix != nil {
		line += "  " + b.Suffix()
	}
	line = strings.TrimRight(line, " ")
	if !b.tty {
		b.w.Write([]byte(line)) // Finish ends the line
		return
	}
	pad := ""
	if k := b.width - len(line); k > 0 {
		pad = strings.Repeat(" ", k) // erase the end of a longer previous line
	}
	b.width = len(line)
	fmt.Fprint(b.w, "\r"+line+pad)
}
