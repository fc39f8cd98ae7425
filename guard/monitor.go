// Package guard keeps layerstream from printing garbage silently: health checks on the logits and the generated
// text of every step (Monitor), the compute dtype policy (ChooseDType) and multi-device placement plans (Plan).
// Every warning and error names the TROUBLESHOOTING.md section that explains it.
package guard

import (
	"fmt"
	"log/slog"
	"math"
	"strings"
	"unicode"

	"github.com/layerstream/layerstream/internal/sections"
)

// Kind names one class of problem a Monitor detects.
type Kind string

// The problems a Monitor detects.
const (
	KindNaN         Kind = "nan"         // a NaN or ±Inf among the logits
	KindZero        Kind = "zero"        // every logit is 0
	KindConstant    Kind = "constant"    // every logit has the same non-zero value
	KindSaturation  Kind = "saturation"  // the top logit is pinned at one value across steps
	KindRepetition  Kind = "repetition"  // one token, or one short phrase, repeated many times in a row
	KindPunctuation Kind = "punctuation" // one punctuation mark dominates the recent output
)

// Problem is a detected numeric or output problem. In Strict mode the Monitor returns it as an error.
type Problem struct {
	Kind Kind
	// Step is the step passed to CheckLogits, or for token problems the index of the token (0 = first observed).
	Step int
	// Section is the TROUBLESHOOTING.md heading that explains the problem.
	Section string
	// Message says what was seen and its likely causes.
	Message string
}

func (p *Problem) Error() string { return p.Message + " (see " + sections.Anchor(p.Section) + ")" }

// MonitorOptions configures a Monitor. Zero values select the defaults, which raise no alarm on the golden
// stories260K generations.
type MonitorOptions struct {
	// Strict turns warnings into errors: CheckLogits and ObserveToken return a *Problem, and the caller stops.
	Strict bool
	// Logger receives one warning per kind per run (slog.Default() when nil).
	Logger *slog.Logger
	// SaturationSteps is how many consecutive steps with the same top logit count as saturation (default 8).
	SaturationSteps int
	// RepeatLimit is how many times in a row one token may appear before it counts as degenerate (default 16).
	RepeatLimit int
	// PunctuationWindow is how many of the most recent non-space characters the punctuation ratio looks at
	// (default 96); the check starts once that many have been seen.
	PunctuationWindow int
	// PunctuationRatio is the share of the window above which one punctuation mark is degenerate (default 0.3).
	PunctuationRatio float64
	// LoopLimit is how many tokens in a row may repeat a phrase of 2 to maxLoopPeriod tokens (each token equal to
	// the one a phrase length before it) before the output counts as looping (default 128).
	LoopLimit int
}

// maxLoopPeriod is the longest phrase, in tokens, whose repetition ObserveToken detects.
const maxLoopPeriod = 32

// Monitor checks each step of one generation: each kind warns once per run. Create one per run, or Reset it.
// A Monitor is not safe for concurrent use.
type Monitor struct {
	opts     MonitorOptions
	problems []*Problem
	warned   map[Kind]bool

	// saturation: the previous step's top logit and how many consecutive steps repeated it.
	haveTop bool
	lastTop float32
	sameTop int

	// repetition
	tokens int
	lastID int
	idRun  int
	// loops: the last maxLoopPeriod ids and texts (a ring indexed by token), and for each phrase length p how
	// many tokens in a row equalled the one p before.
	recent     [maxLoopPeriod]int
	recentText [maxLoopPeriod]string
	loopRun    [maxLoopPeriod + 1]int
	// punctuation: a ring of the last PunctuationWindow non-space runes and the counts of punctuation among them.
	ring   []rune
	ringAt int
	filled int
	counts map[rune]int

	// activations (CheckActivations): the largest finite |x| seen and where; where the stream last became NaN.
	peak                float32
	peakLayer, peakStep int
	nanLayer, nanStep   int
}

// NewMonitor returns a Monitor with opts' zero fields set to their defaults.
func NewMonitor(opts MonitorOptions) *Monitor {
	if opts.SaturationSteps <= 0 {
		opts.SaturationSteps = 8
	}
	if opts.RepeatLimit <= 0 {
		opts.RepeatLimit = 16
	}
	if opts.PunctuationWindow <= 0 {
		opts.PunctuationWindow = 96
	}
	if opts.PunctuationRatio <= 0 {
		opts.PunctuationRatio = 0.3
	}
	if opts.LoopLimit <= 0 {
		opts.LoopLimit = 128
	}
	return &Monitor{
		opts:      opts,
		warned:    map[Kind]bool{},
		lastID:    -1,
		ring:      make([]rune, opts.PunctuationWindow),
		counts:    map[rune]int{},
		peakLayer: -1,
		nanLayer:  -1,
	}
}

