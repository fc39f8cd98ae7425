package reference

import (
	"errors"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/synth"
)

var tinyShape = synth.Shape{HiddenSize: 64, IntermediateSize: 96, NumLayers: 3, NumHeads: 4, NumKVHeads: 2, VocabSize: 128}

func writeSynth(t *testing.T, opts synth.Options) *checkpoint.Checkpoint {
	t.Helper()
	dir := t.TempDir()
	if err := synth.Write(dir, opts); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ck
}

func TestMissingLMHead(t *testing.T) {
	ck := writeSynth(t, synth.Options{Shape: tinyShape, DropLMHead: true, Seed: 1})
	_, err := Forward(ck, []int{1, 2, 3})
	if err == nil || !strings.Contains(err.Error(), `"lm_head.weight"`) || !strings.Contains(err.Error(), "tie_word_embeddings is false") {
		t.Fatalf("want an error naming lm_head.weight and tie_word_embeddings, got %v", err)
	}
}

func TestBadInput(t *testing.T) {
	ck := writeSynth(t, synth.Options{Shape: tinyShape, Seed: 1})
	if _, err := Forward(ck, nil); err == nil {
		t.Fatal("empty ids accepted")
	}
	if _, err := Forward(ck, []int{1, 128}); err == nil || !strings.Contains(err.Error(), "vocab_size 128") {
		t.Fatalf("out-of-range id: %v", err)
	}
}

// TestOverflowTripsNaNDetector scales every weight up until the logits exceed float32's range: the float64
// reference still computes them, and rounded to the float32 an engine returns they become ±Inf, which the
// Monitor reports as a NaN/Inf problem.
func TestOverflowTripsNaNDetector(t *testing.T) {
	wide := synth.Shape{HiddenSize: 512, IntermediateSize: 64, NumLayers: 2, NumHeads: 4, NumKVHeads: 4, VocabSize: 64}
	ck := writeSynth(t, synth.Options{Shape: wide, DType: checkpoint.F32, Std: 1, Scale: 1e37, Seed: 3})
	out, err := Forward(ck, []int{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	m := guard.NewMonitor(guard.MonitorOptions{Strict: true})
	var problem *guard.Problem
	for p, row := range out.Logits {
		l := make([]float32, len(row))
		for i, v := range row {
			l[i] = float32(v)
		}
		if err := m.CheckLogits(p, l); errors.As(err, &problem) {
			break
		}
	}
	if problem == nil || problem.Kind != guard.KindNaN {
		t.Fatalf("want a NaN/Inf problem, got %v", problem)
	}
	t.Log(problem)
}

// TestHeadLogits: the head applied to the last layer's hidden states gives Forward's logits exactly.
func TestHeadLogits(t *testing.T) {
	ck := writeSynth(t, synth.Options{Shape: tinyShape, Seed: 2})
	out, err := Forward(ck, []int{1, 5, 9, 2})
	if err != nil {
		t.Fatal(err)
	}
	got, err := HeadLogits(ck, out.Hidden[len(out.Hidden)-1])
	if err != nil {
		t.Fatal(err)
	}
	for p := range got {
		for i := range got[p] {
			if got[p][i] != out.Logits[p][i] {
				t.Fatalf("pos %d id %d: %g != %g", p, i, got[p][i], out.Logits[p][i])
			}
		}
	}
}
