package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/synth"
)

// batchRequests are greedy stories260K requests with prompts of different lengths and different token limits,
// so that the sequences prefill with padding and finish at different steps (some on EOS).
func batchRequests(t *testing.T) []Request {
	golden := testutil.StoriesGolden(t)[0]
	return []Request{
		{PromptIDs: golden.PromptIDs, MaxNewTokens: len(golden.GeneratedIDs)},
		{PromptIDs: testIDs, MaxNewTokens: 40},
		{PromptIDs: []int{1}, MaxNewTokens: 7},
		{PromptIDs: []int{1, 403, 407}, MaxNewTokens: 120},
		{PromptIDs: testIDs[:9], MaxNewTokens: 1},
		{PromptIDs: []int{1, 500, 3, 77, 20}, MaxNewTokens: 60, PrefillChunk: 2},
		// Stops on a token the golden continuation produces by its 31st step.
		{PromptIDs: golden.PromptIDs, MaxNewTokens: 100, StopIDs: []int{golden.GeneratedIDs[30]}},
	}
}

// TestGenerateBatchMatchesAlone: greedy generation of several stories260K prompts in one batch gives exactly
// the ids and stop reasons of each prompt generated alone, and the golden case reproduces inside the batch,
// whichever way the weights reach the device.
func TestGenerateBatchMatchesAlone(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	ctx := context.Background()
	reqs := batchRequests(t)
	golden := testutil.StoriesGolden(t)[0]
	for _, mode := range []struct {
		name string
		opts Options
	}{
		{"streamed", Options{}},
		{"resident", Options{Resident: true}},
		{"stream-all", Options{StreamAll: true, Prefetch: 1, MaxLayerBuffers: 1}},
		{"graph-decode", Options{GraphDecode: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			e := open(t, model, mode.opts)
			var alone []*Result
			for _, r := range reqs {
				res, err := e.Generate(ctx, r, nil)
				if err != nil {
					t.Fatal(err)
				}
				alone = append(alone, res)
			}
			var order []int // the request index of every token reported
			counts := make([]int, len(reqs))
			batch, err := e.GenerateBatch(ctx, reqs, func(seq int, tok Token) error {
				counts[seq]++
				if tok.Step != counts[seq] {
					t.Errorf("request %d: token %d reported as step %d", seq, counts[seq], tok.Step)
				}
				order = append(order, seq)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(batch) != len(reqs) {
				t.Fatalf("%d results for %d requests", len(batch), len(reqs))
			}
			stops := map[string]bool{}
			for i, res := range batch {
				if !slices.Equal(res.GeneratedIDs, alone[i].GeneratedIDs) || res.StopReason != alone[i].StopReason {
					t.Errorf("request %d in a batch: %v (%s)\nalone: %v (%s)", i, res.GeneratedIDs, res.StopReason, alone[i].GeneratedIDs, alone[i].StopReason)
				}
				if !slices.Equal(res.PromptIDs, reqs[i].PromptIDs) {
					t.Errorf("request %d: prompt ids %v, want %v", i, res.PromptIDs, reqs[i].PromptIDs)
				}
				if counts[i] != len(res.GeneratedIDs) {
					t.Errorf("request %d: %d tokens reported, %d generated", i, counts[i], len(res.GeneratedIDs))
				}
				stops[res.StopReason] = true
			}
			if !slices.Equal(batch[0].GeneratedIDs, golden.GeneratedIDs) {
				t.Errorf("golden case inside a batch:\n got %v\nwant %v", batch[0].GeneratedIDs, golden.GeneratedIDs)
			}
			// The requests really finish at different steps, for different reasons.
			if !stops[StopEOS] || !stops[StopMaxNewTokens] {
				t.Errorf("stop reasons %v: the test wants both eos and max_new_tokens", stops)
			}
			if last := order[len(order)-1]; last != 0 {
				t.Errorf("the last token reported belongs to request %d, want the longest, 0", last)
			}
		})
	}
}

// TestGenerateBatchSampling: each sequence samples with its own seed and parameters: a sampled request gives
// the same ids in a batch as alone, and two requests differing only in seed differ.
func TestGenerateBatchSampling(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 21})
	e := open(t, model, Options{})
	ctx := context.Background()
	req := func(seed uint64) Request {
		return Request{PromptIDs: []int{1, 5, 9}, MaxNewTokens: 20, StopIDs: []int{},
			Sampling: Sampling{Temperature: 1.5, TopK: 20, Seed: seed}}
	}
	reqs := []Request{req(1), {PromptIDs: []int{1, 7}, MaxNewTokens: 20, StopIDs: []int{}}, req(2)}
	batch, err := e.GenerateBatch(ctx, reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		alone, err := e.Generate(ctx, r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(batch[i].GeneratedIDs, alone.GeneratedIDs) {
			t.Errorf("request %d: batch %v, alone %v", i, batch[i].GeneratedIDs, alone.GeneratedIDs)
		}
	}
	if slices.Equal(batch[0].GeneratedIDs, batch[2].GeneratedIDs) {
		t.Errorf("seeds 1 and 2 sampled the same ids %v", batch[0].GeneratedIDs)
	}
}

// TestGenerateBatchCallerStopsOne: ErrStopped from the callback ends only that sequence.
func TestGenerateBatchCallerStopsOne(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 22})
	e := open(t, model, Options{})
	reqs := []Request{
		{PromptIDs: []int{1, 2, 3}, MaxNewTokens: 10, StopIDs: []int{}},
		{PromptIDs: []int{1, 4}, MaxNewTokens: 10, StopIDs: []int{}},
	}
	res, err := e.GenerateBatch(context.Background(), reqs, func(seq int, tok Token) error {
		if seq == 1 && tok.Step == 3 {
			return ErrStopped
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res[0].GeneratedIDs) != 10 || res[0].StopReason != StopMaxNewTokens {
		t.Errorf("request 0: %d tokens (%s), want 10 (max_new_tokens)", len(res[0].GeneratedIDs), res[0].StopReason)
	}
	if len(res[1].GeneratedIDs) != 3 || res[1].StopReason != StopCaller {
		t.Errorf("request 1: %d tokens (%s), want 3 (stopped)", len(res[1].GeneratedIDs), res[1].StopReason)
	}
	// Another error ends the whole batch with it.
	boom := errors.New("boom")
	if _, err := e.GenerateBatch(context.Background(), reqs, func(int, Token) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("got %v, want the callback's error", err)
	}
}

// TestGenerateBatchErrors: a bad request is refused before any work, naming its index.
func TestGenerateBatchErrors(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 23})
	e := open(t, model, Options{})
	ctx := context.Background()
	if _, err := e.GenerateBatch(ctx, nil, nil); err == nil {
		t.Error("an empty batch succeeded")
	}
	for _, c := range []struct {
		bad  Request
		want string
	}{
		{Request{}, "request 1: empty prompt"},
		{Request{PromptIDs: make([]int, 60), MaxNewTokens: 10}, "request 1: prompt (60 tokens) + max new tokens (10)"},
		{Request{PromptIDs: []int{1}, Sampling: Sampling{Temperature: -1}}, "request 1: temperature"},
		{Request{PromptIDs: []int{1, 99}}, "request 1: prompt token id 99 at position 1 is outside the vocabulary"},
	} {
		_, err := e.GenerateBatch(ctx, []Request{{PromptIDs: []int{1}, MaxNewTokens: 2}, c.bad}, func(int, Token) error {
			t.Fatal("a token was generated")
			return nil
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
		if err := e.CheckRequest(c.bad); err == nil || !strings.Contains(c.want, err.Error()[:10]) {
			t.Errorf("CheckRequest: got %v, want the error of %q", err, c.want)
		}
	}
}

// TestGenerateEach: with MaxBatch 2, a request joins as soon as another ends (the short ones run beside the long
// one: as many passes as the long one needs, not one batch after another), every greedy result equals its solo
// run, and the results come in request order, each as soon as it and those before it are done: the first,
// short, before the long second one ends.
func TestGenerateEach(t *testing.T) {
	model := writeTiny(t, synth.Options{Shape: tinyShape(true), Seed: 24})
	e := open(t, model, Options{MaxBatch: 2})
	ctx := context.Background()
	lens := []int{4, 30, 4, 4, 4, 4, 4}
	var reqs []Request
	var alone []*Result
	for i, n := range lens {
		reqs = append(reqs, Request{PromptIDs: []int{1, 3 + i, 7}, MaxNewTokens: n, StopIDs: []int{}})
		res, err := e.Generate(ctx, reqs[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		alone = append(alone, res)
	}
	steps := e.Load().Steps
	delivered := make(chan struct{}) // result 0 was handed over
	var order []int
	err := e.GenerateEach(ctx, reqs, func(seq int, tok Token) error {
		if seq == 1 && tok.Step == 10 { // the long request waits (holding the loop) for result 0
			select {
			case <-delivered:
			case <-time.After(10 * time.Second):
				t.Error("result 0 was not handed over while the long request ran")
			}
		}
		return nil
	}, func(i int, res *Result, err error) error {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
		if i == 0 {
			close(delivered)
		}
		order = append(order, i)
		if !slices.Equal(res.GeneratedIDs, alone[i].GeneratedIDs) || res.StopReason != alone[i].StopReason {
			t.Errorf("request %d: %v (%s), alone %v (%s)", i, res.GeneratedIDs, res.StopReason, alone[i].GeneratedIDs, alone[i].StopReason)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(order, []int{0, 1, 2, 3, 4, 5, 6}) {
		t.Errorf("results in order %v", order)
	}
	// Fixed pairs would take 30 + 4 + 4 + 4 passes; joining as others end, the long request's 30 (and the
	// passes of the joining prompts, each a pass of its own at most).
	passes := e.Load().Steps - steps
	t.Logf("%d passes", passes)
	if passes > int64(30+len(lens)) {
		t.Errorf("%d passes, want at most %d: requests did not join as others ended", passes, 30+len(lens))
	}
}
