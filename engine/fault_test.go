package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/synth"
)

// TestMappedShardTruncatedWhileComputing: a shard file truncated in place after it was mapped makes compute's
// reads fault (SIGBUS); the engine returns an error naming the shard and the TROUBLESHOOTING section instead of
// crashing, whether the fault hits a kernels.ParallelFor worker (a large matrix) or the calling goroutine (a small one).
func TestMappedShardTruncatedWhileComputing(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("shards are mapped on Linux only")
	}
	shape := tinyShape(false)
	shape.IntermediateSize = 256 // gate_proj has 256 output rows: ParallelFor runs it on workers
	model := writeTiny(t, synth.Options{Shape: shape, Seed: 9, DType: checkpoint.BF16})
	e := open(t, model, Options{})
	if _, err := e.Generate(context.Background(), Request{PromptIDs: []int{1, 5}, MaxNewTokens: 2}, nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		unit, tensor string
		rows         int
	}{{"layer.1", "mlp.gate_proj.weight", 256}, {"layer.2", "self_attn.o_proj.weight", 32}} {
		l, err := e.store.set.Map(context.Background(), c.unit, shards.NewBuffer(0)) // the kept mapping
		if err != nil {
			t.Fatal(err)
		}
		w := l.Tensors[unitPrefix(c.unit)+c.tensor]
		if int(w.Shape[0]) != c.rows {
			t.Fatalf("%s: %v", c.tensor, w.Shape)
		}
		if err := os.Truncate(filepath.Join(e.store.set.Dir, l.Unit.File), 4096); err != nil {
			t.Fatal(err)
		}
		x := newHostArray(1, 1, int(w.Shape[1]))
		err = e.store.guardMapped(func() error { hostOps{}.Linear(x, &deviceTensor{flat: rawView(w)}, nil); return nil })
		var f *mappedFault
		if !errors.As(err, &f) || f.unit != c.unit || !strings.Contains(err.Error(), sections.SIGBUS) {
			t.Fatalf("%s: %v, want a mapped-shard fault naming %s", c.tensor, err, c.unit)
		}
	}
	// The embedding, read in place from its kept mapping: generation ends with the error instead of a crash.
	embed, _ := e.store.set.Unit(unitEmbed)
	if err := os.Truncate(filepath.Join(e.store.set.Dir, embed.File), 0); err != nil {
		t.Fatal(err)
	}
	_, err := e.Generate(context.Background(), Request{PromptIDs: []int{1, 5}, MaxNewTokens: 2}, nil)
	var f *mappedFault
	if !errors.As(err, &f) || f.unit != unitEmbed {
		t.Fatalf("embedding truncated: %v, want a mapped-shard fault naming %s", err, unitEmbed)
	}
	// A panic that is not a fault in a mapping goes on up, from a worker too.
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(error).Error(), "index out of range") {
			t.Fatalf("recovered %v, want the worker's index panic", r)
		}
	}()
	e.store.guardMapped(func() error {
		kernels.ParallelFor(1024, func(lo, hi int) {
			var s []int
			_ = s[lo]
		})
		return nil
	})
}
