package queue

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/queue/queuetest"
)

// TestWorkersAnswerEachLineOnce (issue #39): three workers on 200 prompts, one killed with SIGKILL while it holds
// prompts (a subprocess), one stopped gracefully (its context cancelled, as SIGTERM does) with a grace period too
// short to finish: every line is answered exactly once, each answer the one generate --batch-file gives in one
// process, sampled lines included (the same seed on any worker).
func TestWorkersAnswerEachLineOnce(t *testing.T) {
	model, prompts := tinyModel(t), promptsFile(t, 200)
	want := reference(t, model, prompts) // (also splits the model into the cache the workers share)
	ns := queuetest.Start(t)
	js := connectJS(t, ns.URL())

	// The worker to kill starts first, so that it holds prompts from the start.
	killed := exec.Command(os.Args[0], "-test.run=^$")
	killed.Env = append(os.Environ(), envWorkerURL+"="+ns.URL(), envWorkerModel+"="+model)
	stderr := &testutil.SyncBuffer{}
	killed.Stderr = stderr
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	defer killed.Process.Kill()
	waitFor(t, "the subprocess worker", func() bool { return strings.Contains(stderr.String(), "serving the queue") })

	out := filepath.Join(t.TempDir(), "results.jsonl")
	wait := submitAsync(context.Background(), t, ns.URL(), prompts, out, false)
	waitFor(t, "the first results", func() bool { return resultCount(t, js) >= 20 })

	var wg sync.WaitGroup
	graceful, survivor := &Metrics{}, &Metrics{}
	gctx, stopGraceful := context.WithCancel(context.Background())
	defer stopGraceful()
	for _, w := range []struct {
		ctx   context.Context
		grace time.Duration
		m     *Metrics
	}{{gctx, 0, graceful}, {context.Background(), time.Second, survivor}} {
		ctx, cancel := context.WithCancel(w.ctx)
		defer cancel()
		wg.Go(func() {
			if err := runWorker(ctx, ns.URL(), model, 8, w.grace, w.m); err != nil {
				t.Error(err)
			}
		})
		t.Cleanup(func() { cancel(); wg.Wait() })
	}
	waitFor(t, "the graceful worker's first prompts", func() bool { return graceful.Done() >= 5 })
	if err := killed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed.Wait()
	stopGraceful()
	start := time.Now()
	sum, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("submit: %+v; after the kill: %s; graceful worker: %d done, %d naked; survivor: %d done, %d redelivered",
		*sum, time.Since(start).Round(time.Millisecond), graceful.Done(), graceful.Naks(), survivor.Done(), survivor.Redeliveries())
	checkResults(t, out, want)
	if survivor.Redeliveries() == 0 {
		t.Errorf("the surviving worker received no prompt again: the killed worker held none?")
	}
	if sum.Published != 200 {
		t.Errorf("published %d prompts, want 200", sum.Published)
	}
}

// TestHeartbeatKeepsAPrompt: a prompt held longer than the ack wait is not delivered again while its worker's
// heartbeats (in-progress acks every third of the ack wait) come; once they stop, it is.
func TestHeartbeatKeepsAPrompt(t *testing.T) {
	ns := queuetest.Start(t)
	js := connectJS(t, ns.URL())
	ctx := context.Background()
	c, _ := Config{Stream: "HB", AckWait: time.Second}.withDefaults()
	if err := ensureStreams(ctx, js, c); err != nil {
		t.Fatal(err)
	}
	cons, err := ensureConsumer(ctx, js, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, c.promptSubject("job.1"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	msg, err := cons.Next()
	if err != nil {
		t.Fatal(err)
	}
	stop := heartbeat(msg, c.AckWait/3)
	time.Sleep(2500 * time.Millisecond)
	if again, err := cons.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond)); err == nil {
		for m := range again.Messages() {
			t.Errorf("delivered again while its heartbeats came: %s", m.Subject())
		}
	}
	stop()
	again, err := cons.Next(jetstream.FetchMaxWait(3 * time.Second))
	if err != nil {
		t.Fatalf("not delivered again after the heartbeats stopped: %v", err)
	}
	if meta, _ := again.Metadata(); meta == nil || meta.NumDelivered != 2 {
		t.Errorf("metadata %+v, want a second delivery", meta)
	}
}
