package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/tokenizer"
)

func TestTokenizeLines(t *testing.T) {
	tok, err := tokenizer.Load(testutil.SharedPath(t, "models", "stories260K-hf"))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	in := "\"Once upon a time\"\n\n\"\"\n"
	if err := tokenizeLines(context.Background(), tok, strings.NewReader(in), &out, io.Discard, false, true); err != nil {
		t.Fatal(err)
	}
	if want := "[1,403,407,261,378]\n[1]\n"; out.String() != want {
		t.Errorf("encode: got %q want %q", out.String(), want)
	}
	out.Reset()
	if err := tokenizeLines(context.Background(), tok, strings.NewReader("[1,403,407,261,378]"), &out, io.Discard, true, false); err != nil {
		t.Fatal(err)
	}
	if want := "\"Once upon a time\"\n"; out.String() != want {
		t.Errorf("decode: got %q want %q", out.String(), want)
	}
	out.Reset()
	if err := tokenizeLines(context.Background(), tok, strings.NewReader("[1,403]\n"), &out, io.Discard, true, true); err != nil {
		t.Fatal(err)
	}
	if want := "\"<s> Once\"\n"; out.String() != want {
		t.Errorf("decode keeping special tokens: got %q want %q", out.String(), want)
	}
	var errb bytes.Buffer
	err = tokenizeLines(context.Background(), tok, strings.NewReader("[99999]\n"), &out, &errb, true, true)
	if err == nil || !strings.Contains(errb.String(), "99999") {
		t.Errorf("bad id: err %v, stderr %q", err, errb.String())
	}
}

// Issue #13 case 8: a line that cannot be tokenized no longer drops the rest of stdin: it prints null (one output
// line per input line, still), its error goes to stderr, and the command fails at the end.
func TestTokenizeKeepsGoingAfterABadLine(t *testing.T) {
	model := testutil.SharedPath(t, "models", "stories260K-hf")
	in := filepath.Join(t.TempDir(), "stdin")
	os.WriteFile(in, []byte("\"Once\"\nnot json\n\n\"upon\"\n[1]\n\"a time\""), 0o644)
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	saved := os.Stdin
	os.Stdin = f
	t.Cleanup(func() { os.Stdin = saved })
	stdout, stderr := captureStdout(t), capture(t, &os.Stderr)
	var out, errb bytes.Buffer
	code := run([]string{"tokenize", "--model", model}, &out, &errb)
	if want := "[1,403]\nnull\n[1,407]\nnull\n[1,261,378]\n"; stdout() != want {
		t.Errorf("stdout %q, want %q", stdout(), want)
	}
	if code != 1 || !strings.Contains(errb.String(), "2 of 5 lines") {
		t.Errorf("exit %d, error %q: want 1, saying 2 of 5 lines failed", code, errb.String())
	}
	if msgs := stderr() + errb.String(); !strings.Contains(msgs, "stdin line 2:") || !strings.Contains(msgs, "stdin line 5:") {
		t.Errorf("stderr %q does not name both bad lines", msgs)
	}
}

// TestGGUFFromTheCommandLine: a GGUF file is a model for generate (its prompt tokenized by the tokenizer its
// metadata makes) and for tokenize, as a folder is; llama.cpp tokenizes "Once upon a time" in this file's
// SentencePiece vocabulary as [1, 403, 407, 261, 378] (gguf/testdata/llamacpp/tiny.json).
func TestGGUFFromTheCommandLine(t *testing.T) {
	model := filepath.Join("..", "..", "gguf", "testdata", "tiny", "tiny-llama-Q8_0.gguf")
	t.Setenv("LAYERSTREAM_CACHE", t.TempDir())
	var out bytes.Buffer
	o := generateOptions{model: model, prompt: "Once upon a time", maxNew: 3, json: true, temperature: 0, topK: -1, topP: -1, repetitionPenalty: -1}
	if err := runGenerate(context.Background(), o, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"prompt_ids":[1,403,407,261,378]`) {
		t.Errorf("generate --json: %s", out.String())
	}
	tok, err := loadTokenizer(model)
	if err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := tokenizeLines(context.Background(), tok, strings.NewReader("\"Once upon a time\"\n"), &out, io.Discard, false, true); err != nil || out.String() != "[1,403,407,261,378]\n" {
		t.Errorf("tokenize: %q, %v", out.String(), err)
	}
}
