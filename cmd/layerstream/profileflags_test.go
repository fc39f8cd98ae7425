package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/profiler"
)

func parseProfileFlags(t *testing.T, args ...string) (*profileFlags, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := addProfileFlags(fs)
	return f, fs.Parse(args)
}

func TestProfileFlagsOff(t *testing.T) {
	f, err := parseProfileFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	p, finish := f.Start()
	if p != nil {
		t.Fatal("profiler created without a profile flag")
	}
	if err := finish(); err != nil {
		t.Fatal(err)
	}
}

func TestProfileFlagsWriteOutputs(t *testing.T) {
	dir := t.TempDir()
	pq, svg := filepath.Join(dir, "run.parquet"), filepath.Join(dir, "run.svg")
	f, err := parseProfileFlags(t, "--profile", "--profile-out", pq, "--profile-timeline", svg,
		"--pprof", "cpu="+filepath.Join(dir, "pprof"))
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	f.stderr = &table
	p, finish := f.Start()
	if p == nil {
		t.Fatal("no profiler")
	}
	p.Begin(profiler.Forward, 0, 0).End(0)
	p.Begin(profiler.Sample, 0, -1).End(0)
	if err := finish(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "forward") || !strings.Contains(table.String(), "overlapped") {
		t.Fatalf("table:\n%s", table.String())
	}
	evs, err := profiler.ReadParquet(pq)
	if err != nil || len(evs) != 2 {
		t.Fatalf("trace: %v events, %v", len(evs), err)
	}
	for _, path := range []string{svg, filepath.Join(dir, "pprof", "cpu.pprof")} {
		if st, err := os.Stat(path); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", path, err)
		}
	}
}

func TestPprofFlagValidation(t *testing.T) {
	for _, bad := range []string{"heap", "", "cpux=."} {
		if _, err := parseProfileFlags(t, "--pprof", bad); err == nil || !strings.Contains(err.Error(), "want cpu") {
			t.Errorf("--pprof %q: %v", bad, err)
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := parseProfileFlags(t, "--pprof", "mem="+file); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("--pprof into a file: %v", err)
	}
	f, err := parseProfileFlags(t, "--pprof", "trace")
	if err != nil || f.pprof.file() != "trace.out" {
		t.Fatalf("--pprof trace: %v, file %q", err, f.pprof.file())
	}
	// One profile per run: a second --pprof is refused, not silently the only one written.
	dir := t.TempDir()
	if _, err := parseProfileFlags(t, "--pprof", "mem="+dir, "--pprof", "trace="+dir); err == nil || !strings.Contains(err.Error(), "once") {
		t.Errorf("--pprof twice: %v", err)
	}
}

// TestProfileOutputsCheckedFirst: --profile-out and --profile-timeline that cannot be written are refused when
// the flags are parsed, not after the run they were to record.
func TestProfileOutputsCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing", "p.parquet"), "no such file"},
		{dir, "is a folder"},
		{filepath.Join(file, "p.parquet"), "not a folder"},
		{"", "want a file name"},
	} {
		for _, flag := range []string{"--profile-out", "--profile-timeline"} {
			if _, err := parseProfileFlags(t, flag, c.path); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s %q: %v, want an error saying %q", flag, c.path, err, c.want)
			}
		}
	}
	if f, err := parseProfileFlags(t, "--profile-out", filepath.Join(dir, "p.parquet")); err != nil || !f.enabled() {
		t.Errorf("--profile-out into a folder that exists: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the checks left files behind: %v", ents)
	}
}
