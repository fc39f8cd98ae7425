package guard

import (
	"bytes"
	"errors"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/sections"
)

func TestMaxAbsAndNonFinite(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		x    []float32
		want float32
	}{{nil, 0}, {[]float32{1, -3, 2}, 3}, {[]float32{1, inf, -2}, inf}, {[]float32{1, -inf}, inf}, {[]float32{inf, nan, 1}, nan}} {
		got := MaxAbs(c.x)
		if got != c.want && !(got != got && c.want != c.want) {
			t.Errorf("MaxAbs(%v) = %v, want %v", c.x, got, c.want)
		}
		if NonFinite(c.x) != (c.want != c.want || math.IsInf(float64(c.want), 0)) {
			t.Errorf("NonFinite(%v) = %v", c.x, NonFinite(c.x))
		}
	}
}

func TestCheckActivations(t *testing.T) {
	var logs bytes.Buffer
	m := NewMonitor(MonitorOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	// Healthy: the peak is recorded, nothing reported.
	if err := m.CheckActivations(0, []float32{3, 2.5e4, 40}, checkpoint.F32); err != nil || len(m.Problems()) != 0 {
		t.Fatalf("healthy: %v %v", err, m.Problems())
	}
	if v, l, s := m.PeakActivation(); v != 2.5e4 || l != 1 || s != 0 {
		t.Errorf("peak %v after layer %d at step %d", v, l, s)
	}
	// A blow-up names the first layer past the limit, once.
	m.CheckActivations(1, []float32{3, 5e27, 1e29}, checkpoint.F32)
	m.CheckActivations(2, []float32{3, 5e27, 1e29}, checkpoint.F32)
	if p := m.Problems(); len(p) != 1 || p[0].Kind != KindActivationRange || !strings.Contains(p[0].Message, "after decoder layer 1 ") || p[0].Section != sections.Activations {
		t.Fatalf("blow-up: %+v", p)
	}
	if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, logs.String())
	}
	// float16's limit is far lower: SmolLM2's healthy 2.5e4 is within it, 4e4 is not.
	m16 := NewMonitor(MonitorOptions{Strict: true})
	if err := m16.CheckActivations(0, []float32{2.5e4}, checkpoint.F16); err != nil {
		t.Errorf("f16 at 2.5e4: %v", err)
	}
	var p *Problem
	if err := m16.CheckActivations(0, []float32{4e4}, checkpoint.F16); !errors.As(err, &p) || p.Kind != KindActivationRange {
		t.Errorf("f16 at 4e4: %v", err)
	}
	// NaN: the first non-finite layer, and the logits' NaN message points at it.
	strict := NewMonitor(MonitorOptions{Strict: true})
	err := strict.CheckActivations(3, []float32{1, float32(math.Inf(1)), float32(math.NaN())}, checkpoint.F32)
	if !errors.As(err, &p) || p.Kind != KindActivationNaN || !strings.Contains(p.Message, "after decoder layer 1 ") || !strings.Contains(err.Error(), sections.Anchor(sections.Activations)) {
		t.Fatalf("NaN: %v", err)
	}
	err = strict.CheckLogits(3, []float32{float32(math.NaN()), 1})
	if err == nil || !strings.Contains(err.Error(), "first held NaN or ±Inf after decoder layer 1") {
		t.Errorf("logits after NaN activations: %v", err)
	}
	strict.Reset()
	if _, l, _ := strict.PeakActivation(); l != -1 {
		t.Errorf("Reset kept the peak (layer %d)", l)
	}
}

// BenchmarkMaxAbs: the per-layer cost of the residual stream's check, over one 512-token prefill row of a
// 2048-wide model (TinyLlama).
func BenchmarkMaxAbs(b *testing.B) {
	x := make([]float32, 512*2048)
	for i := range x {
		x[i] = float32(i%1000) - 500
	}
	b.SetBytes(int64(4 * len(x)))
	for b.Loop() {
		MaxAbs(x)
	}
}
