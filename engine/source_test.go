package engine

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/synth"
)

// Issue #13 case 4, as generate meets it: weights of the same shapes saved over the checkpoint after its first
// use, and an edited config.json. Open must run the new weights with the new config, not the old split.
func TestOpenFollowsChangedCheckpoint(t *testing.T) {
	ctx := context.Background()
	model := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 8})
	other := writeTiny(t, synth.Options{Shape: tinyShape(false), Seed: 9}) // the "fine-tune"
	ids := []int{1, 4, 9, 16}
	before, err := open(t, model, Options{}).Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	want, err := open(t, other, Options{}).Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if maxDiff(before, want) == 0 {
		t.Fatal("the two checkpoints give the same logits")
	}
	files, _ := filepath.Glob(filepath.Join(other, "*.safetensors"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(model, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e := open(t, model, Options{})
	got, err := e.Logits(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if d := maxDiff(got, want); d != 0 {
		t.Fatalf("after overwriting the weights, logits differ from the new weights' by %g (the old split ran)", d)
	}

	// An edited config.json reaches the engine too.
	path := filepath.Join(model, "config.json")
	b, _ := os.ReadFile(path)
	var cfg map[string]any
	json.Unmarshal(b, &cfg)
	cfg["rms_norm_eps"] = 0.25
	b, _ = json.Marshal(cfg)
	os.WriteFile(path, b, 0o644)
	if eps := open(t, model, Options{}).Config().RMSNormEps; eps != 0.25 {
		t.Fatalf("engine runs rms_norm_eps %g after config.json was edited to 0.25", eps)
	}
}

// TestOpenCheckpointShortGGUF: a .gguf file too short to be one (empty, cut inside its header) is refused saying
// so and naming the file, not as "neither a shard folder, a GGUF file nor a checkpoint folder".
func TestOpenCheckpointShortGGUF(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]string{"": "the file is empty (0 bytes)", "GGUF\x03\x00\x00\x00": "the file is 8 bytes, too short for a GGUF header"} {
		path := filepath.Join(dir, "model.gguf")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := OpenCheckpoint(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want an error naming the file and saying %q", content, err, want)
		}
	}
}
