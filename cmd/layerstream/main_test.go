package main

import (
	"bytes"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
)

// TestMain points the layerstream cache (where checkpoints are split on first use) at a temporary folder.
func TestMain(m *testing.M) { os.Exit(testutil.RunWithCache(m)) }

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"nope"}, &out, &errb); code != 2 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(errb.String(), `unknown command "nope"`) {
		t.Fatalf("stderr: %s", errb.String())
	}
}

func TestReorderFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("out", "", "")
	fs.Bool("verify", false, "")
	got := reorderFlags(fs, []string{"DIR", "--out", "X", "--verify", "MORE"})
	want := "--out X --verify DIR MORE"
	if strings.Join(got, " ") != want {
		t.Fatalf("got %q want %q", got, want)
	}
}
