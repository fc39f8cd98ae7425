package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/synth"
)

// brokenModel writes a small f32 checkpoint whose tensor name is multiplied by factor (NaN: all NaN) in place.
func brokenModel(t *testing.T, name string, factor float64) string {
	t.Helper()
	dir := t.TempDir()
	shape := synth.Shape{HiddenSize: 32, IntermediateSize: 48, NumLayers: 5, NumHeads: 4, NumKVHeads: 2, VocabSize: 64,
		MaxPositionEmbeddings: 64, BOSTokenID: 1, EOSTokenID: 2}
	if err := synth.Write(dir, synth.Options{Shape: shape, DType: checkpoint.F32, Seed: 3, Std: 0.2}); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ti, ok := ck.Tensor(name)
	if !ok {
		t.Fatalf("no tensor %s", name)
	}
	b := make([]byte, ti.Length)
	if err := checkpoint.ReadTensorAt(ti, b); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(b); i += 4 {
		v := math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(float64(v)*factor)))
	}
	f, err := os.OpenFile(ti.File, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, ti.Offset); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Issue #13 case 7: down_proj of layer 3 scaled by 1e30 (activations ~1e28, finite in f32): --strict used to
// pass and print garbage; now the residual stream's check stops it, naming the layer and its section.
func TestStrictCatchesExplodingActivations(t *testing.T) {
	model := brokenModel(t, "model.layers.3.mlp.down_proj.weight", 1e30)
	var errb bytes.Buffer
	code, out := runCapturingStdout(t, []string{"generate", "--model", model, "--ids", "1,5,9", "--json", "--max-new-tokens", "4", "--strict"}, &errb)
	if code != 1 || !strings.Contains(errb.String(), "after decoder layer 3 ") || !strings.Contains(errb.String(), sections.Anchor(sections.Activations)) {
		t.Fatalf("exit %d, stdout %q, stderr %s; want 1 and the blow-up after layer 3", code, out, errb.String())
	}
	// Without --strict it warns, naming the layer.
	errb.Reset()
	runCapturingStdout(t, []string{"generate", "--model", model, "--ids", "1,5,9", "--json", "--max-new-tokens", "4"}, &errb)
	if !strings.Contains(errb.String(), "level=WARN") || !strings.Contains(errb.String(), "after decoder layer 3 ") {
		t.Errorf("without --strict: no warning naming layer 3: %s", errb.String())
	}
}

// Issue #13 case 6: with --batch-file, a checkpoint whose logits are NaN used to return token 0 and "" for every
// line with exit status 0. Now every line says it ended with an error (naming the NaN and its section), the
// exit status is 1, and --strict works with --batch-file.
func TestBatchReportsBrokenNumerics(t *testing.T) {
	model := brokenModel(t, "model.layers.1.self_attn.o_proj.weight", math.NaN())
	batch := filepath.Join(t.TempDir(), "prompts.jsonl")
	os.WriteFile(batch, []byte("{\"ids\": [1, 5, 9]}\n{\"ids\": [1, 7]}\n"), 0o644)
	for _, strict := range []bool{false, true} {
		args := []string{"generate", "--model", model, "--batch-file", batch, "--max-new-tokens", "4"}
		if strict {
			args = append(args, "--strict")
		}
		var errb bytes.Buffer
		code, out := runCapturingStdout(t, args, &errb)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if code != 1 || len(lines) != 2 || !strings.Contains(errb.String(), "2 of 2 lines ended with an error") {
			t.Fatalf("strict %v: exit %d, stdout %q, stderr %s; want 1, two lines and the count", strict, code, out, errb.String())
		}
		for i, l := range lines {
			var r batchResultJSON
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			if r.StopReason != "error" || len(r.GeneratedIDs) != 0 || !strings.Contains(r.Error, "NaN") || !strings.Contains(r.Error, "TROUBLESHOOTING.md#") {
				t.Errorf("strict %v, line %d: %+v; want stop_reason error, no tokens and an error naming NaN and its section", strict, i+1, r)
			}
		}
	}
}
