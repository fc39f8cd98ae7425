package profiler

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
)

const ms = time.Millisecond

// pipeline returns the events of a synthetic streamed run with a known schedule: 3 layers over a prefill step
// and one decode step. Each layer is read from disk (10 ms), decoded (2 ms) and copied (3 ms) while the previous
// layer computes (15 ms); compute waits for layer 0's data once per step.
func pipeline() (events []Event, wall time.Duration) {
	add := func(c Category, step, layer int, start, dur time.Duration, bytes int64) {
		events = append(events, Event{Step: step, Layer: layer, Category: c, Start: start, Dur: dur, Bytes: bytes})
	}
	for step := range 2 {
		base := time.Duration(step) * 66 * ms
		add(Tokenize, step, -1, base, 1*ms, 0)
		for l := range 3 {
			io := base + 1*ms + time.Duration(l)*15*ms // I/O for layer l runs during compute of layer l-1
			add(DiskRead, step, l, io, 10*ms, 1_000_000)
			add(Decode, step, l, io+10*ms, 2*ms, 1_000_000)
			add(H2D, step, l, io+12*ms, 3*ms, 1_000_000)
			add(Forward, step, l, base+16*ms+time.Duration(l)*15*ms, 15*ms, 0)
		}
		add(PrefetchWait, step, 0, base+1*ms, 15*ms, 0)
		add(Sample, step, -1, base+61*ms, 4*ms, 0)
	}
	return events, 132 * ms
}

// present lists the categories of events, in pipeline order (Categories).
func present(events []Event) []Category {
	var cs []Category
	for _, c := range Categories() {
		if slices.ContainsFunc(events, func(e Event) bool { return e.Category == c }) {
			cs = append(cs, c)
		}
	}
	return cs
}

func TestSummaryOverlapArithmetic(t *testing.T) {
	events, wall := pipeline()
	s := Summarize(events, wall)
	// Per step: tokenize [0,1), I/O [1,46) (three 15-ms blocks), wait [1,16), forward [16,61), sample [61,65):
	// busy 65 ms, sum 1 + 45 + 15 + 45 + 4 = 110 ms → 45 ms overlapped, 1 ms untracked (65..66).
	if s.Sum != 220*ms || s.Busy != 130*ms || s.Overlapped != 90*ms || s.Untracked != 2*ms {
		t.Fatalf("sum %v busy %v overlapped %v untracked %v, want 220ms 130ms 90ms 2ms", s.Sum, s.Busy,
			s.Overlapped, s.Untracked)
	}
	if got := s.Sum - s.Overlapped + s.Untracked; got != wall {
		t.Fatalf("sum − overlapped + untracked = %v, want wall %v", got, wall)
	}
	// The categories, less what overlapped, account for the wall time within 5% (the rest is untracked).
	if d := float64(wall-(s.Sum-s.Overlapped)) / float64(wall); d < 0 || d > 0.05 {
		t.Fatalf("categories cover %.1f%% of wall", 100*(1-d))
	}
	if s.Steps != 2 || s.DecodeSteps != 1 || s.Events != len(events) {
		t.Fatalf("steps %d decode %d events %d", s.Steps, s.DecodeSteps, s.Events)
	}
	if s.PrefillSpan != 65*ms || s.DecodeSpan != 65*ms {
		t.Fatalf("phase spans %v %v", s.PrefillSpan, s.DecodeSpan)
	}
	var order []Category
	for _, c := range s.Categories {
		order = append(order, c.Category)
	}
	if want := present(events); !slices.Equal(order, want) {
		t.Fatalf("category order %v, want %v", order, want)
	}
	if s.DecodeReadBytes != 3e6 {
		t.Fatalf("decode steps read %d bytes, want 3e6", s.DecodeReadBytes)
	}
	disk := s.Categories[1]
	if disk.Total != 60*ms || disk.Count != 6 || disk.Units != 6 || disk.PerLayer != 10*ms || disk.Bytes != 6e6 {
		t.Fatalf("disk_read %+v", disk)
	}
	if want := 6e6 / 0.060 / 1e9; disk.GBps < want*0.999 || disk.GBps > want*1.001 {
		t.Fatalf("disk_read %.4f GB/s, want %.4f", disk.GBps, want)
	}
	if disk.Share < 60.0/132*0.999 || disk.Share > 60.0/132*1.001 {
		t.Fatalf("disk_read share %v", disk.Share)
	}
	if disk.Prefill != 30*ms || disk.Decode != 30*ms {
		t.Fatalf("disk_read by phase %v %v", disk.Prefill, disk.Decode)
	}
	fwd := s.Categories[5]
	if fwd.GBps != 0 || fwd.PerLayer != 15*ms {
		t.Fatalf("forward %+v", fwd)
	}
	sample := s.Categories[6]
	if sample.Units != 0 || sample.PerLayer != 0 || sample.Total != 8*ms {
		t.Fatalf("sample %+v", sample)
	}
}

