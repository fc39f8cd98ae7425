package queue

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/layerstream/layerstream/batchfile"
	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/synth"
)

// Environment of a worker subprocess (TestMain): the test binary run again as a worker, to be killed with SIGKILL.
const (
	envWorkerURL   = "LAYERSTREAM_QUEUE_TEST_WORKER_URL"
	envWorkerModel = "LAYERSTREAM_QUEUE_TEST_WORKER_MODEL"
	envWorkerBatch = "LAYERSTREAM_QUEUE_TEST_WORKER_BATCH" // default 8
)

// testConfig is the queue of the tests: a short ack wait, so that a killed worker's prompts come back soon.
var testConfig = Config{Stream: "TEST", AckWait: 2 * time.Second}

// TestMain runs the tests with the layerstream cache in a temporary folder, or, in a worker subprocess, a worker.
func TestMain(m *testing.M) {
	if url := os.Getenv(envWorkerURL); url != "" {
		os.Exit(workerProcess(url, os.Getenv(envWorkerModel)))
	}
	os.Exit(testutil.RunWithCache(m))
}

// workerProcess serves the queue at url with the model until SIGTERM.
func workerProcess(url, model string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	batch, _ := strconv.Atoi(os.Getenv(envWorkerBatch))
	if batch < 1 {
		batch = 8
	}
	if err := runWorker(ctx, url, model, batch, time.Second, nil); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

// runWorker opens the model and serves the queue at url until ctx ends.
func runWorker(ctx context.Context, url, model string, batch int, grace time.Duration, m *Metrics) error {
	e, err := engine.Open(context.Background(), model, engine.Options{MaxBatch: batch})
	if err != nil {
		return err
	}
	defer e.Close()
	nc, js, err := Connect(url, "test worker")
	if err != nil {
		return err
	}
	defer nc.Close()
	fmt.Fprintln(os.Stderr, "worker: ready")
	w := &Worker{JS: js, Config: testConfig, Engine: e, BatchSize: batch, Grace: grace, Metrics: m, PollWait: 200 * time.Millisecond}
	return w.Run(ctx)
}

// tinyModel writes a small synthetic checkpoint (no tokenizer: the prompts are ids).
func tinyModel(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	shape := synth.Shape{HiddenSize: 64, IntermediateSize: 128, NumLayers: 8, NumHeads: 4, NumKVHeads: 2,
		VocabSize: 128, MaxPositionEmbeddings: 64, BOSTokenID: 1, EOSTokenID: 2}
	if err := synth.Write(dir, synth.Options{Shape: shape, DType: checkpoint.F32, Seed: 39, Std: 0.2}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// promptsFile writes n lines of random id prompts, a few sampled rather than greedy (their seeds then matter).
func promptsFile(t *testing.T, n int) string {
	t.Helper()
	r := rand.New(rand.NewPCG(39, 1))
	var b strings.Builder
	for i := range n {
		ids := []int{1}
		for range 1 + r.IntN(6) {
			ids = append(ids, 3+r.IntN(120))
		}
		js, _ := json.Marshal(ids)
		switch {
		case i%10 == 3:
			fmt.Fprintf(&b, "{\"ids\": %s, \"temperature\": 0.9}\n", js)
		case i%7 == 0:
			fmt.Fprintf(&b, "{\"ids\": %s, \"max_new_tokens\": 4}\n", js)
		default:
			fmt.Fprintf(&b, "{\"ids\": %s}\n", js)
		}
	}
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// testSettings are the jobs' settings: 6 new tokens unless a line says otherwise, greedy unless it says so.
var testSettings = Settings{MaxNewTokens: 6}

// reference is what generate --batch-file gives for the file in one process (GenerateEach), one result per line.
func reference(t *testing.T, model, path string) []batchfile.Result {
	t.Helper()
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := batchfile.Parse(content, path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(context.Background(), model, engine.Options{MaxBatch: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s := testSettings
	s.Seed = ContentSeed(content)
	reqs := make([]engine.Request, len(lines))
	for i, l := range lines {
		if reqs[i], err = l.Request(s.run(e), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]batchfile.Result, len(lines))
	err = e.GenerateEach(context.Background(), reqs, nil, func(i int, res *engine.Result, err error) error {
		out[i] = batchfile.NewResult(reqs[i], res, err, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkResults checks that the results file holds exactly one result per line, in order, each equal to want's.
func checkResults(t *testing.T, path string, want []batchfile.Result) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []batchfile.Result
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var r batchfile.Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s line %d: %v", path, len(got)+1, err)
		}
		got = append(got, r)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d results for %d lines", path, len(got), len(want))
	}
	ids := map[string]bool{}
	for i, r := range got {
		if ids[r.ID] || !strings.HasSuffix(r.ID, fmt.Sprintf(".%d", i+1)) {
			t.Errorf("line %d: id %q (duplicate, or not this line's)", i+1, r.ID)
		}
		ids[r.ID] = true
		w := want[i]
		if !slices.Equal(r.PromptIDs, w.PromptIDs) || !slices.Equal(r.GeneratedIDs, w.GeneratedIDs) || r.StopReason != w.StopReason || r.Seed != w.Seed {
			t.Errorf("line %d: got %v %v %s seed %d, want %v %v %s seed %d", i+1, r.PromptIDs, r.GeneratedIDs, r.StopReason, r.Seed,
				w.PromptIDs, w.GeneratedIDs, w.StopReason, w.Seed)
		}
	}
}

// resultCount is how many results the results stream holds.
func resultCount(t *testing.T, js jetstream.JetStream) uint64 {
	return streamMsgs(t, js, testConfig.ResultsStream())
}

// streamMsgs is how many messages the stream holds (0 when it cannot be read: absent, the server restarting).
func streamMsgs(t *testing.T, js jetstream.JetStream, name string) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, name)
	if err != nil {
		return 0
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// submitAsync runs Submit in a goroutine; wait returns its summary and error.
func submitAsync(ctx context.Context, t *testing.T, url, batchFile, out string, resume bool) (wait func() (*Summary, error)) {
	t.Helper()
	nc, js, err := Connect(url, "test submit")
	if err != nil {
		t.Fatal(err)
	}
	var sum *Summary
	var wg sync.WaitGroup
	wg.Go(func() {
		sum, err = Submit(ctx, SubmitOptions{JS: js, Config: testConfig, BatchFile: batchFile, Out: out, Resume: resume, Settings: testSettings})
	})
	return func() (*Summary, error) {
		wg.Wait()
		nc.Close()
		return sum, err
	}
}

// connectJS connects a test's own observer.
func connectJS(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
