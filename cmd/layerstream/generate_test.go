package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/synth"
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
		{[]string{"generate", "--model", "m"}, 2, "exactly one of --prompt, --prompt-file, --ids and --batch-file"},
		{[]string{"generate", "--model", "m", "--batch-file", "p.jsonl", "--prompt", "x"}, 2, "exactly one of --prompt, --prompt-file, --ids and --batch-file"},
		{[]string{"generate", "--model", "m", "--ids", "1,2", "--stop", "x"}, 2, "give --prompt or --prompt-file instead of --ids"},
		{[]string{"generate", "--model", "m", "--prompt", "x", "--logprobs"}, 2, "print with --json"},
		{[]string{"generate", "--model", "m", "--prompt", "x", "--json", "--top-logprobs", "21"}, 2, "--top-logprobs must be in [0, 20]"},
		{[]string{"generate", "--model", "m", "--prompt-file", "/nonexistent/p.txt"}, 1, "--prompt-file: open /nonexistent/p.txt"},
		{[]string{"generate", "--model", "m", "--prompt", "x", "--device-budget", "lots"}, 2, `invalid value "lots" for flag -device-budget`},
		{[]string{"generate", "--model", "m", "--prompt", "x", "--prefetch", "0"}, 2, `invalid value "0" for flag -prefetch: must be at least 1, got 0`},
		{[]string{"generate", "--model", "m", "--prompt", "x", "--max-layer-buffers", "two"}, 2, `invalid value "two" for flag -max-layer-buffers: not a whole number`},
		{[]string{"generate", "--model", "m", "--batch-file", "p.jsonl", "--batch-size", "0"}, 2, "--batch-size must be at least 1"},
		{[]string{"generate", "--model", "m", "--batch-file", "/nonexistent/p.jsonl"}, 1, "--batch-file: open /nonexistent/p.jsonl"},
		{[]string{"generate", "--model", "m", "--prompt", "x", "--device", "cuda"}, 1, "built without the xla build tag"},
		{[]string{"generate", "--model", "m", "--prompt", ""}, 2, "--prompt is empty"},
		{[]string{"generate", "--model", "m", "--prompt", "x", "--top-p", "2"}, 2, `invalid value "2" for flag -top-p: want a number in [0, 1]`},
		{[]string{"generate", "--model", "m", "--prompt", "x", "--repetition-penalty", "0"}, 2, `flag -repetition-penalty: want a finite number > 0 (1 is off)`},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}

// TestGenerateCLIHabits: a random seed by default, reported in --json; --stop; --prompt-file from standard
// input; --chat prints the reply alone; the first-use split shows its progress and -q silences it; no INFO line
// about the dtype unless -v.
func TestGenerateCLIHabits(t *testing.T) {
	model := testutil.ChatModel(t)
	runJSON := func(args ...string) (generateJSON, string) {
		t.Helper()
		var errb bytes.Buffer
		code, out := runCapturingStdout(t, append([]string{"generate", "--model", model, "--json"}, args...), &errb)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errb.String())
		}
		var g generateJSON
		if err := json.Unmarshal(out, &g); err != nil {
			t.Fatalf("%v: %q: %v", args, out, err)
		}
		return g, errb.String()
	}
	first, stderr := runJSON("--prompt", "Once upon a time", "--max-new-tokens", "20", "--temperature", "0.9")
	if !strings.Contains(stderr, "split (first use)") || !strings.Contains(stderr, "100%") {
		t.Errorf("first use: no split progress in %q", stderr)
	}
	if strings.Contains(stderr, "compute dtype") {
		t.Errorf("an INFO line about the dtype without -v: %q", stderr)
	}
	second, _ := runJSON("--prompt", "Once upon a time", "--max-new-tokens", "20", "--temperature", "0.9")
	if first.Seed == second.Seed {
		t.Errorf("two runs without --seed used the same seed %d", first.Seed)
	}
	again, stderr := runJSON("--prompt", "Once upon a time", "--max-new-tokens", "20", "--temperature", "0.9", "--seed", strconv.FormatUint(first.Seed, 10), "-v")
	if !slices.Equal(again.GeneratedIDs, first.GeneratedIDs) {
		t.Errorf("--seed %d: %v, first run %v", first.Seed, again.GeneratedIDs, first.GeneratedIDs)
	}
	if !strings.Contains(stderr, "seed="+strconv.FormatUint(first.Seed, 10)) || !strings.Contains(stderr, "compute dtype") {
		t.Errorf("-v does not print the seed and the dtype: %q", stderr)
	}
	// --top-p 0 keeps the most likely token alone: greedy's tokens whatever the temperature and seed.
	greedy, _ := runJSON("--prompt", "Once upon a time", "--max-new-tokens", "20", "--temperature", "0")
	for _, seed := range []string{"1", "2"} {
		if g, _ := runJSON("--prompt", "Once upon a time", "--max-new-tokens", "20", "--temperature", "2", "--top-p", "0", "--seed", seed); !slices.Equal(g.GeneratedIDs, greedy.GeneratedIDs) {
			t.Errorf("--top-p 0 --seed %s: %v, want greedy's %v", seed, g.GeneratedIDs, greedy.GeneratedIDs)
		}
	}
	stopped, _ := runJSON("--prompt", "Once upon a time", "--max-new-tokens", "40", "--stop", "Lily", "--logprobs")
	// The logprobs are those of the text's tokens: not of " Lily", the stop string's, which ended generation.
	var logprobsText string
	for _, lp := range stopped.Logprobs {
		logprobsText += lp.Token
	}
	if stopped.Text != ", there was a little girl named " || stopped.StopReason != "stop_string" || stopped.Stop != "Lily" ||
		len(stopped.Logprobs) != len(stopped.GeneratedIDs)-1 || logprobsText != ", there was a little girl named" {
		t.Errorf("--stop Lily: %+v", stopped)
	}

	// The prompt from standard input; --chat prints the reply alone, after the user's message.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = stdin }()
	w.WriteString("Once upon a time\n")
	w.Close()
	var errb bytes.Buffer
	code, text := runCapturingStdout(t, []string{"generate", "--model", model, "--prompt-file", "-", "--chat", "--system", "Tell a story.", "--max-new-tokens", "8", "-q"}, &errb)
	if code != 0 || errb.Len() != 0 {
		t.Fatalf("chat from stdin: exit %d, stderr %q", code, errb.String())
	}
	if strings.Contains(string(text), "Once upon a time") || strings.Contains(string(text), "Tell a story") || len(strings.TrimSpace(string(text))) == 0 {
		t.Errorf("--chat printed %q: want the reply alone", text)
	}
}

