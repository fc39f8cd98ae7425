package hub

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws one bar line per file, redrawn in place with \r, plus the overall share of this download.
// A nil *progress draws nothing.
type progress struct {
	w           io.Writer
	total, done int64 // overall bytes to fetch and fetched

	name      string
	size, got int64 // current file: size (-1 unknown) and bytes present
	fresh     int64 // bytes of the current file received in this request
	begun     time.Time
	lastDraw  time.Time
	lastWidth int
}

const drawEvery = 200 * time.Millisecond

func newProgress(w io.Writer) *progress {
	if w == nil {
		return nil
	}
	return &progress{w: w}
}

func (p *progress) addTotal(n int64) {
	if p != nil {
		p.total += n
	}
}

func (p *progress) beginFile(name string, size, have int64) {
	if p == nil {
		return
	}
	p.name, p.size, p.got, p.fresh = name, size, have, 0
	p.begun = time.Now()
	p.draw()
}

func (p *progress) add(n int64) {
	if p == nil {
		return
	}
	p.got += n
	p.fresh += n
	p.done += n
	if time.Since(p.lastDraw) >= drawEvery {
		p.draw()
	}
}

// endFile draws the file's last state and ends its line.
func (p *progress) endFile() {
	if p == nil {
		return
	}
	p.draw()
	fmt.Fprintln(p.w)
	p.lastWidth = 0
}

func (p *progress) draw() {
	p.lastDraw = time.Now()
	const barWidth = 24
	frac := 0.0
	if p.size > 0 {
		frac = min(1, float64(p.got)/float64(p.size))
	}
	filled := int(frac * barWidth)
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", barWidth-filled)
	speed := ""
	if el := time.Since(p.begun).Seconds(); el > 0.05 {
		speed = humanBytes(int64(float64(p.fresh)/el)) + "/s"
	}
	line := fmt.Sprintf("%-36s %3.0f%% [%s] %9s / %-9s %11s", p.name, 100*frac, bar, humanBytes(p.got),
		humanBytes(p.size), speed)
	if p.total > 0 {
		line += fmt.Sprintf("  all %3.0f%% of %s", 100*min(1, float64(p.done)/float64(p.total)), humanBytes(p.total))
	}
	pad := ""
	if n := p.lastWidth - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	p.lastWidth = len(line)
	fmt.Fprint(p.w, "\r"+line+pad)
}

// humanBytes formats n as "12.3 MB" (powers of 1000, as the Hub's web pages show sizes); negative is "?".
func humanBytes(n int64) string {
	if n < 0 {
		return "?"
	}
	if n < 1000 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, unit := range []string{"kB", "MB", "GB", "TB"} {
		v /= 1000
		if v < 1000 || unit == "TB" {
			return fmt.Sprintf("%.1f %s", v, unit)
		}
	}
	return ""
}
