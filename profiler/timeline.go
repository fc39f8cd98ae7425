package profiler

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/layerstream/layerstream/internal/atomicfile"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/textout"
)

// Timeline geometry, in SVG user units (pixels).
const (
	tlWidth      = 1400.0
	tlLeft       = 120.0 // lane labels
	tlRight      = 24.0
	tlTop        = 78.0 // title, legend, step labels
	tlLaneHeight = 26.0
	tlLaneGap    = 6.0
	tlAxisHeight = 44.0
	tlCharWidth  = 6.2 // approximate width of one 10-px sans-serif digit
	tlMinBar     = 0.6 // bars narrower than this are widened so they stay visible
)

var categoryColors = map[Category]string{
	Tokenize:     "#8c564b",
	DiskRead:     "#1f77b4",
	Decode:       "#17becf",
	H2D:          "#9467bd",
	PrefetchWait: "#d62728",
	ExpertRead:   "#aec7e8",
	ExpertWait:   "#ff9896",
	Forward:      "#2ca02c",
	Sample:       "#ff7f0e",
}

func colorOf(c Category) string {
	if col, ok := categoryColors[c]; ok {
		return col
	}
	return "#7f7f7f"
}

// WriteTimelineSVG draws the recorded events as an SVG picture of the pipeline over time: one lane per category
// present (in pipeline order), one colored bar per event labelled with its layer number where wide enough, a
// thin line at the start of every token step, a time axis with ticks and a legend. Hovering a bar in a browser
// shows its step, layer, duration and bytes. The file is written atomically.
func (p *Profiler) WriteTimelineSVG(path string) error {
	if p == nil {
		return nil
	}
	events, wall := p.Events(), p.window()
	return atomicfile.Write(path, func(w io.Writer) error { return WriteTimeline(w, events, wall) })
}

// WriteTimeline writes the SVG timeline of events over a run window of length wall (see WriteTimelineSVG).
func WriteTimeline(w io.Writer, events []Event, wall time.Duration) error {
	tl := newTimeline(w, events, wall)
	tl.header(wall)
	tl.legend()
	tl.laneBackgrounds()
	tl.stepLines()
	tl.bars()
	tl.axis()
	tl.ew.Printf("</svg>\n")
	return tl.ew.Err
}

// timeline is one SVG timeline being written: its events, one lane per category present, and the span of time
// the plot's width shows.
type timeline struct {
	ew         *textout.Writer
	events     []Event
	lanes      []Category
	t0, t1     time.Duration
	plotW      float64
	scale      float64 // pixels per nanosecond
	plotBottom float64
}

// newTimeline lays out a timeline of events over [0, wall], widened to any event outside it.
func newTimeline(w io.Writer, events []Event, wall time.Duration) *timeline {
	tl := &timeline{ew: &textout.Writer{W: w}, events: events, t1: wall}
	for _, e := range events {
		if !slices.Contains(tl.lanes, e.Category) {
			tl.lanes = append(tl.lanes, e.Category)
		}
		tl.t0, tl.t1 = min(tl.t0, e.Start), max(tl.t1, e.End())
	}
	slices.SortFunc(tl.lanes, compareCategories)
	if tl.t1 <= tl.t0 {
		tl.t1 = tl.t0 + time.Millisecond
	}
	tl.plotW = tlWidth - tlLeft - tlRight
	tl.scale = tl.plotW / float64(tl.t1-tl.t0)
	tl.plotBottom = laneY(len(tl.lanes)) - tlLaneGap
	return tl
}

// x is where time t falls on the plot.
func (tl *timeline) x(t time.Duration) float64 { return tlLeft + float64(t-tl.t0)*tl.scale }

// laneY is the top of lane i.
func laneY(i int) float64 { return tlTop + float64(i)*(tlLaneHeight+tlLaneGap) }