// TestTokenizerCheckedBeforeSplit: a prompt for a model without tokenizer.json fails before anything is split.
func TestTokenizerCheckedBeforeSplit(t *testing.T) {
	dir := t.TempDir()
	if err := synth.Write(dir, synth.Options{Shape: verifyShape, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	t.Setenv("LAYERSTREAM_CACHE", cache)
	var out, errb bytes.Buffer
	if code := run([]string{"generate", "--model", dir, "--prompt", "hi"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no tokenizer.json") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Errorf("the cache holds %v: a split started before the tokenizer was checked", entries)
	}
	// With ids and --json no tokenizer is needed; log-probabilities come without token text.
	code, stdout := runCapturingStdout(t, []string{"generate", "--model", dir, "--ids", "1,2", "--json", "--max-new-tokens", "2", "--top-logprobs", "2", "-q"}, &errb)
	if code != 0 {
		t.Fatalf("--ids --json: exit %d: %s", code, errb.String())
	}
	var got generateJSON
	if err := json.Unmarshal([]byte(stdout), &got); err != nil || len(got.Logprobs) != 2 || len(got.Logprobs[0].TopLogprobs) != 2 {
		t.Errorf("--ids --json --top-logprobs 2 without a tokenizer: %s (%v)", stdout, err)
	}
}

// TestGenerateIDsWithTokenizer: --ids on a model with a tokenizer gives the text and the log-probabilities as
// --prompt does.
func TestGenerateIDsWithTokenizer(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	t.Setenv("LAYERSTREAM_CACHE", t.TempDir())
	c := testutil.StoriesGolden(t)[0]
	var out bytes.Buffer
	ids := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(c.PromptIDs)), ","), "[]")
	o := generateOptions{model: model, ids: ids, maxNew: 8, json: true, logprobs: true, temperature: -1, topK: -1, topP: -1, repetitionPenalty: -1}
	if err := runGenerate(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	var got generateJSON
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("--json output %q: %v", out.String(), err)
	}
	if !slices.Equal(got.GeneratedIDs, c.GeneratedIDs[:8]) || !strings.HasPrefix(", there was a little girl named Lily.", got.Text) || got.Text == "" ||
		len(got.Logprobs) != 8 || got.Logprobs[0].Token == "" {
		t.Errorf("--ids %s: %s", ids, out.String())
	}
}

