package guard

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/sections"
)

// varied returns plausible logits for step s: distinct values whose maximum changes with s.
func varied(n, s int) []float32 {
	l := make([]float32, n)
	for i := range l {
		l[i] = float32(math.Sin(float64(i*7+s*13))) * 5
	}
	l[(s*31)%n] = 10 + float32(s%5)
	return l
}

func strictProblem(t *testing.T, err error, kind Kind) *Problem {
	t.Helper()
	var p *Problem
	if !errors.As(err, &p) {
		t.Fatalf("want a *Problem of kind %s, got %v", kind, err)
	}
	if p.Kind != kind || p.Section == "" || !strings.Contains(p.Error(), sections.Anchor(p.Section)) {
		t.Fatalf("want kind %s naming its section, got %+v", kind, p)
	}
	return p
}

func TestLogitDetectorsStrict(t *testing.T) {
	nan := varied(100, 1)
	nan[17] = float32(math.NaN())
	inf := varied(100, 1)
	inf[3] = float32(math.Inf(1))
	ninf := varied(100, 1)
	ninf[99] = float32(math.Inf(-1))
	constant := make([]float32, 100)
	for i := range constant {
		constant[i] = 0.25
	}
	for _, c := range []struct {
		name   string
		logits []float32
		kind   Kind
	}{
		{"nan", nan, KindNaN}, {"+inf", inf, KindNaN}, {"-inf", ninf, KindNaN},
		{"zero", make([]float32, 100), KindZero}, {"constant", constant, KindConstant},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := NewMonitor(MonitorOptions{Strict: true})
			if err := m.CheckLogits(0, varied(100, 0)); err != nil {
				t.Fatalf("healthy logits: %v", err)
			}
			p := strictProblem(t, m.CheckLogits(1, c.logits), c.kind)
			if p.Step != 1 {
				t.Fatalf("step %d, want 1", p.Step)
			}
		})
	}
	m := NewMonitor(MonitorOptions{Strict: true})
	p := strictProblem(t, m.CheckLogits(4, nan), KindNaN)
	if !strings.Contains(p.Message, "1 NaN") || !strings.Contains(p.Message, "token id 17") {
		t.Fatalf("NaN message does not count or locate: %s", p.Message)
	}
	if err := m.CheckLogits(5, nil); err == nil {
		t.Fatal("empty logits accepted")
	}
}

func TestSaturation(t *testing.T) {
	m := NewMonitor(MonitorOptions{Strict: true, SaturationSteps: 5})
	for s := range 4 {
		l := varied(64, s)
		l[s] = 30 // a softcap wall: the top logit pinned at 30
		if err := m.CheckLogits(s, l); err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
	}
	l := varied(64, 9)
	l[40] = 30
	p := strictProblem(t, m.CheckLogits(4, l), KindSaturation)
	if p.Step != 4 {
		t.Fatalf("step %d", p.Step)
	}
	// A changing maximum resets the count.
	m = NewMonitor(MonitorOptions{Strict: true, SaturationSteps: 3})
	for s := range 50 {
		if err := m.CheckLogits(s, varied(64, s)); err != nil {
			t.Fatalf("step %d: %v", s, err)
		}
	}
}

func TestRepetition(t *testing.T) {
	m := NewMonitor(MonitorOptions{Strict: true, RepeatLimit: 6})
	for i, id := range []int{5, 5, 5, 7, 5, 5, 5, 5, 5} { // runs of 3 and 5: fine
		if err := m.ObserveToken(id, " the"); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
	}
	p := strictProblem(t, m.ObserveToken(5, " the"), KindRepetition)
	if p.Step != 9 {
		t.Fatalf("step %d, want 9", p.Step)
	}
}

