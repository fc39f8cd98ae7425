package queue

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/layerstream/layerstream/queue/queuetest"
)

// lineCount is how many whole lines the file holds.
func lineCount(path string) int {
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte("\n"))
}

// startWorker runs an in-process worker until the test ends.
func startWorker(t *testing.T, url, model string, m *Metrics) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := runWorker(ctx, url, model, 8, time.Second, m); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestSubmitResumes (issue #39): a submit interrupted after some results, run again with resume (after its
// results file lost a torn last line), continues: exactly one result per line; the second run publishes
// nothing, and a run without resume refuses the existing file.
func TestSubmitResumes(t *testing.T) {
	model, prompts := tinyModel(t), promptsFile(t, 120)
	want := reference(t, model, prompts)
	ns := queuetest.Start(t)
	out := filepath.Join(t.TempDir(), "results.jsonl")

	ctx, interrupt := context.WithCancel(context.Background())
	wait := submitAsync(ctx, t, ns.URL(), prompts, out, false)
	startWorker(t, ns.URL(), model, &Metrics{})
	waitFor(t, "30 results written", func() bool { return lineCount(out) >= 30 })
	interrupt()
	if _, err := wait(); err == nil || !strings.Contains(err.Error(), "--resume continues") {
		t.Fatalf("interrupted submit: %v", err)
	}
	f, err := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"id": "torn`) // as a crash in the middle of a write would leave it
	f.Close()

	if _, err := submitAsync(context.Background(), t, ns.URL(), prompts, out, false)(); err == nil || !strings.Contains(err.Error(), "give --resume") {
		t.Errorf("submit again without --resume: %v", err)
	}
	sum, err := submitAsync(context.Background(), t, ns.URL(), prompts, out, true)()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed: %+v", *sum)
	checkResults(t, out, want)
	if sum.Resumed < 30 || sum.Published != 0 || sum.Resumed+sum.Answered+sum.Queued != 120 {
		t.Errorf("resumed submit: %+v; want ≥ 30 lines resumed, the others answered or queued, none published", *sum)
	}
}

// TestServerRestart (issue #39): the NATS server shut down in the middle of a run and started again on the same
// store and port: the workers and submit reconnect, and every line is answered exactly once.
func TestServerRestart(t *testing.T) {
	model, prompts := tinyModel(t), promptsFile(t, 200)
	want := reference(t, model, prompts)
	ns := queuetest.Start(t)
	js := connectJS(t, ns.URL())
	out := filepath.Join(t.TempDir(), "results.jsonl")

	wait := submitAsync(context.Background(), t, ns.URL(), prompts, out, false)
	waitFor(t, "the prompts published", func() bool { return lineCount(out) == 0 && streamMsgs(t, js, testConfig.Stream) == 200 })
	m1, m2 := &Metrics{}, &Metrics{}
	startWorker(t, ns.URL(), model, m1)
	startWorker(t, ns.URL(), model, m2)
	waitFor(t, "20 results", func() bool { return resultCount(t, js) >= 20 })
	ns.Stop()
	before := m1.Done() + m2.Done()
	time.Sleep(300 * time.Millisecond)
	ns.Restart()
	start := time.Now()
	sum, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("submit: %+v; %d answered before the restart, done %s after it; workers: %d+%d done, %d+%d redelivered", *sum, before,
		time.Since(start).Round(time.Millisecond), m1.Done(), m2.Done(), m1.Redeliveries(), m2.Redeliveries())
	checkResults(t, out, want)
	if before >= 180 {
		t.Errorf("%d of 200 prompts answered before the restart: not the middle of a run", before)
	}
}

// TestRefusedLineAnswered: a line the engine refuses (more new tokens than the context holds) is answered with
// stop_reason "error" and the reason, so that it still has its one result; the others are generated.
func TestRefusedLineAnswered(t *testing.T) {
	model := tinyModel(t)
	prompts := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(prompts, []byte("{\"ids\": [1, 5]}\n{\"ids\": [1], \"max_new_tokens\": 600}\n{\"ids\": [1, 7]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ns := queuetest.Start(t)
	startWorker(t, ns.URL(), model, &Metrics{})
	out := filepath.Join(t.TempDir(), "results.jsonl")
	sum, err := submitAsync(context.Background(), t, ns.URL(), prompts, out, false)()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(out)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if sum.Failed != 1 || len(lines) != 3 || !strings.Contains(lines[1], `"stop_reason":"error"`) || !strings.Contains(lines[1], "exceeds") ||
		!strings.Contains(lines[0], `"stop_reason":"max_new_tokens"`) {
		t.Errorf("summary %+v, results:\n%s", *sum, b)
	}
}
