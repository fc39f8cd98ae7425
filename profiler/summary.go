package profiler

import (
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/textout"
)

// Summary aggregates events per category, with the overlap between stages.
//
// The identity Sum − Overlapped + Untracked = Wall holds whenever every event lies inside the run window:
// Busy is the time during which at least one event was running, Overlapped = Sum − Busy is the time hidden by
// running stages concurrently (prefetch and transfer behind compute), Untracked = Wall − Busy is time no event
// accounts for.
type Summary struct {
	Wall        time.Duration  `json:"wall_ns"`
	Events      int            `json:"events"`
	Steps       int            `json:"steps"` // distinct token steps, prefill included
	Categories  []CategoryStat `json:"categories"`
	Sum         time.Duration  `json:"sum_ns"`        // sum of every event's duration
	Busy        time.Duration  `json:"busy_ns"`       // length of the union of the events' intervals
	Overlapped  time.Duration  `json:"overlapped_ns"` // Sum − Busy
	Untracked   time.Duration  `json:"untracked_ns"`  // Wall − Busy, clamped at 0
	PrefillSpan time.Duration  `json:"prefill_span_ns"`
	DecodeSpan  time.Duration  `json:"decode_span_ns"`
	DecodeSteps int            `json:"decode_steps"`
	// Passes are the forward passes (each ends with one output-head event) and Tokens the tokens chosen (sample
	// events): with speculative decoding, several tokens per pass.
	Passes int `json:"passes"`
	Tokens int `json:"tokens"`
	// DecodeReadBytes are the shard bytes read (disk_read and expert_read) during decode steps: divided by
	// DecodeSteps, the bytes a decode step reads (a mixture of experts' streamed layers: their routed experts).
	DecodeReadBytes int64 `json:"decode_read_bytes"`
}

// CategoryStat is one category's share of the run.
type CategoryStat struct {
	Category Category      `json:"category"`
	Count    int           `json:"count"`
	Total    time.Duration `json:"total_ns"`
	Share    float64       `json:"share_of_wall"` // Total / Wall
	// Units is the number of distinct (step, layer ≥ 0) pairs; PerLayer is the time of layer events divided by it.
	Units    int           `json:"layer_units"`
	PerLayer time.Duration `json:"per_layer_mean_ns"`
	Bytes    int64         `json:"bytes"`
	GBps     float64       `json:"gb_per_s"` // Bytes / Total for disk_read, decode and h2d; 0 otherwise
	Prefill  time.Duration `json:"prefill_ns"`
	Decode   time.Duration `json:"decode_ns"`
}

// Summary summarizes the events recorded so far over the run window.
func (p *Profiler) Summary() Summary {
	if p == nil {
		return Summary{}
	}
	return Summarize(p.Events(), p.window())
}

// Summarize aggregates events over a run window of length wall. Categories come out in pipeline order, unknown
// ones after the known ones, alphabetically.
func Summarize(events []Event, wall time.Duration) Summary {
	s := Summary{Wall: wall, Events: len(events)}
	stats := map[Category]*CategoryStat{}
	type unit struct{ step, layer int }
	units := map[Category]map[unit]bool{}
	layerTime := map[Category]time.Duration{}
	steps := map[int]bool{}
	var prefillLo, prefillHi, decodeLo, decodeHi time.Duration
	var anyPrefill, anyDecode bool
	for _, e := range events {
		st := stats[e.Category]
		if st == nil {
			st = &CategoryStat{Category: e.Category}
			stats[e.Category] = st
			units[e.Category] = map[unit]bool{}
		}
		st.Count++
		st.Total += e.Dur
		st.Bytes += e.Bytes
		if e.Layer >= 0 {
			units[e.Category][unit{e.Step, e.Layer}] = true
			layerTime[e.Category] += e.Dur
		}
		steps[e.Step] = true
		s.Sum += e.Dur
		switch {
		case e.Category == Forward && e.Layer < 0:
			s.Passes++
		case e.Category == Sample:
			s.Tokens++
		}
		if e.Step == 0 {
			st.Prefill += e.Dur
			prefillLo, prefillHi = extend(anyPrefill, prefillLo, prefillHi, e)
			anyPrefill = true
		} else {
			st.Decode += e.Dur
			if e.Category == DiskRead || e.Category == ExpertRead {
				s.DecodeReadBytes += e.Bytes
			}
			decodeLo, decodeHi = extend(anyDecode, decodeLo, decodeHi, e)
			anyDecode = true
		}
	}
	s.Steps = len(steps)
	s.DecodeSteps = len(steps)
	if steps[0] {
		s.DecodeSteps--
	}
	s.PrefillSpan = prefillHi - prefillLo
	s.DecodeSpan = decodeHi - decodeLo
	for _, st := range stats {
		if wall > 0 {
			st.Share = float64(st.Total) / float64(wall)
		}
		st.Units = len(units[st.Category])
		if st.Units > 0 {
			st.PerLayer = layerTime[st.Category] / time.Duration(st.Units)
		}
		if isIO(st.Category) && st.Total > 0 {
			st.GBps = float64(st.Bytes) / st.Total.Seconds() / 1e9
		}
		s.Categories = append(s.Categories, *st)
	}
	slices.SortFunc(s.Categories, func(a, b CategoryStat) int { return compareCategories(a.Category, b.Category) })
	s.Busy = union(events)
	s.Overlapped = max(0, s.Sum-s.Busy)
	s.Untracked = max(0, wall-s.Busy)
	return s
}