// TestPhraseLoop: a phrase repeated for LoopLimit tokens is degenerate repetition (the Q4_1 SmolLM2 answering
// "la femme au martyre, la femme au martyre, …" greedily), a phrase repeated for fewer is not, and neither is a
// text that repeats phrases with variations.
func TestPhraseLoop(t *testing.T) {
	m := NewMonitor(MonitorOptions{Strict: true})
	words := []string{" la", " femme", " au", " martyre", ","}
	for range 20 { // 100 tokens of the same phrase: under the default 128
		for i, w := range words {
			if err := m.ObserveToken(10+i, w); err != nil {
				t.Fatal(err)
			}
		}
	}
	m.Reset()
	for k := range 100 { // a phrase with one word changing
		for i, w := range words {
			id := 10 + i
			if i == 3 {
				id = 100 + k%7
			}
			if err := m.ObserveToken(id, w); err != nil {
				t.Fatalf("varying phrase: %v", err)
			}
		}
	}
	m.Reset()
	var err error
	n := 0
	for ; err == nil && n < 400; n++ {
		err = m.ObserveToken(10+n%5, words[n%5])
	}
	p := strictProblem(t, err, KindRepetition)
	if n != 128+5 || !strings.Contains(p.Message, "5-token phrase") || !strings.Contains(p.Message, "femme") {
		t.Fatalf("after %d tokens: %s", n, p.Message)
	}
}

func TestPunctuation(t *testing.T) {
	m := NewMonitor(MonitorOptions{Strict: true})
	// Legitimate exclamations and dialogue do not trip it.
	for range 20 {
		for id, s := range []string{" \"Wow", "!\"", " said", " Tom", "."} {
			if err := m.ObserveToken(id, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Then the output degenerates into "!!" tokens of differing ids (no single-id repetition).
	var err error
	for i := 0; err == nil && i < 200; i++ {
		err = m.ObserveToken(100+i%3, strings.Repeat("!", 1+i%3))
	}
	p := strictProblem(t, err, KindPunctuation)
	if !strings.Contains(p.Message, `'!'`) {
		t.Fatalf("message does not name the mark: %s", p.Message)
	}
}

func TestWarnOncePerKindNotStrict(t *testing.T) {
	var buf bytes.Buffer
	m := NewMonitor(MonitorOptions{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	nan := []float32{1, float32(math.NaN()), 2}
	for s := range 5 {
		if err := m.CheckLogits(s, nan); err != nil {
			t.Fatalf("non-strict returned %v", err)
		}
		if err := m.CheckLogits(s, []float32{0, 0, 0}); err != nil {
			t.Fatalf("non-strict returned %v", err)
		}
	}
	out := buf.String()
	if n := strings.Count(out, "level=WARN"); n != 2 {
		t.Fatalf("want 2 warnings (one per kind), got %d:\n%s", n, out)
	}
	if !strings.Contains(out, sections.Anchor(sections.NaN)) || !strings.Contains(out, sections.Anchor(sections.ZeroLogits)) {
		t.Fatalf("warnings do not name their sections:\n%s", out)
	}
	if ps := m.Problems(); len(ps) != 2 || ps[0].Kind != KindNaN || ps[1].Kind != KindZero {
		t.Fatalf("problems %+v", ps)
	}
	m.Reset() // a new run warns again
	buf.Reset()
	_ = m.CheckLogits(0, nan)
	if len(m.Problems()) != 1 || strings.Count(buf.String(), "level=WARN") != 1 {
		t.Fatalf("after Reset: problems %+v, log %s", m.Problems(), buf.String())
	}
}

var sink error

func benchmarkCheck(b *testing.B, vocab int) {
	m := NewMonitor(MonitorOptions{})
	l := varied(vocab, 3)
	b.SetBytes(int64(4 * vocab))
	b.ResetTimer()
	for i := range b.N {
		l[(3*31)%vocab] = 10 + float32(i%7) // keep the top logit moving like real decoding
		sink = m.CheckLogits(i, l)
	}
}

func BenchmarkCheckLogits32000(b *testing.B)  { benchmarkCheck(b, 32000) }
func BenchmarkCheckLogits151936(b *testing.B) { benchmarkCheck(b, 151936) }
