package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/textout"
)

// verdict is a target's outcome.
type verdict string

const (
	pass verdict = "PASS"
	fail verdict = "FAIL"
	// unavailable: the engine lacks the feature the target measures; counts as missed.
	unavailable verdict = "UNAVAILABLE"
	// notMeasurable: this machine cannot measure the target (a filesystem refusing O_DIRECT); not counted as
	// missed, since no change to the project would make it measurable here.
	notMeasurable verdict = "NOT MEASURABLE HERE"
)

// rawValue is one number a ratio was computed from.
type rawValue struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
}

// target is one of issue 9's speed targets: a ratio and the bound it must meet.
type target struct {
	ID        int     `json:"id"`
	Name      string  `json:"name"`
	Ratio     string  `json:"ratio"` // what is divided by what
	AtMost    bool    `json:"at_most"`
	Threshold float64 `json:"threshold"`
	// Measured is the ratio; nil when it was not measured.
	Measured *float64   `json:"measured"`
	Verdict  verdict    `json:"verdict"`
	Reason   string     `json:"reason,omitempty"` // why it failed or was not measured
	Notes    []string   `json:"notes,omitempty"`  // how it was measured
	Raw      []rawValue `json:"raw,omitempty"`
}

// goal is the bound as text, e.g. "≥ 0.85".
func (t *target) goal() string {
	op := "≥"
	if t.AtMost {
		op = "≤"
	}
	return fmt.Sprintf("%s %.2f", op, t.Threshold)
}

// judge records the measured ratio and whether it meets the bound.
func (t *target) judge(ratio float64) {
	t.Measured = &ratio
	ok := ratio >= t.Threshold
	if t.AtMost {
		ok = ratio <= t.Threshold
	}
	t.Verdict = fail
	if ok {
		t.Verdict = pass
	}
}

// failWith marks a measured target failed for a reason other than its ratio (the ratio is kept).
func (t *target) failWith(reason string) {
	t.Verdict = fail
	t.Reason = reason
}

func (t *target) setUnavailable(reason string) {
	t.Measured, t.Verdict, t.Reason = nil, unavailable, reason
}

func (t *target) setNotMeasurable(reason string) {
	t.Measured, t.Verdict, t.Reason = nil, notMeasurable, reason
}

func (t *target) raw(name string, value float64, unit string) {
	t.Raw = append(t.Raw, rawValue{Name: name, Value: value, Unit: unit})
}

func (t *target) note(format string, args ...any) {
	t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
}

// missed reports whether the target counts against the run: failed, or not measured for lack of an engine
// feature.
func (t *target) missed() bool { return t.Verdict == fail || t.Verdict == unavailable }

// newTargets returns the targets, not yet measured: issue 9's five (target 5's bound is the harness's own, the
// issue asks only for the figure: prefill should run at least at half the backend's matmul rate), then issue
// 15's: prefill, decode and 16 sequences at or beyond llama.cpp on the same model (the peer), decode at the
// memory's read rate, streaming at the disk's.
func newTargets(prefillTokens, batchNewTokens int) []*target {
	return append([]*target{
		{ID: 1, Name: "streaming costs little", Ratio: "streamed decode tok/s ÷ resident decode tok/s (page cache warm)", Threshold: 0.85},
		{ID: 2, Name: "I/O hides compute", Ratio: "s/token with O_DIRECT ÷ disk bound (layer shard bytes per token ÷ O_DIRECT read bandwidth of the passes around each run; median over runs)", AtMost: true, Threshold: 1.15},
		{ID: 3, Name: "decode compute near the memory limit", Ratio: "resident decode weight bytes/s ÷ memory-copy bandwidth", Threshold: 0.50},
		{ID: 4, Name: "throughput mode", Ratio: fmt.Sprintf("aggregate tok/s at batch %d ÷ batch 1 (O_DIRECT)", batchSize), Threshold: 8},
		{ID: 5, Name: "prefill in one pass per layer", Ratio: fmt.Sprintf("prefill FLOP/s (%d-token prompt) ÷ backend matmul FLOP/s", prefillTokens), Threshold: 0.50},
		{ID: 6, Name: "prefill at llama.cpp's rate or beyond", Ratio: fmt.Sprintf("prefill tok/s of a %d-token prompt (resident) ÷ llama.cpp's on the same model", prefillTokens), Threshold: 1},
		{ID: 7, Name: "decode at llama.cpp's rate or beyond", Ratio: "resident decode tok/s ÷ llama.cpp's on the same model", Threshold: 1},
		{ID: 8, Name: "decode at the memory's read rate", Ratio: "resident decode weight bytes/s ÷ memory read bandwidth", Threshold: 0.85},
		{ID: 9, Name: "16 sequences at llama.cpp's rate or more", Ratio: fmt.Sprintf("aggregate tok/s of %d sequences × %d tokens (resident) ÷ llama.cpp's with %d parallel sequences", batchSize, batchNewTokens, batchSize), Threshold: 1},
		{ID: 10, Name: "streaming at the disk's rate", Ratio: "disk bound ÷ s/token with O_DIRECT (target 2's runs, median)", Threshold: 0.95},
	}, slices.Concat(quantTargets(), speculationTargets(), moeTargets(), recurrentTargets(), rowsTargets())...)
}

