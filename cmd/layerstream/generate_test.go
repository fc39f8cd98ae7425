package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
)

func TestGenerateJSONMatchesGolden(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	t.Setenv("LAYERSTREAM_CACHE", t.TempDir())
	c := testutil.StoriesGolden(t)[0]
	var out bytes.Buffer
	o := generateOptions{model: model, prompt: c.Prompt, maxNew: 40, json: true, temperature: -1, topK: -1, topP: -1, repetitionPenalty: -1}
	if err := runGenerate(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	var got generateJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("--json output %q: %v", out.String(), err)
	}
	if !slices.Equal(got.PromptIDs, c.PromptIDs) || !slices.Equal(got.GeneratedIDs, c.GeneratedIDs[:40]) {
		t.Errorf("prompt %v generated %v, want %v and %v", got.PromptIDs, got.GeneratedIDs, c.PromptIDs, c.GeneratedIDs[:40])
	}
	if got.StopReason != "max_new_tokens" || !strings.HasPrefix(got.Text, ", there was a little girl named Lily.") || got.Timings.TotalSeconds <= 0 {
		t.Errorf("unexpected output %+v", got)
	}

	// Streamed text.
	out.Reset()
	o.json = false
	o.maxNew = 12
	if err := runGenerate(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	if want := "Once upon a time, there was a little girl named Lily."; !strings.HasPrefix(out.String(), want) {
		t.Errorf("streamed %q, want it to start with %q", out.String(), want)
	}
}

func TestGenerateErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"generate", "--prompt", "x"}, 2, "--model is required"},
		{[]string{"generate", "--model", "m"}, 2, "exactly one of --prompt, --ids and --batch-file"},
		{[]string{"generate", "--model", "m", "--batch-file", "p.jsonl", "--prompt", "x"}, 2, "give no --prompt or --ids"},
		{[]string{"generate", "--model", "m", "--batch-file", "p.jsonl", "--batch-size", "0"}, 2, "--batch-size must be at least 1"},
		{[]string{"generate", "--model", "m", "--batch-file", "p.jsonl", "--strict"}, 2, "--strict is not available with --batch-file"},
		{[]string{"generate", "--model", "m", "--batch-file", "/nonexistent/p.jsonl"}, 1, "--batch-file: open /nonexistent/p.jsonl"},
		{[]string{"generate", "--model", "m", "--prompt", "x", "--device", "cuda"}, 1, "built without the xla build tag"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}