func extend(seen bool, lo, hi time.Duration, e Event) (time.Duration, time.Duration) {
	if !seen {
		return e.Start, e.End()
	}
	return min(lo, e.Start), max(hi, e.End())
}

// compareCategories orders known categories by pipeline position, then unknown ones by name.
func compareCategories(a, b Category) int {
	ia, ib := slices.Index(Categories(), a), slices.Index(Categories(), b)
	switch {
	case ia >= 0 && ib >= 0:
		return ia - ib
	case ia >= 0:
		return -1
	case ib >= 0:
		return 1
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// union returns the total length covered by at least one event.
func union(events []Event) time.Duration {
	evs := slices.Clone(events)
	sortEvents(evs)
	var total, curLo, curHi time.Duration
	open := false
	for _, e := range evs {
		if e.Dur <= 0 {
			continue
		}
		if !open || e.Start > curHi {
			if open {
				total += curHi - curLo
			}
			curLo, curHi, open = e.Start, e.End(), true
			continue
		}
		curHi = max(curHi, e.End())
	}
	if open {
		total += curHi - curLo
	}
	return total
}

// WriteTable writes the run's summary as a human-readable table: per category the total, share of wall, count,
// per-layer mean, bytes and GB/s (I/O categories), then the overlap between stages and a prefill/decode split.
func (p *Profiler) WriteTable(w io.Writer) error {
	if p == nil {
		return nil
	}
	return p.Summary().WriteTable(w)
}

// WriteTable writes s as a human-readable table (see Profiler.WriteTable).
func (s Summary) WriteTable(w io.Writer) error {
	ew := &textout.Writer{W: w}
	ew.Printf("profile: wall %s, %d events, %d steps (prefill + %d decode)\n", fmtDur(s.Wall), s.Events, s.Steps,
		s.DecodeSteps)
	ew.Printf("%-14s %11s %7s %7s %15s %10s %7s\n", "category", "total", "share", "count", "per-layer mean",
		"bytes", "GB/s")
	for _, c := range s.Categories {
		perLayer, gbps, bytes := "-", "-", "-"
		if c.Units > 0 {
			perLayer = fmtDur(c.PerLayer)
		}
		if isIO(c.Category) && c.Total > 0 {
			gbps = fmt.Sprintf("%.2f", c.GBps)
		}
		if c.Bytes > 0 {
			bytes = bytesize.Format(c.Bytes)
		}
		ew.Printf("%-14s %11s %6.1f%% %7d %15s %10s %7s\n", c.Category, fmtDur(c.Total), 100*c.Share, c.Count,
			perLayer, bytes, gbps)
	}
	pct := 0.0
	if s.Sum > 0 {
		pct = 100 * float64(s.Overlapped) / float64(s.Sum)
	}
	ew.Printf("sum of categories %s, wall %s → %s (%.0f%% of the sum) overlapped", fmtDur(s.Sum), fmtDur(s.Wall),
		fmtDur(s.Overlapped), pct)
	if s.Wall > 0 {
		ew.Printf("; %s (%.0f%% of wall) not covered by any category", fmtDur(s.Untracked),
			100*float64(s.Untracked)/float64(s.Wall))
	}
	ew.Printf("\n")
	if s.DecodeSteps > 0 && s.DecodeReadBytes > 0 {
		ew.Printf("shard bytes read per decode step (disk_read + expert_read): %s\n", bytesize.Format(s.DecodeReadBytes/int64(s.DecodeSteps)))
	}
	if s.Passes > 0 && s.Tokens > 0 {
		ew.Printf("%d tokens chosen in %d forward passes: %.2f tokens per pass\n", s.Tokens, s.Passes, float64(s.Tokens)/float64(s.Passes))
	}
	if s.DecodeSteps > 0 && s.Steps > s.DecodeSteps { // both phases present
		perStep := func(d time.Duration) string { return fmtDur(d / time.Duration(s.DecodeSteps)) }
		ew.Printf("%-14s %11s %11s %11s\n", "by phase", "prefill", "decode", "decode/step")
		ew.Printf("%-14s %11s %11s %11s\n", "(span)", fmtDur(s.PrefillSpan), fmtDur(s.DecodeSpan),
			perStep(s.DecodeSpan))
		for _, c := range s.Categories {
			ew.Printf("%-14s %11s %11s %11s\n", c.Category, fmtDur(c.Prefill), fmtDur(c.Decode), perStep(c.Decode))
		}
	}
	return ew.Err
}

// fmtDur prints a duration with three significant digits in a unit suited to its size.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d >= time.Second || d <= -time.Second:
		return fmt.Sprintf("%.3f s", d.Seconds())
	case d >= time.Millisecond || d <= -time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
	}
}
