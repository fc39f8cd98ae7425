package engine

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/synth"
)

// Issue #13 case 7: one layer's down_proj scaled by 1e30 gives activations around 1e28, still finite in f32.
// The residual stream's check names that layer, on the host kernels and on the graphs, and a strict monitor
// ends the request before any token.
func TestLayerBlowUpIsNamed(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 4,
		TensorScale: map[string]float64{"model.layers.3.mlp.down_proj.weight": 1e30}})
	for _, opts := range []Options{{}, {GraphDecode: true}} {
		e := open(t, model, opts)
		mon := guard.NewMonitor(guard.MonitorOptions{Strict: true})
		res, err := e.Generate(context.Background(), Request{PromptIDs: []int{1, 5, 9}, MaxNewTokens: 4, Monitor: mon}, nil)
		var p *guard.Problem
		if !errors.As(err, &p) || p.Kind != guard.KindActivationRange || !strings.Contains(p.Message, "after decoder layer 3 ") {
			t.Fatalf("graph decode %v: got %v, want the blow-up after layer 3", opts.GraphDecode, err)
		}
		if res == nil || len(res.GeneratedIDs) != 0 || res.StopReason != StopError {
			t.Errorf("graph decode %v: result %+v, want no token and stop reason %q", opts.GraphDecode, res, StopError)
		}
	}
}

// Issue #13 case 6, in the engine: logits that hold NaN end the sequence with an error naming the section, with
// or without a monitor; no token 0 comes out of them.
func TestNaNLogitsEndTheSequence(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 4,
		TensorScale: map[string]float64{"model.layers.1.self_attn.o_proj.weight": math.NaN()}})
	e := open(t, model, Options{})
	res, err := e.Generate(context.Background(), Request{PromptIDs: []int{1, 5, 9}, MaxNewTokens: 4}, func(Token) error {
		t.Error("a token was chosen from NaN logits")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "NaN") || !strings.Contains(err.Error(), sections.Anchor(sections.NaN)) {
		t.Fatalf("got %v, want an error about NaN logits naming %s", err, sections.NaN)
	}
	if res == nil || res.StopReason != StopError {
		t.Errorf("result %+v, want stop reason %q", res, StopError)
	}
	// A non-strict monitor warns, naming the first layer whose output was NaN; the sequence still ends.
	mon := guard.NewMonitor(guard.MonitorOptions{})
	if _, err := e.Generate(context.Background(), Request{PromptIDs: []int{1, 5, 9}, MaxNewTokens: 4, Monitor: mon}, nil); err == nil {
		t.Fatal("NaN logits with a non-strict monitor: no error")
	}
	if p := mon.Problems(); len(p) == 0 || p[0].Kind != guard.KindActivationNaN || !strings.Contains(p[0].Message, "after decoder layer 1 ") {
		t.Errorf("monitor saw %+v, want NaN after layer 1 first", p)
	}
}

// Each request's own monitor sees its own sequence: in a batch, every one records a peak, and a healthy model
// raises nothing.
func TestMonitorPerRequest(t *testing.T) {
	e := open(t, writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 5}), Options{})
	reqs := []Request{{PromptIDs: []int{1, 2}, MaxNewTokens: 3}, {PromptIDs: []int{1, 7, 8, 9}, MaxNewTokens: 5}}
	for i := range reqs {
		reqs[i].Monitor = guard.NewMonitor(guard.MonitorOptions{Strict: true})
	}
	if _, err := e.GenerateBatch(context.Background(), reqs, nil); err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		v, layer, _ := r.Monitor.PeakActivation()
		if layer < 0 || v <= 0 || len(r.Monitor.Problems()) != 0 {
			t.Errorf("request %d: peak %v after layer %d, problems %v", i, v, layer, r.Monitor.Problems())
		}
	}
}