func TestUnionNestedAndDisjoint(t *testing.T) {
	evs := []Event{
		{Start: 0, Dur: 10 * ms},
		{Start: 2 * ms, Dur: 3 * ms},  // inside the first
		{Start: 10 * ms, Dur: 5 * ms}, // touching
		{Start: 20 * ms, Dur: 1 * ms}, // disjoint
		{Start: 30 * ms, Dur: 0},      // empty
	}
	if got := union(evs); got != 16*ms {
		t.Fatalf("union %v, want 16ms", got)
	}
}

func TestWriteTable(t *testing.T) {
	events, wall := pipeline()
	var b bytes.Buffer
	if err := Summarize(events, wall).WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"wall 132.00 ms", "disk_read", "prefetch_wait", "45.5%", "10.00 ms", "6.0 MB", "0.10",
		"sum of categories 220.00 ms, wall 132.00 ms → 90.00 ms (41% of the sum) overlapped",
		"2.00 ms (2% of wall) not covered", "by phase", "decode/step",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if err := Summarize(events, wall).WriteTable(failWriter{}); err == nil {
		t.Fatal("write error not reported")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestNilProfilerIsNoOp(t *testing.T) {
	var p *Profiler
	p.Start()
	sp := p.Begin(Forward, 0, 1)
	sp.End(10)
	p.Record(DiskRead, 0, 1, time.Now(), ms, 10)
	p.Stop()
	p.Reset()
	if p.Enabled() || p.Events() != nil || p.Summary().Events != 0 {
		t.Fatal("nil profiler recorded something")
	}
	dir := t.TempDir()
	if err := p.WriteTable(failWriter{}); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteParquet(filepath.Join(dir, "x.parquet")); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteTimelineSVG(filepath.Join(dir, "x.svg")); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("nil profiler wrote files: %v", entries)
	}
}

// TestConcurrentRecording runs a small real pipeline: a prefetch goroutine reads and decodes while the compute
// goroutine runs, recording from both. Whatever the timings, the accounting identity must hold exactly.
func TestConcurrentRecording(t *testing.T) {
	p := New()
	p.Start()
	const layers, steps = 4, 3
	for step := range steps {
		ready := make(chan int, 1)
		var wg sync.WaitGroup
		wg.Go(func() {
			for l := range layers {
				sp := p.Begin(DiskRead, step, l)
				busy(200 * time.Microsecond)
				sp.End(4096)
				p.Record(Decode, step, l, time.Time{}, 50*time.Microsecond, 4096)
				ready <- l
			}
		})
		for range layers {
			w := p.Begin(PrefetchWait, step, -1)
			l := <-ready
			w.End(0)
			f := p.Begin(Forward, step, l)
			busy(300 * time.Microsecond)
			f.End(0)
		}
		wg.Wait()
		p.Begin(Sample, step, -1).End(0)
	}
	p.Stop()
	events := p.Events()
	if len(events) != steps*(4*layers+1) {
		t.Fatalf("%d events, want %d", len(events), steps*(4*layers+1))
	}
	for i := 1; i < len(events); i++ {
		if events[i].Start < events[i-1].Start {
			t.Fatal("events not sorted by start")
		}
	}
	s := p.Summary()
	if s.Wall <= 0 || s.Sum-s.Overlapped+s.Untracked != s.Wall {
		t.Fatalf("sum %v − overlapped %v + untracked %v != wall %v", s.Sum, s.Overlapped, s.Untracked, s.Wall)
	}
	t.Logf("wall %v, sum %v, overlapped %v, untracked %v (%.1f%%)", s.Wall, s.Sum, s.Overlapped, s.Untracked,
		100*float64(s.Untracked)/float64(s.Wall))
}

func busy(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

func TestStartMovesWindow(t *testing.T) {
	p := New()
	p.Begin(Tokenize, 0, -1).End(0)
	time.Sleep(2 * ms)
	p.Start()
	p.Begin(Forward, 0, 0).End(0)
	evs := p.Events()
	if len(evs) != 2 || evs[0].Start >= 0 || evs[1].Start < 0 {
		t.Fatalf("events %+v: want the tokenize event before the run start, forward after", evs)
	}
	if w := p.Summary().Wall; w != evs[1].End() {
		t.Fatalf("wall without Stop %v, want the last event's end %v", w, evs[1].End())
	}
}

func TestReset(t *testing.T) {
	p := New()
	p.Begin(Forward, 0, 0).End(0)
	p.Stop()
	p.Reset()
	if len(p.Events()) != 0 {
		t.Fatal("Reset kept events")
	}
	p.Begin(Sample, 3, -1).End(0)
	evs := p.Events()
	if len(evs) != 1 || evs[0].Start < 0 || p.Summary().Wall != evs[0].End() {
		t.Fatalf("after Reset: %+v, wall %v", evs, p.Summary().Wall)
	}
	var nilp *Profiler
	nilp.Reset()
}

func TestParquetRoundTrip(t *testing.T) {
	events, _ := pipeline()
	events = append(events, Event{Step: 2, Layer: -1, Category: "custom", Start: -5 * ms, Dur: 7, Bytes: 1 << 40})
	path := filepath.Join(t.TempDir(), "trace.parquet")
	if err := WriteEventsParquet(path, events); err != nil {
		t.Fatal(err)
	}
	got, err := ReadParquet(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, events) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v", got, events)
	}

	// The documented schema, as other tools see it.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ name, kind string }{
		{"step", "INT32"}, {"layer", "INT32"}, {"category", "BYTE_ARRAY"}, {"start_ns", "INT64"},
		{"dur_ns", "INT64"}, {"bytes", "INT64"},
	}
	fields := pf.Schema().Fields()
	if len(fields) != len(want) {
		t.Fatalf("schema %v", pf.Schema())
	}
	for i, w := range want {
		if fields[i].Name() != w.name || fields[i].Type().Kind().String() != w.kind {
			t.Errorf("column %d: %s %s, want %s %s", i, fields[i].Name(), fields[i].Type().Kind(), w.name, w.kind)
		}
	}
	if pf.NumRows() != int64(len(events)) {
		t.Fatalf("%d rows, want %d", pf.NumRows(), len(events))
	}
	if _, err := ReadParquet(filepath.Join(t.TempDir(), "missing.parquet")); err == nil ||
		!strings.Contains(err.Error(), "missing.parquet") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestProfilerWritesFiles(t *testing.T) {
	p := New()
	p.Start()
	for l := range 3 {
		p.Begin(DiskRead, 0, l).End(100)
		p.Begin(Forward, 0, l).End(0)
	}
	p.Stop()
	dir := t.TempDir()
	pq, svg := filepath.Join(dir, "t.parquet"), filepath.Join(dir, "t.svg")
	if err := p.WriteParquet(pq); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteTimelineSVG(svg); err != nil {
		t.Fatal(err)
	}
	evs, err := ReadParquet(pq)
	if err != nil || !slices.Equal(evs, p.Events()) {
		t.Fatalf("read back %v, %v", evs, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	if err := p.WriteParquet(filepath.Join(dir, "nodir", "t.parquet")); err == nil ||
		!strings.Contains(err.Error(), "nodir") {
		t.Fatalf("write into a missing folder: %v", err)
	}
}

func TestTimelineSVG(t *testing.T) {
	events, wall := pipeline()
	var b bytes.Buffer
	if err := WriteTimeline(&b, events, wall); err != nil {
		t.Fatal(err)
	}
	texts, rects := parseSVG(t, &b)
	for _, c := range present(events) {
		// Each category appears in the legend and as a lane label.
		if n := count(texts, string(c)); n != 2 {
			t.Errorf("category %s appears %d times as text, want 2 (legend, lane)", c, n)
		}
	}
	// Bars: one per event (all are wide enough not to merge), plus one legend swatch and one background per lane,
	// plus the page background.
	if want := len(events) + 2*len(present(events)) + 1; rects != want {
		t.Errorf("%d rects, want %d", rects, want)
	}
	for _, want := range []string{"prefill", "step 1", "0", "2", "time since run start (ms)"} {
		if count(texts, want) == 0 {
			t.Errorf("no text %q in %q", want, texts)
		}
	}
}

func TestTimelineMergesNarrowBars(t *testing.T) {
	var events []Event
	for i := range 10000 {
		events = append(events, Event{Step: i / 100, Layer: i % 100, Category: Forward,
			Start: time.Duration(i) * time.Microsecond, Dur: time.Microsecond})
	}
	var b bytes.Buffer
	if err := WriteTimeline(&b, events, 10*ms); err != nil {
		t.Fatal(err)
	}
	_, rects := parseSVG(t, &b)
	if rects > 1000 {
		t.Fatalf("%d rects for 10000 sub-pixel events: narrow bars not merged", rects)
	}
}

func TestTimelineEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := WriteTimeline(&b, nil, 0); err != nil {
		t.Fatal(err)
	}
	parseSVG(t, &b)
}

// parseSVG checks that r is well-formed XML with an svg root and returns its text contents and rect count.
func parseSVG(t *testing.T, r io.Reader) (texts []string, rects int) {
	t.Helper()
	d := xml.NewDecoder(r)
	var stack []string
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
			if tok.Name.Local == "rect" {
				rects++
			}
			stack = append(stack, tok.Name.Local)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 && stack[len(stack)-1] == "text" {
				texts = append(texts, string(tok))
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	return texts, rects
}

func count(xs []string, x string) int {
	n := 0
	for _, s := range xs {
		if s == x {
			n++
		}
	}
	return n
}

// BenchmarkNilProfiler measures what a call site costs when profiling is off. It uses a b.N loop, not b.Loop,
// because b.Loop keeps calls in its body from being inlined, and inlining is what makes the nil case free.
func BenchmarkNilProfiler(b *testing.B) {
	var p *Profiler
	for i := range b.N {
		p.Begin(Forward, i, i&31).End(4096)
	}
}

func BenchmarkProfiler(b *testing.B) {
	p := New()
	for i := 0; b.Loop(); i++ {
		p.Begin(Forward, i, i&31).End(4096)
	}
}

func TestBarLabel(t *testing.T) {
	for _, c := range []struct {
		e    Event
		w    float64
		want string
	}{
		{Event{Category: Forward, Layer: 12}, 40, "12"},
		{Event{Category: Forward, Layer: 12}, 5, ""},
		{Event{Category: Forward, Layer: -1}, 400, "embed/norm/lm_head"},
		{Event{Category: DiskRead, Layer: -1}, 20, "-1"},
		{Event{Category: Sample, Layer: -1}, 400, ""},
	} {
		if got := barLabel(c.e, c.w); got != c.want {
			t.Errorf("barLabel(%s layer %d, %v px) = %q, want %q", c.e.Category, c.e.Layer, c.w, got, c.want)
		}
	}
}

// TestSummaryTokensPerPass: the summary counts forward passes by their output-head events and tokens by their
// sample events (speculative decoding chooses several per pass), and the table prints the ratio.
func TestSummaryTokensPerPass(t *testing.T) {
	var evs []Event
	for pass := range 2 {
		evs = append(evs, Event{Step: pass, Layer: 0, Category: Forward, Dur: time.Millisecond},
			Event{Step: pass, Layer: -1, Category: Forward, Dur: time.Millisecond})
	}
	for step := range 5 {
		evs = append(evs, Event{Step: step, Layer: -1, Category: Sample, Dur: time.Microsecond})
	}
	s := Summarize(evs, 10*time.Millisecond)
	if s.Passes != 2 || s.Tokens != 5 {
		t.Fatalf("passes %d, tokens %d; want 2 and 5", s.Passes, s.Tokens)
	}
	var b strings.Builder
	if err := s.WriteTable(&b); err != nil || !strings.Contains(b.String(), "5 tokens chosen in 2 forward passes: 2.50 tokens per pass") {
		t.Errorf("table: %v\n%s", err, b.String())
	}
}
