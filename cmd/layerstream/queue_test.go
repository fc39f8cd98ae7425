package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/queue/queuetest"
	"github.com/layerstream/layerstream/synth"
)

// runCommand runs a registered command's flags and body with ctx (run's own context ends on signals only).
func runCommand(ctx context.Context, t *testing.T, args ...string) error {
	t.Helper()
	c := commands[args[0]]
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.Bool("v", false, "")
	fs.Bool("q", false, "")
	body := c.setup(fs)
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatal(err)
	}
	return body(ctx, fs.Args())
}

// freeAddr is a free loopback address.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestSubmitAndWorker (issue #39): submit and worker, as commands, give each line of a batch file the object
// generate --batch-file prints for it with the same flags (sampled lines too: the same per-line seeds), plus the
// line's id; the worker's /health and /metrics answer.
func TestSubmitAndWorker(t *testing.T) {
	model := t.TempDir()
	shape := synth.Shape{HiddenSize: 32, IntermediateSize: 48, NumLayers: 4, NumHeads: 4, NumKVHeads: 2,
		VocabSize: 64, MaxPositionEmbeddings: 64, BOSTokenID: 1, EOSTokenID: 2}
	if err := synth.Write(model, synth.Options{Shape: shape, DType: checkpoint.F32, Seed: 3, Std: 0.2}); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for i := range 30 {
		extra := ""
		if i%3 == 0 {
			extra = `, "temperature": 0.9`
		}
		lines = append(lines, fmt.Sprintf(`{"ids": [1, %d, %d]%s}`, 3+i, 40-i, extra))
	}
	prompts := writeBatchFile(t, lines...)
	var want bytes.Buffer
	o := generateOptions{model: model, batchFile: prompts, batchSize: 4, maxNew: 5, temperature: -1, topK: -1, topP: -1, repetitionPenalty: -1}
	o.seed.Set("7")
	if err := runBatch(context.Background(), o, &want, io.Discard); err != nil {
		t.Fatal(err)
	}

	ns := queuetest.Start(t)
	listen := freeAddr(t)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := runCommand(ctx, t, "worker", "--queue", ns.URL(), "--model", model, "--batch-size", "4", "--listen", listen); err != nil {
			t.Error(err)
		}
	})
	defer func() { stop(); wg.Wait() }()
	out := filepath.Join(t.TempDir(), "results.jsonl")
	if err := runCommand(context.Background(), t, "submit", "--queue", ns.URL(), "--batch-file", prompts, "--out", out, "--max-new-tokens", "5", "--seed", "7"); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	gotLines, wantLines := strings.Split(strings.TrimSpace(string(got)), "\n"), strings.Split(strings.TrimSpace(want.String()), "\n")
	if len(gotLines) != len(wantLines) {
		t.Fatalf("%d results for %d lines", len(gotLines), len(wantLines))
	}
	for i := range gotLines {
		var g map[string]any
		if err := json.Unmarshal([]byte(gotLines[i]), &g); err != nil {
			t.Fatal(err)
		}
		if id, _ := g["id"].(string); !strings.HasSuffix(id, fmt.Sprintf(".%d", i+1)) {
			t.Errorf("line %d: id %q", i+1, id)
		}
		delete(g, "id")
		b, _ := json.Marshal(g)
		var w map[string]any
		json.Unmarshal([]byte(wantLines[i]), &w)
		wb, _ := json.Marshal(w)
		if !bytes.Equal(b, wb) {
			t.Errorf("line %d: submit gives %s, generate --batch-file %s", i+1, b, wb)
		}
	}
	// A worker counts a prompt done once it has acknowledged it, just after submit saw its stored result: the
	// last ones may still be counting, so the metrics are read again for a while.
	for path, want := range map[string]string{"/health": `"status":"ok"`, "/metrics": "layerstream_queue_prompts_done_total 30\n"} {
		var code int
		var b []byte
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			resp, err := http.Get("http://" + listen + path)
			if err != nil {
				t.Fatal(err)
			}
			b, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			code = resp.StatusCode
			if code == 200 && strings.Contains(string(b), want) || time.Now().After(deadline) {
				break
			}
		}
		if code != 200 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %s; want 200 and %q", path, code, b, want)
		}
	}
}