// Reset forgets everything seen, so the Monitor can watch a new run (each kind warns again, once).
// Its buffers are reused.
func (m *Monitor) Reset() {
	clear(m.warned)
	clear(m.counts)
	*m = Monitor{opts: m.opts, warned: m.warned, lastID: -1, ring: m.ring, counts: m.counts, peakLayer: -1, nanLayer: -1}
}

// Problems returns the first problem of each kind seen so far, in the order they were seen.
func (m *Monitor) Problems() []*Problem { return m.problems }

// CheckLogits checks one step's logits (raw model output, before any sampling mask) in a single pass: NaN/Inf,
// all-zero or constant logits, and a top logit pinned at the same value for SaturationSteps steps. It returns nil,
// or a *Problem in Strict mode; an empty slice is always an error.
func (m *Monitor) CheckLogits(step int, logits []float32) error {
	if len(logits) == 0 {
		return fmt.Errorf("guard: step %d: empty logits", step)
	}
	mn, mx, bad := minMax(logits)
	if bad {
		m.haveTop = false
		msg := nanMessage(step, logits)
		if m.nanLayer >= 0 && m.nanStep == step {
			msg += fmt.Sprintf("; the residual stream first held NaN or ±Inf after decoder layer %d", m.nanLayer)
		}
		return m.report(KindNaN, step, sections.NaN, msg)
	}
	if mx == 0 && mn == 0 {
		m.haveTop = false
		return m.report(KindZero, step, sections.ZeroLogits, fmt.Sprintf(
			"logits at step %d are all zero (%d values): the output projection (lm_head, or the tied embedding) most "+
				"likely never loaded, the final norm weights are zero, or activations overflowed inside RMSNorm "+
				"(its sum of squares became Inf, so every normalised value became 0)", step, len(logits)))
	}
	if mx-mn <= 1e-6*max(1, abs32(mx)) {
		m.haveTop = false
		return m.report(KindConstant, step, sections.ZeroLogits, fmt.Sprintf(
			"logits at step %d all equal %g (%d values): the output projection most likely never loaded (only a bias "+
				"or a constant remains), or the hidden state collapsed to zero", step, mx, len(logits)))
	}
	if m.haveTop && mx-m.lastTop <= 1e-6*max(1, abs32(mx)) && m.lastTop-mx <= 1e-6*max(1, abs32(mx)) {
		m.sameTop++
	} else {
		m.sameTop = 1
	}
	m.haveTop, m.lastTop = true, mx
	if m.sameTop >= m.opts.SaturationSteps {
		return m.report(KindSaturation, step, sections.Saturation, fmt.Sprintf(
			"the top logit has been exactly %g for %d steps in a row (up to step %d): the logits are saturated, "+
				"e.g. pinned at a final-logit softcap wall, clipped by a low-precision dtype, or the hidden state "+
				"no longer depends on the input", mx, m.sameTop, step))
	}
	return nil
}

// minMax returns the smallest and largest value, and whether any value is NaN or ±Inf, in one pass. The
// comparisons rarely change their answer, so the branches predict well.
func minMax(x []float32) (mn, mx float32, bad bool) {
	mn, mx = x[0], x[0]
	nan := false
	for _, v := range x {
		if v > mx {
			mx = v
		}
		if v < mn {
			mn = v
		}
		if v != v {
			nan = true
		}
	}
	return mn, mx, nan || math.IsInf(float64(mx), 1) || math.IsInf(float64(mn), -1)
}

func abs32(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}

// nanMessage is the cold path: count what is wrong for the message.
func nanMessage(step int, logits []float32) string {
	var nans, pos, neg int
	first := -1
	for i, v := range logits {
		bad := true
		switch {
		case v != v:
			nans++
		case math.IsInf(float64(v), 1):
			pos++
		case math.IsInf(float64(v), -1):
			neg++
		default:
			bad = false
		}
		if bad && first < 0 {
			first = i
		}
	}
	return fmt.Sprintf("logits at step %d contain %d NaN, %d +Inf and %d -Inf of %d values (first at token id %d): "+
		"likely float16 overflow (activations above 65504), bf16 computed on a device without native bf16, "+
		"weights scaled out of range, or a corrupted shard", step, nans, pos, neg, len(logits), first)
}