// target returns the target with the given ID.
func (r *report) target(id int) *target {
	for _, t := range r.Targets {
		if t.ID == id {
			return t
		}
	}
	panic(fmt.Sprintf("speed: no target %d", id))
}

// writeText prints the report for a person.
func (r *report) writeText(w io.Writer) error {
	p := &textout.Writer{W: w}
	m := r.Model
	p.Printf("layerstream speed — %s shape, %d layers, %s on disk, weights computed in %s (%s)\n", m.Shape, m.Layers,
		m.StoredDType, m.ComputeDType, m.ComputeReason)
	p.Printf("model: %s (layer shards %s, output projection %s)\n", m.Shards, bytesize.Format(m.LayerFileBytes),
		bytesize.Format(m.HeadWeightBytes))
	p.Printf("command: %s\n\n", r.Command)

	p.Printf("machine, measured in this run (%d CPUs", r.Machine.CPUs)
	if r.Machine.LoadStart != "" {
		p.Printf("; load average %s at the start, %s at the end", r.Machine.LoadStart, r.Machine.LoadEnd)
	}
	p.Printf("):\n")
	mc := r.Machine.Memcpy
	p.Printf("  memory copy      %7.2f GB/s    bytes copied per second, %s buffers, %d goroutines, best of %d\n",
		mc.GBps, bytesize.Format(mc.BufferBytes), mc.Goroutines, mc.Repeats)
	mr := r.Machine.MemRead
	p.Printf("  memory read      %7.2f GB/s    bytes read per second, %s buffer, %d goroutines, best of %d\n",
		mr.GBps, bytesize.Format(mr.BufferBytes), mr.Goroutines, mr.Repeats)
	if d := r.Machine.DirectRead; d.Supported {
		p.Printf("  sequential read  %7.2f GB/s    O_DIRECT, %d layer shards (%s), best of %d passes (%s)\n",
			d.GBps, d.Files, bytesize.Format(d.Bytes), len(d.Passes), d.describePasses())
	} else {
		p.Printf("  sequential read      n/a         %s\n", d.Reason)
	}
	if mm := r.Machine.Matmul; mm.Repeats > 0 {
		p.Printf("  matmul           %7.2f GFLOP/s %s, best of %d\n", mm.GFlops, mm.Op, mm.Repeats)
	}
	if rss := r.Machine.StreamedPeakRSS; rss > 0 {
		p.Printf("  peak memory      %s resident while streaming with O_DIRECT (the process's VmHWM over target 2's runs)\n",
			bytesize.Format(rss))
	}
	p.Printf("\n")

	p.Printf("%-2s %-38s %-7s %9s  %s\n", "#", "target", "goal", "measured", "verdict")
	for _, t := range r.Targets {
		measured := "—"
		if t.Measured != nil {
			measured = fmt.Sprintf("%.3f", *t.Measured)
		}
		p.Printf("%-2d %-38s %-7s %9s  %s\n", t.ID, t.Name, t.goal(), measured, t.Verdict)
		p.Printf("     ratio: %s\n", t.Ratio)
		if t.Reason != "" {
			p.Printf("     reason: %s\n", t.Reason)
		}
		for _, v := range t.Raw {
			p.Printf("%s\n", strings.TrimRight(fmt.Sprintf("     %-44s %12s %s", v.Name, fmtValue(v.Value), v.Unit), " "))
		}
		for _, n := range t.Notes {
			p.Printf("     note: %s\n", n)
		}
	}
	p.Printf("\n")
	for _, prof := range r.Profiles {
		p.Printf("profile: %s\n", prof.Title)
		if p.Err == nil {
			p.Err = prof.Summary.WriteTable(w)
		}
		p.Printf("\n")
	}
	if r.Missed == 0 {
		p.Printf("all measurable targets met\n")
	} else {
		var ids []string
		for _, t := range r.Targets {
			if t.missed() {
				ids = append(ids, fmt.Sprintf("%d (%s)", t.ID, strings.ToLower(string(t.Verdict))))
			}
		}
		p.Printf("%d target(s) missed: %s\n", r.Missed, strings.Join(ids, ", "))
	}
	return p.Err
}

// fmtValue prints a raw value with a sensible number of digits.
func fmtValue(v float64) string {
	switch {
	case v == float64(int64(v)) && v < 1e15 && v > -1e15:
		return fmt.Sprintf("%d", int64(v))
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.4g", v)
	}
}
