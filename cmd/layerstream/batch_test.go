package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/testutil"
)

func writeBatchFile(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prompts.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBatchFile: every line gets one JSON object, in input order, across several batches, with its own token
// limit; the golden prompt reproduces llama2.c inside a batch.
func TestBatchFile(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	t.Setenv("LAYERSTREAM_CACHE", t.TempDir())
	golden := testutil.StoriesGolden(t)[0]
	path := writeBatchFile(t,
		`{"prompt": "Once upon a time"}`,
		`{"ids": [1, 403, 407], "max_new_tokens": 3}`,
		``,
		`{"prompt": "The cat", "max_new_tokens": 5, "temperature": 0.8, "seed": 7}`,
		`{"ids": [1], "max_new_tokens": 1}`,
		`{"prompt": "Once upon a time", "max_new_tokens": 12}`,
	)
	o := generateOptions{model: model, batchFile: path, batchSize: 2, maxNew: 40, temperature: -1, topK: -1, topP: -1, repetitionPenalty: -1}
	var out, stderr bytes.Buffer
	if err := runBatch(context.Background(), o, &out, &stderr); err != nil {
		t.Fatal(err)
	}
	var got []batchResultJSON
	d := json.NewDecoder(&out)
	for d.More() {
		var r batchResultJSON
		if err := d.Decode(&r); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) != 5 {
		t.Fatalf("%d output lines for 5 prompts:\n%s", len(got), out.String())
	}
	if !slices.Equal(got[0].PromptIDs, golden.PromptIDs) || !slices.Equal(got[0].GeneratedIDs, golden.GeneratedIDs[:40]) ||
		!strings.HasPrefix(got[0].Text, ", there was a little girl named Lily.") {
		t.Errorf("line 1: %+v, want the golden continuation", got[0])
	}
	if !slices.Equal(got[1].PromptIDs, []int{1, 403, 407}) || len(got[1].GeneratedIDs) != 3 || got[1].StopReason != "max_new_tokens" {
		t.Errorf("line 2: %+v", got[1])
	}
	if len(got[2].GeneratedIDs) != 5 || len(got[3].GeneratedIDs) != 1 {
		t.Errorf("lines 4 and 5: %d and %d tokens, want 5 and 1", len(got[2].GeneratedIDs), len(got[3].GeneratedIDs))
	}
	if !slices.Equal(got[4].GeneratedIDs, golden.GeneratedIDs[:12]) {
		t.Errorf("line 6: %v, want %v", got[4].GeneratedIDs, golden.GeneratedIDs[:12])
	}
	if !strings.Contains(stderr.String(), "5 sequences, 61 tokens generated") {
		t.Errorf("stderr lacks the aggregate line:\n%s", stderr.String())
	}
}

// TestBatchFileBadLines: a bad line is refused before any generation, naming the file's line.
func TestBatchFileBadLines(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	t.Setenv("LAYERSTREAM_CACHE", t.TempDir())
	good := `{"ids": [1, 2]}`
	for _, c := range []struct {
		line, want string
	}{
		{`{"prompt": "a"`, "line 2: unexpected EOF"},
		{`["a"]`, "line 2: json: cannot unmarshal array"},
		{`{"prompt": "a", "ids": [1]}`, `line 2: give exactly one of "prompt" and "ids"`},
		{`{}`, `line 2: give exactly one of "prompt" and "ids"`},
		{`{"promt": "a"}`, `line 2: json: unknown field "promt"`},
		{`{"ids": [1]} {"ids": [2]}`, "line 2: more than one JSON value"},
		{`{"ids": [1], "max_new_tokens": 600}`, "line 2: prompt (1 tokens) + max new tokens (600)"},
		{`{"ids": [1, 100000]}`, "line 2: prompt token id 100000"},
		{`{"ids": [1], "temperature": -2}`, "line 2: temperature must be finite and ≥ 0"},
		{`{"ids": [1], "repetition_penalty": 0}`, "line 2: repetition_penalty must be positive (1 is off)"},
	} {
		path := writeBatchFile(t, good, c.line, good)
		o := generateOptions{model: model, batchFile: path, batchSize: 4, maxNew: 4, temperature: -1, topK: -1, topP: -1, repetitionPenalty: -1}
		var out bytes.Buffer
		err := runBatch(context.Background(), o, &out, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("line %s: got %v, want an error containing %q", c.line, err, c.want)
		}
		if out.Len() != 0 {
			t.Errorf("line %s: output before the error: %q", c.line, out.String())
		}
	}
	o := generateOptions{model: model, batchFile: writeBatchFile(t, "", " "), batchSize: 4}
	if err := runBatch(context.Background(), o, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "no prompts") {
		t.Errorf("empty file: got %v", err)
	}
}

// TestBatchFileJoinsAsLinesEnd: lines of uneven lengths through --batch-size 2 (each joining as another ends)
// give each line's greedy result alone, in input order.
func TestBatchFileJoinsAsLinesEnd(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	t.Setenv("LAYERSTREAM_CACHE", t.TempDir())
	lens := []int{60, 3, 9, 2, 40, 5, 1}
	var lines []string
	for i, n := range lens {
		lines = append(lines, fmt.Sprintf(`{"ids": [1, %d, 403], "max_new_tokens": %d}`, 300+i, n))
	}
	o := generateOptions{model: model, batchFile: writeBatchFile(t, lines...), batchSize: 2, maxNew: 8, temperature: 0, topK: -1, topP: -1, repetitionPenalty: -1}
	var out bytes.Buffer
	if err := runBatch(context.Background(), o, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(context.Background(), model, engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	d := json.NewDecoder(&out)
	for i, n := range lens {
		var got batchResultJSON
		if err := d.Decode(&got); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		alone, err := e.Generate(context.Background(), engine.Request{PromptIDs: []int{1, 300 + i, 403}, MaxNewTokens: n}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.GeneratedIDs, alone.GeneratedIDs) || got.StopReason != alone.StopReason || !slices.Equal(got.PromptIDs, alone.PromptIDs) {
			t.Errorf("line %d: %v (%s), alone %v (%s)", i+1, got.GeneratedIDs, got.StopReason, alone.GeneratedIDs, alone.StopReason)
		}
	}
	if d.More() {
		t.Errorf("more output lines than input lines")
	}
}

// cancelAfter is a writer that cancels a context once it has been written n times.
type cancelAfter struct {
	bytes.Buffer
	n      int
	cancel context.CancelFunc
}

func (w *cancelAfter) Write(p []byte) (int, error) {
	if w.n--; w.n == 0 {
		w.cancel()
	}
	return w.Buffer.Write(p)
}

// TestBatchFileInterrupted: after Ctrl-C the lines printed are complete JSON objects, the first lines of the
// file in order (a line cut short says "cancelled"), and the error says how many.
func TestBatchFileInterrupted(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	t.Setenv("LAYERSTREAM_CACHE", t.TempDir())
	var lines []string
	for i := range 12 {
		lines = append(lines, fmt.Sprintf(`{"ids": [1, %d], "max_new_tokens": %d}`, 300+i, 3+(i%3)*100))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &cancelAfter{n: 1, cancel: cancel}
	o := generateOptions{model: model, batchFile: writeBatchFile(t, lines...), batchSize: 3, maxNew: 8, temperature: 0, topK: -1, topP: -1, repetitionPenalty: -1}
	err := runBatch(ctx, o, out, io.Discard)
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "interrupted; the first") {
		t.Fatalf("got %v, want the interruption", err)
	}
	d := json.NewDecoder(&out.Buffer)
	n := 0
	for ; d.More(); n++ {
		var r batchResultJSON
		if err := d.Decode(&r); err != nil {
			t.Fatal(err)
		}
		if r.PromptIDs[1] != 300+n || (r.StopReason != "max_new_tokens" && r.StopReason != "cancelled") {
			t.Errorf("line %d printed: %+v", n+1, r)
		}
	}
	if n == 0 || !strings.Contains(err.Error(), fmt.Sprintf("the first %d of 12 lines", n)) {
		t.Errorf("%d lines printed, error %v", n, err)
	}
}

// TestBatchFileLinesSampleApart: lines without a seed of their own sample with the run's seed plus their line
// number less one, so that several lines of the same prompt give several samples, each reproduced by the seed
// its output names; a line's own seed is kept.
func TestBatchFileLinesSampleApart(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	t.Setenv("LAYERSTREAM_CACHE", t.TempDir())
	path := writeBatchFile(t,
		`{"prompt": "Once upon a time"}`,
		`{"prompt": "Once upon a time"}`,
		``,
		`{"prompt": "Once upon a time", "seed": 5}`,
		`{"prompt": "Once upon a time"}`,
	)
	for _, seed := range []*uint64{nil, new(uint64(40))} {
		o := generateOptions{model: model, batchFile: path, batchSize: 4, maxNew: 24, temperature: 1, topK: -1, topP: -1, repetitionPenalty: -1}
		if seed != nil {
			o.seed = seedFlag{v: *seed, set: true}
		}
		var out bytes.Buffer
		if err := runBatch(context.Background(), o, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		var got []batchResultJSON
		for d := json.NewDecoder(&out); d.More(); {
			var r batchResultJSON
			if err := d.Decode(&r); err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
		if len(got) != 4 {
			t.Fatalf("%d output lines for 4 prompts", len(got))
		}
		base := got[0].Seed
		if seed != nil && base != *seed {
			t.Errorf("--seed %d: line 1 sampled with seed %d", *seed, base)
		}
		if want := []uint64{base, base + 1, 5, base + 4}; got[1].Seed != want[1] || got[2].Seed != want[2] || got[3].Seed != want[3] {
			t.Errorf("seeds %d %d %d %d, want %v", got[0].Seed, got[1].Seed, got[2].Seed, got[3].Seed, want)
		}
		if slices.Equal(got[0].GeneratedIDs, got[1].GeneratedIDs) && slices.Equal(got[1].GeneratedIDs, got[3].GeneratedIDs) {
			t.Errorf("three lines of the same prompt at temperature 1 sampled the same tokens: %v", got[0].GeneratedIDs)
		}
	}
}
