package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/pkg/profile"

	"github.com/layerstream/layerstream/profiler"
)

// profileFlags holds the profiling flags shared by generate and bench (see docs/profiling.md).
type profileFlags struct {
	table    bool       // --profile: summary table on stderr at the end
	out      outputFile // --profile-out: Parquet trace
	timeline outputFile // --profile-timeline: SVG timeline
	pprof    pprofArg   // --pprof cpu|mem|trace[=DIR]

	stderr io.Writer // where the table goes; os.Stderr unless a test sets it
}

// addProfileFlags defines --profile, --profile-out, --profile-timeline and --pprof on fs.
func addProfileFlags(fs *flag.FlagSet) *profileFlags {
	f := &profileFlags{stderr: os.Stderr}
	fs.BoolVar(&f.table, "profile", false, "print a table of where the time went (disk read, decode, h2d, forward, "+
		"prefetch wait, sample) on stderr at the end")
	fs.Var(&f.out, "profile-out", "write a Parquet trace with one row per profiled event to `FILE.parquet`")
	fs.Var(&f.timeline, "profile-timeline", "draw the pipeline over time (one lane per stage) into "+
		"`FILE.svg`")
	fs.Var(&f.pprof, "pprof", "write a Go pprof profile: `cpu|mem|trace[=DIR]` (DIR defaults to the current folder)")
	return f
}

// enabled reports whether any flag asks for the per-category profiler.
func (f *profileFlags) enabled() bool { return f.table || f.out.path != "" || f.timeline.path != "" }

// Start starts profiling. It returns the profiler to pass to the engine (nil when no profile flag is set, which
// makes every profiler call a no-op) and a function to call once the run is over: it stops the profiler and
// pprof and writes the requested outputs, returning the first problems met. Call Start once per process.
func (f *profileFlags) Start() (*profiler.Profiler, func() error) {
	var p *profiler.Profiler
	if f.enabled() {
		p = profiler.New()
		p.Start()
	}
	var stopPprof func()
	if f.pprof.mode != "" {
		stop := profile.Start(f.pprof.option(), profile.ProfilePath(f.pprof.dir), profile.Quiet,
			profile.NoShutdownHook)
		slog.Info("pprof started", "mode", f.pprof.mode, "file", f.pprof.file())
		stopPprof = stop.Stop
	}
	finish := func() error {
		p.Stop()
		var errs []error
		if stopPprof != nil {
			stopPprof()
			slog.Info("pprof written", "file", f.pprof.file(), "open with", f.pprof.viewer())
		}
		if f.table {
			if err := p.WriteTable(f.stderr); err != nil {
				errs = append(errs, fmt.Errorf("profile table: %w", err))
			}
		}
		if f.out.path != "" {
			if err := p.WriteParquet(f.out.path); err != nil {
				errs = append(errs, fmt.Errorf("--profile-out: %w", err))
			} else {
				slog.Info("profile trace written", "file", f.out.path)
			}
		}
		if f.timeline.path != "" {
			if err := p.WriteTimelineSVG(f.timeline.path); err != nil {
				errs = append(errs, fmt.Errorf("--profile-timeline: %w", err))
			} else {
				slog.Info("profile timeline written", "file", f.timeline.path)
			}
		}
		return errors.Join(errs...)
	}
	return p, finish
}

// pprofArg is the value of --pprof: a mode and the folder to write the profile into. Set checks that the folder
// can be written, because pkg/profile exits the program when it cannot create its file.
type pprofArg struct {
	mode string // cpu, mem or trace; empty when the flag is not set
	dir  string
}

func (a *pprofArg) String() string {
	if a == nil || a.mode == "" {
		return ""
	}
	return a.mode + "=" + a.dir
}

func (a *pprofArg) Set(s string) error {
	if a.mode != "" {
		return fmt.Errorf("give --pprof once (one profile per run), got %s and %s", a, s)
	}
	mode, dir, _ := strings.Cut(s, "=")
	switch mode {
	case "cpu", "mem", "trace":
	default:
		return fmt.Errorf("want cpu, mem or trace, optionally followed by =DIR; got %q", s)
	}
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("pprof folder: %w", err)
	}
	if err := probeFolder(dir); err != nil {
		return fmt.Errorf("pprof folder %s is not writable: %w", dir, err)
	}
	a.mode, a.dir = mode, dir
	return nil
}

// probeFolder checks that files can be created in dir by creating and removing one.
func probeFolder(dir string) error {
	probe, err := os.CreateTemp(dir, ".layerstream-probe*")
	if err != nil {
		return err
	}
	probe.Close()
	return os.Remove(probe.Name())
}

// outputFile is the value of a flag naming a file written at the end of the run (--profile-out,
// --profile-timeline). Set checks that it can be written there, so that a mistyped path is refused before the
// run rather than after it, losing what it measured.
type outputFile struct{ path string }

func (o *outputFile) String() string {
	if o == nil {
		return ""
	}
	return o.path
}

func (o *outputFile) Set(s string) error {
	if s == "" {
		return errors.New("want a file name")
	}
	if st, err := os.Stat(s); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a folder: want a file name", s)
	}
	dir := filepath.Dir(s)
	if st, err := os.Stat(dir); err != nil {
		return fmt.Errorf("the folder of %s: %w", s, err)
	} else if !st.IsDir() {
		return fmt.Errorf("the folder of %s: %s is not a folder", s, dir)
	}
	if err := probeFolder(dir); err != nil {
		return fmt.Errorf("cannot write into %s: %w", dir, err)
	}
	o.path = s
	return nil
}

func (a *pprofArg) option() func(*profile.Profile) {
	switch a.mode {
	case "mem":
		return profile.MemProfile
	case "trace":
		return profile.TraceProfile
	}
	return profile.CPUProfile
}

// file is where pkg/profile writes the profile for this mode.
func (a *pprofArg) file() string {
	name := map[string]string{"cpu": "cpu.pprof", "mem": "mem.pprof", "trace": "trace.out"}[a.mode]
	return filepath.Join(a.dir, name)
}

func (a *pprofArg) viewer() string {
	if a.mode == "trace" {
		return "go tool trace " + a.file()
	}
	return "go tool pprof -http=: " + a.file()
}
