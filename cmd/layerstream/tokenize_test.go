package main

import (
	"bytes"
	"context"
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
	if err := tokenizeLines(context.Background(), tok, strings.NewReader(in), &out, false, true); err != nil {
		t.Fatal(err)
	}
	if want := "[1,403,407,261,378]\n[1]\n"; out.String() != want {
		t.Errorf("encode: got %q want %q", out.String(), want)
	}
	out.Reset()
	if err := tokenizeLines(context.Background(), tok, strings.NewReader("[1,403,407,261,378]"), &out, true, false); err != nil {
		t.Fatal(err)
	}
	if want := "\"Once upon a time\"\n"; out.String() != want {
		t.Errorf("decode: got %q want %q", out.String(), want)
	}
	out.Reset()
	if err := tokenizeLines(context.Background(), tok, strings.NewReader("[1,403]\n"), &out, true, true); err != nil {
		t.Fatal(err)
	}
	if want := "\"<s> Once\"\n"; out.String() != want {
		t.Errorf("decode keeping special tokens: got %q want %q", out.String(), want)
	}
	err = tokenizeLines(context.Background(), tok, strings.NewReader("\"ok\"\nnot json\n"), &out, false, true)
	if err == nil || !strings.Contains(err.Error(), "stdin line 2") {
		t.Errorf("bad line: err %v", err)
	}
	err = tokenizeLines(context.Background(), tok, strings.NewReader("[99999]\n"), &out, true, true)
	if err == nil || !strings.Contains(err.Error(), "99999") {
		t.Errorf("bad id: err %v", err)
	}
}
