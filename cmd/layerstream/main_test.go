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

// TestQuietSpelling: -q is every command's one quiet flag (split had --quiet beside it); the long spelling is
// refused with the short one suggested.
func TestQuietSpelling(t *testing.T) {
	for name := range commands {
		var out, errb bytes.Buffer
		if code := run([]string{name, "--help"}, &out, &errb); code != 0 {
			t.Fatalf("%s --help: exit %d", name, code)
		}
		if strings.Contains(out.String(), "-quiet") || !strings.Contains(out.String(), "  -q\t") {
			t.Errorf("%s --help: want -q alone as the quiet flag:\n%s", name, out.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"split", t.TempDir(), "--quiet"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "did you mean -q?") {
		t.Errorf("split --quiet: exit %d, stderr %q", code, errb.String())
	}
}
