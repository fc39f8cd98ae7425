package queue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/batchfile"
	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/queue/queuetest"
	"github.com/layerstream/layerstream/synth"
)

// TestQueueThroughput is a measurement, not a test (LAYERSTREAM_QUEUE_BENCH=1; docs/scale-out.md quotes it):
// the prompts of a batch file generated in one process (GenerateEach, as generate --batch-file), then through
// the queue by 1 and by 2 worker processes, each on one core of its own (GOMAXPROCS=1, taskset): two one-core
// machines against one. Then the queue's cost per prompt: one token per prompt of a tiny model, in one process
// and through the queue.
func TestQueueThroughput(t *testing.T) {
	if os.Getenv("LAYERSTREAM_QUEUE_BENCH") == "" {
		t.Skip("a measurement: LAYERSTREAM_QUEUE_BENCH=1 go test -run TestQueueThroughput -v ./queue/")
	}
	n, _ := strconv.Atoi(os.Getenv("LAYERSTREAM_QUEUE_BENCH_PROMPTS"))
	if n == 0 {
		n = 128
	}
	shape := synth.Shape{HiddenSize: 1024, IntermediateSize: 2816, NumLayers: 8, NumHeads: 16, NumKVHeads: 4,
		VocabSize: 8192, MaxPositionEmbeddings: 256, BOSTokenID: 1, EOSTokenID: 2}
	model, prompts := benchModel(t, shape), benchPrompts(t, n, 32)
	direct, tokens := timeDirect(t, model, prompts, 16)
	t.Logf("model: hidden %d, %d layers (%.0f M parameters, f32); %d prompts, %d tokens generated, --batch-size 16", shape.HiddenSize,
		shape.NumLayers, float64(shapeParams(shape))/1e6, n, tokens)
	t.Logf("one process, 1 core: %.2f s, %.1f tokens/s", direct.Seconds(), float64(tokens)/direct.Seconds())
	for workers := 1; workers <= 2; workers++ {
		d := timeQueue(t, model, prompts, workers, 16)
		t.Logf("queue, %d worker(s) of 1 core: %.2f s, %.1f tokens/s, %.2fx one process", workers, d.Seconds(), float64(tokens)/d.Seconds(), direct.Seconds()/d.Seconds())
	}
	tiny := benchModel(t, synth.Shape{HiddenSize: 32, IntermediateSize: 48, NumLayers: 2, NumHeads: 4, NumKVHeads: 2,
		VocabSize: 64, MaxPositionEmbeddings: 64, BOSTokenID: 1, EOSTokenID: 2})
	small := benchPrompts(t, 1000, 1)
	direct, _ = timeDirect(t, tiny, small, 16)
	q := timeQueue(t, tiny, small, 1, 16)
	t.Logf("queue cost: 1000 prompts of 1 token of a 2-layer tiny model: one process %.3f s, queue (1 worker) %.3f s: %.2f ms per prompt",
		direct.Seconds(), q.Seconds(), (q-direct).Seconds()*1000/1000)
}

func shapeParams(s synth.Shape) int {
	hd := s.HiddenSize / s.NumHeads
	layer := 2*s.HiddenSize*s.HiddenSize + 2*s.NumKVHeads*hd*s.HiddenSize + 3*s.HiddenSize*s.IntermediateSize
	return s.NumLayers*layer + 2*s.VocabSize*s.HiddenSize
}

func benchModel(t *testing.T, shape synth.Shape) string {
	dir := t.TempDir()
	if err := synth.Write(dir, synth.Options{Shape: shape, DType: checkpoint.F32, Seed: 5, Std: 0.2}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// benchPrompts writes n prompts of 4 ids, each generating at most tokens tokens (greedy; fewer when the
// synthetic model happens to produce its end token).
func benchPrompts(t *testing.T, n, tokens int) string {
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for range n {
		fmt.Fprintf(&b, "{\"ids\": [1, %d, %d, %d], \"max_new_tokens\": %d}\n", 3+r.IntN(60), 3+r.IntN(60), 3+r.IntN(60), tokens)
	}
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// timeDirect times GenerateEach over the file's lines on one core (the model opened, and split, beforehand).
func timeDirect(t *testing.T, model, path string, batch int) (time.Duration, int) {
	lines, err := batchfile.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	e, err := engine.Open(context.Background(), model, engine.Options{MaxBatch: batch})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	reqs := make([]engine.Request, len(lines))
	for i, l := range lines {
		reqs[i], _ = l.Request(testSettings.run(e), nil, nil)
	}
	start := time.Now()
	res, err := e.GenerateBatch(context.Background(), reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	d, tokens := time.Since(start), 0
	for _, r := range res {
		tokens += len(r.GeneratedIDs)
	}
	return d, tokens
}

// timeQueue times a Submit of the file served by workers worker processes, each on a core of its own, started
// (model loaded) beforehand.
func timeQueue(t *testing.T, model, path string, workers, batch int) time.Duration {
	ns := queuetest.Start(t)
	for i := range workers {
		cmd := exec.Command("taskset", "-c", strconv.Itoa(i%runtime.NumCPU()), os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envWorkerURL+"="+ns.URL(), envWorkerModel+"="+model, envWorkerBatch+"="+strconv.Itoa(batch), "GOMAXPROCS=1")
		stderr := &testutil.SyncBuffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		waitFor(t, "a worker", func() bool { return strings.Contains(stderr.String(), "serving the queue") })
	}
	start := time.Now()
	if _, err := submitAsync(context.Background(), t, ns.URL(), path, filepath.Join(t.TempDir(), "out.jsonl"), false)(); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}