// TestUsageMessages: --help goes to stdout; a mistyped flag or command is a short error with a hint; --version.
func TestUsageMessages(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"generate", "--help"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "usage: layerstream generate") || errb.Len() != 0 {
		t.Errorf("--help: exit %d, stdout %d bytes, stderr %q", code, out.Len(), errb.String())
	}
	out.Reset()
	if code := run([]string{"generate", "--model", "m", "--max-tokens", "5"}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "did you mean --max-new-tokens?") || strings.Count(errb.String(), "\n") > 2 || out.Len() != 0 {
		t.Errorf("mistyped flag: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"generate", "--model", "m"}, &out, &errb); code != 2 || strings.Count(errb.String(), "\n") > 2 {
		t.Errorf("usage error: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"gnerate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "did you mean generate?") {
		t.Errorf("mistyped command: exit %d, stderr %q", code, errb.String())
	}
	if code := run([]string{"--version"}, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "layerstream ") {
		t.Errorf("--version: exit %d, %q", code, out.String())
	}
}

// runCapturingStdout runs the command line with os.Stdout, where commands print, sent to a file; it returns the
// exit status and what was printed.
func runCapturingStdout(t *testing.T, args []string, stderr *bytes.Buffer) (int, []byte) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stdout")
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = f
	code := run(args, io.Discard, stderr)
	os.Stdout = stdout
	f.Close()
	out, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, out
}

// Issue #13 case 8: --temperature Inf (or NaN, or negative) is refused with an error naming the flag, before
// any work (it was accepted: Inf made every token equally likely).
func TestTemperatureMustBeFinite(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	for _, v := range []string{"Inf", "+Inf", "NaN", "-1", "-Inf"} {
		var errb bytes.Buffer
		code, out := runCapturingStdout(t, []string{"generate", "--model", model, "--prompt", "Once", "--max-new-tokens", "3", "--temperature=" + v}, &errb)
		if code != 2 || !strings.Contains(errb.String(), "-temperature") || !strings.Contains(errb.String(), "finite") || len(out) != 0 {
			t.Errorf("--temperature %s: exit %d, stdout %q, stderr %q; want 2 and an error naming the flag", v, code, out, errb.String())
		}
	}
}

// TestRefusedRequestPrintsNothing: a request the engine refuses (a value out of range, more tokens than the
// context holds) fails before the prompt is echoed: nothing on stdout, only the error.
func TestRefusedRequestPrintsNothing(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	t.Setenv("LAYERSTREAM_CACHE", t.TempDir())
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-new-tokens", "100000"}, "exceeds the model's context"},
	} {
		var errb bytes.Buffer
		code, out := runCapturingStdout(t, append([]string{"generate", "--model", model, "--prompt", "Once", "-q"}, c.args...), &errb)
		if code != 1 || !strings.Contains(errb.String(), c.want) || len(out) != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 1, no output and %q", c.args, code, out, errb.String(), c.want)
		}
	}
}

// TestGenerateJSONSchema: --json-schema and --grammar json constrain the text to a JSON value of the schema.
func TestGenerateJSONSchema(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	t.Setenv("LAYERSTREAM_CACHE", t.TempDir())
	schema := t.TempDir() + "/schema.json"
	os.WriteFile(schema, []byte(`{"type": "object", "properties": {"name": {"type": "string"}, "ok": {"type": "boolean"}}, "required": ["name", "ok"], "additionalProperties": false}`), 0o644)
	for _, o := range []generateOptions{{jsonSchema: schema}, {grammar: "json"}} {
		var out bytes.Buffer
		o.model, o.prompt, o.maxNew, o.json = model, "Once upon a time", 120, true
		o.temperature, o.topK, o.topP, o.repetitionPenalty = 0, -1, -1, -1
		if err := runGenerate(context.Background(), o, &out); err != nil {
			t.Fatal(err)
		}
		var got generateJSON
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("--json output %q: %v", out.String(), err)
		}
		var v any
		if got.StopReason != "eos" || json.Unmarshal([]byte(got.Text), &v) != nil {
			t.Errorf("%+v: %s", o, out.String())
		}
		m, _ := v.(map[string]any)
		if _, ok := m["ok"].(bool); o.jsonSchema != "" && (!ok || len(m) != 2) {
			t.Errorf("--json-schema: %s", got.Text)
		}
	}
	bad := t.TempDir() + "/bad.json"
	os.WriteFile(bad, []byte(`{"type": "string", "pattern": "a+"}`), 0o644)
	err := runGenerate(context.Background(), generateOptions{model: model, prompt: "x", jsonSchema: bad}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `"pattern"`) {
		t.Errorf("a schema with pattern: %v", err)
	}
}