// header writes the SVG's opening, its background and the title with the run's summary.
func (tl *timeline) header(wall time.Duration) {
	height := tl.plotBottom + tlAxisHeight
	tl.ew.Printf(`<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" `+
		`font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		tlWidth, height, tlWidth, height)
	tl.ew.Printf(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	s := Summarize(tl.events, wall)
	tl.ew.Printf(`<text x="%.0f" y="18" font-size="14" font-weight="bold">layerstream profile: wall %s, %d steps, `+
		`%s of %s overlapped across stages</text>`+"\n", tlLeft, esc(fmtDur(wall)), s.Steps, esc(fmtDur(s.Overlapped)),
		esc(fmtDur(s.Sum)))
}

// legend writes a swatch and the name of each lane's category.
func (tl *timeline) legend() {
	x := tlLeft
	for _, c := range tl.lanes {
		tl.ew.Printf(`<rect x="%.1f" y="28" width="12" height="12" fill="%s"/><text x="%.1f" y="38">%s</text>`+"\n",
			x, colorOf(c), x+16, esc(string(c)))
		x += 16 + float64(len(c))*7 + 18
	}
}

// laneBackgrounds writes each lane's background and label.
func (tl *timeline) laneBackgrounds() {
	for i, c := range tl.lanes {
		y := laneY(i)
		tl.ew.Printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f3f3f3"/>`+"\n", tlLeft, y, tl.plotW,
			tlLaneHeight)
		tl.ew.Printf(`<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n",
			tlLeft-8, y+tlLaneHeight/2, esc(string(c)))
	}
}

// stepLines writes a line where each step's first event starts, labelled where the label fits.
func (tl *timeline) stepLines() {
	stepStart := map[int]time.Duration{}
	for _, e := range tl.events {
		if st, ok := stepStart[e.Step]; !ok || e.Start < st {
			stepStart[e.Step] = e.Start
		}
	}
	steps := make([]int, 0, len(stepStart))
	for st := range stepStart {
		steps = append(steps, st)
	}
	slices.Sort(steps)
	lastLabel := math.Inf(-1)
	for _, st := range steps {
		x := tl.x(stepStart[st])
		label := "step " + strconv.Itoa(st)
		if st == 0 {
			label = "prefill"
		}
		top := tlTop // labelled steps' lines reach up to their label
		if x-lastLabel >= float64(len(label))*tlCharWidth+10 {
			tl.ew.Printf(`<text x="%.1f" y="%.1f" font-size="10" fill="#333">%s</text>`+"\n", x+2, tlTop-4, label)
			lastLabel, top = x, tlTop-14
		}
		tl.ew.Printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#555" stroke-width="0.6" `+
			`stroke-dasharray="3,3"/>`+"\n", x, top, x, tl.plotBottom)
	}
}

// bars writes each event as a bar in its lane. Runs of bars too narrow to see apart are merged into one, so long
// runs stay small and readable.
func (tl *timeline) bars() {
	for i, c := range tl.lanes {
		y := laneY(i) + 2
		h := tlLaneHeight - 4
		var pending *bar
		flush := func() {
			if pending != nil {
				pending.write(tl.ew, y, h, colorOf(c))
				pending = nil
			}
		}
		for _, e := range tl.events {
			if e.Category != c {
				continue
			}
			b := bar{x0: tl.x(e.Start), x1: tl.x(e.End()), e: e, n: 1}
			if pending != nil && b.x1-b.x0 < 2 && pending.x1-pending.x0 < 2 && b.x0 <= pending.x1+0.5 {
				pending.x1 = max(pending.x1, b.x1)
				pending.n++
				pending.dur += e.Dur
				continue
			}
			flush()
			b.dur = e.Dur
			pending = &b
		}
		flush()
	}
}

