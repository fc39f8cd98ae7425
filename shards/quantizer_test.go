package shards

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
)

// TestSplitRequantizesOnNewEncoder: a q8 split whose source record names another quantizer (one made before the
// scale search) is not up to date: the units holding quantized tensors are quantized again and the record
// names this build's encoder; an unquantized split records none.
func TestSplitRequantizesOnNewEncoder(t *testing.T) {
	ck := tinyCheckpoint(t, checkpoint.BF16)
	out := filepath.Join(t.TempDir(), "s")
	s, err := Split(context.Background(), ck, SplitOptions{Out: out, Quantize: Q8})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Source().Quantizer, Q8.encoder(); got != want || want == "" {
		t.Fatalf("source record's quantizer %q, want %q", got, want)
	}
	layer := filepath.Join(out, "layer.0.shard")
	before, err := os.ReadFile(layer)
	if err != nil {
		t.Fatal(err)
	}
	// A record naming the round-to-nearest encoder, as splits made before the scale search have.
	src := *s.Source()
	src.Quantizer = "q8: round-to-nearest"
	if err := writeManifest(out, s.Units(), &src); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Stat(layer)
	s, err = Split(context.Background(), ck, SplitOptions{Out: out, Quantize: Q8})
	if err != nil {
		t.Fatal(err)
	}
	if s.Source().Quantizer != Q8.encoder() {
		t.Errorf("after the re-split the record names %q", s.Source().Quantizer)
	}
	now, _ := os.Stat(layer)
	if os.SameFile(old, now) {
		t.Error("layer.0.shard was kept: a shard from another quantizer must be quantized again")
	}
	after, _ := os.ReadFile(layer)
	if !bytes.Equal(before, after) {
		t.Error("the same encoder wrote different bytes")
	}
	// Unquantized: no quantizer recorded.
	n, err := Split(context.Background(), ck, SplitOptions{Out: filepath.Join(t.TempDir(), "n")})
	if err != nil {
		t.Fatal(err)
	}
	if n.Source().Quantizer != "" {
		t.Errorf("unquantized split records quantizer %q", n.Source().Quantizer)
	}
}