// ObserveToken records the next generated token (its id and decoded text) and checks the output so far for
// degenerate repetition (the same id RepeatLimit times in a row, or a phrase of 2 to 32 tokens repeated for
// LoopLimit tokens) and for one punctuation mark making up more than PunctuationRatio of the last
// PunctuationWindow non-space characters. It returns nil, or a *Problem in Strict mode.
func (m *Monitor) ObserveToken(id int, text string) error {
	idx := m.tokens
	m.tokens++
	if id == m.lastID {
		m.idRun++
	} else {
		m.lastID, m.idRun = id, 1
	}
	if m.idRun >= m.opts.RepeatLimit {
		return m.report(KindRepetition, idx, sections.Repetition, fmt.Sprintf(
			"token %d (%q) was generated %d times in a row (token %d): degenerate repetition, likely broken "+
				"numerics (wrong dtype, a missing or corrupted layer) or a sampler without temperature/repetition "+
				"penalty on a tiny model", id, text, m.idRun, idx))
	}
	if err := m.observeLoop(idx, id, text); err != nil {
		return err
	}
	var err error
	w := len(m.ring)
	for _, r := range text {
		if unicode.IsSpace(r) {
			continue
		}
		if m.filled == w {
			if old := m.ring[m.ringAt]; isPunct(old) {
				m.counts[old]--
			}
		} else {
			m.filled++
		}
		m.ring[m.ringAt] = r
		m.ringAt = (m.ringAt + 1) % w
		if !isPunct(r) {
			continue
		}
		m.counts[r]++
		if err == nil && m.filled == w && float64(m.counts[r]) > m.opts.PunctuationRatio*float64(w) {
			err = m.report(KindPunctuation, idx, sections.Punctuation, fmt.Sprintf(
				"%q makes up %d of the last %d non-space characters of the output (token %d): the classic symptom "+
					"of bf16 computed on a GPU without native bf16, float16 overflow, or NaN logits turned into one "+
					"token by the sampler", r, m.counts[r], w, idx))
		}
	}
	return err
}

// observeLoop checks whether the output has been repeating one phrase (2 to maxLoopPeriod tokens) for
// LoopLimit tokens, the shortest such phrase first.
func (m *Monitor) observeLoop(idx, id int, text string) error {
	var err error
	for p := 2; p <= maxLoopPeriod; p++ {
		if idx < p || m.recent[(idx-p)%maxLoopPeriod] != id {
			m.loopRun[p] = 0
			continue
		}
		m.loopRun[p]++
		if err == nil && m.loopRun[p] >= m.opts.LoopLimit && m.recent[(idx-1)%maxLoopPeriod] != id {
			var phrase strings.Builder
			for k := idx - p + 1; k < idx; k++ {
				phrase.WriteString(m.recentText[k%maxLoopPeriod])
			}
			phrase.WriteString(text)
			err = m.report(KindRepetition, idx, sections.Repetition, fmt.Sprintf(
				"the output has repeated a %d-token phrase (%q) for %d tokens (token %d): degenerate repetition, "+
					"greedy decoding of a small or quantized model looping, or broken numerics", p, phrase.String(), m.loopRun[p]+p, idx))
		}
	}
	m.recent[idx%maxLoopPeriod], m.recentText[idx%maxLoopPeriod] = id, text
	return err
}

func isPunct(r rune) bool { return unicode.IsPunct(r) || unicode.IsSymbol(r) }

// report records the problem, warns once per kind, and returns it in Strict mode.
func (m *Monitor) report(kind Kind, step int, section, msg string) error {
	p := &Problem{Kind: kind, Step: step, Section: section, Message: msg}
	if !m.warned[kind] {
		m.warned[kind] = true
		m.problems = append(m.problems, p)
		if !m.opts.Strict {
			log := m.opts.Logger
			if log == nil {
				log = slog.Default()
			}
			log.Warn(msg, "kind", string(kind), "step", step, "see", sections.Anchor(section))
		}
	}
	if m.opts.Strict {
		return p
	}
	return nil
}