// axis writes the time axis under the lanes, its ticks at round values.
func (tl *timeline) axis() {
	bottom := tl.plotBottom
	tl.ew.Printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>`+"\n", tlLeft, bottom+4,
		tlLeft+tl.plotW, bottom+4)
	tick, unit, unitName := niceTick(tl.t1 - tl.t0)
	for t := time.Duration(math.Ceil(float64(tl.t0)/float64(tick))) * tick; t <= tl.t1; t += tick {
		x := tl.x(t)
		tl.ew.Printf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000"/>`+"\n", x, bottom+4, x, bottom+9)
		tl.ew.Printf(`<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", x, bottom+21,
			strconv.FormatFloat(float64(t)/float64(unit), 'f', -1, 64))
	}
	tl.ew.Printf(`<text x="%.1f" y="%.1f" text-anchor="middle">time since run start (%s)</text>`+"\n",
		tlLeft+tl.plotW/2, bottom+37, unitName)
}

// bar is one drawn rectangle: a single event, or n merged narrow events.
type bar struct {
	x0, x1 float64
	e      Event // the first event
	n      int
	dur    time.Duration
}

func (b *bar) write(ew *textout.Writer, y, h float64, color string) {
	w := max(b.x1-b.x0, tlMinBar)
	var title string
	if b.n == 1 {
		title = fmt.Sprintf("%s step %d layer %d: %s", b.e.Category, b.e.Step, b.e.Layer, fmtDur(b.e.Dur))
		if b.e.Bytes > 0 {
			title += ", " + bytesize.Format(b.e.Bytes)
		}
	} else {
		title = fmt.Sprintf("%d %s events from step %d layer %d: %s in all", b.n, b.e.Category, b.e.Step, b.e.Layer,
			fmtDur(b.dur))
	}
	stroke := "" // a thin white edge separates back-to-back bars where there is room for it
	if w >= 4 {
		stroke = ` stroke="#fff" stroke-width="0.6"`
	}
	ew.Printf(`<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s" fill-opacity="0.85"%s><title>%s</title>`+
		`</rect>`+"\n", b.x0, y, w, h, color, stroke, esc(title))
	if b.n > 1 {
		return
	}
	if label := barLabel(b.e, w); label != "" {
		ew.Printf(`<text x="%.2f" y="%.1f" text-anchor="middle" dominant-baseline="middle" font-size="10" `+
			`fill="#fff">%s</text>`+"\n", b.x0+w/2, y+h/2, label)
	}
}

// barLabel is the text drawn on a bar w pixels wide: the layer number, or for the non-layer units (embed, norm,
// lm_head) of the per-unit stages a longer or shorter name as room allows; empty when nothing fits.
func barLabel(e Event, w float64) string {
	fits := func(s string) bool { return w >= float64(len(s))*tlCharWidth+3 }
	if e.Layer >= 0 {
		if s := strconv.Itoa(e.Layer); fits(s) {
			return s
		}
		return ""
	}
	if e.Category == Sample || e.Category == Tokenize {
		return ""
	}
	for _, s := range []string{"embed/norm/lm_head", "non-layer", "-1"} {
		if fits(s) {
			return s
		}
	}
	return ""
}

// niceTick picks a tick spacing of 1, 2 or 5 times a power of ten giving about ten ticks over span, and the unit
// to label them in.
func niceTick(span time.Duration) (tick, unit time.Duration, unitName string) {
	raw := float64(span) / 10
	pow := math.Pow(10, math.Floor(math.Log10(raw)))
	step := pow
	for _, m := range []float64{1, 2, 5, 10} {
		if m*pow >= raw {
			step = m * pow
			break
		}
	}
	tick = max(time.Duration(step), 1)
	switch {
	case span >= 2*time.Second:
		return tick, time.Second, "s"
	case span >= 2*time.Millisecond:
		return tick, time.Millisecond, "ms"
	default:
		return tick, time.Microsecond, "µs"
	}
}

// esc escapes s for SVG text content.
func esc(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(s)) // writes to a bytes.Buffer cannot fail
	return b.String()
}
