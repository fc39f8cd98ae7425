// Command layerstream runs large language models on machines whose memory is far smaller than the model,
// by streaming the model through the device one transformer layer at a time.
//
// Each subcommand lives in its own file and registers itself with register from an init function.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
)

// command is one subcommand: its flags are defined on fs by setup, and run receives the positional arguments.
type command struct {
	name    string
	summary string
	usage   string // arguments after the flags, e.g. "<checkpoint>"
	setup   func(fs *flag.FlagSet) func(ctx context.Context, args []string) error
	// ownsInterrupt: the command handles SIGINT itself (chat: Ctrl-C stops the answer, not the program); the
	// context then ends on SIGTERM only.
	ownsInterrupt bool
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

// errUsage marks an error caused by wrong arguments: a hint to the subcommand's --help follows it.
var errUsage = errors.New("usage")

func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

// quiet is the -q flag: warnings and errors only, no progress bars.
var quiet bool

// errOut is run's standard error.
var errOut io.Writer = os.Stderr

// progressOut is where progress bars go: standard error, unless -q.
func progressOut() io.Writer {
	if quiet {
		return nil
	}
	return errOut
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	errOut = stderr
	if len(args) == 0 {
		printUsage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printUsage(stdout)
		return 0
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, "layerstream", version())
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		names := make([]string, 0, len(commands))
		for n := range commands {
			names = append(names, n)
		}
		fmt.Fprintf(stderr, "layerstream: unknown command %q%s\nRun 'layerstream --help' for the list of commands.\n", args[0], didYouMean(args[0], names, ""))
		return 2
	}
	fs := flag.NewFlagSet("layerstream "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported below, usage only on --help
	verbose := fs.Bool("v", false, "verbose: debug logging (the seed, the dtype chosen...)")
	fs.BoolVar(&quiet, "q", false, "quiet: warnings and errors only, no progress bars")
	quiet = false
	runFn := c.setup(fs)
	hint := fmt.Sprintf("Run 'layerstream %s --help' for its flags.", c.name)
	if err := fs.Parse(reorderFlags(fs, args[1:])); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandUsage(stdout, c, fs)
			return 0
		}
		fmt.Fprintf(stderr, "layerstream %s: %v%s\n%s\n", c.name, err, flagSuggestion(fs, err), hint)
		return 2
	}
	if *verbose && quiet {
		fmt.Fprintf(stderr, "layerstream %s: -v and -q exclude each other\n", c.name)
		return 2
	}
	level := slog.LevelInfo
	switch {
	case *verbose:
		level = slog.LevelDebug
	case quiet:
		level = slog.LevelWarn
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))

	signals := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if c.ownsInterrupt {
		signals = signals[1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), signals...)
	defer stop()
	defer exitOnSecondSignal(stderr, c.name, signals)()
	if err := runFn(ctx, fs.Args()); err != nil {
		if errors.Is(err, errUsage) {
			fmt.Fprintf(stderr, "layerstream %s: %s\n%s\n", c.name, strings.TrimPrefix(err.Error(), errUsage.Error()+": "), hint)
			return 2
		}
		interrupted := errors.Is(err, context.Canceled)
		if cause := context.Cause(ctx); interrupted && cause != nil {
			// Say which signal ended the run ("context canceled" alone reads like a failure).
			err = fmt.Errorf("interrupted (%v): %w", cause, err)
		}
		fmt.Fprintf(stderr, "layerstream %s: %v\n", c.name, err)
		if interrupted {
			return 130
		}
		return 1
	}
	return 0
}

// exitOnSecondSignal makes a second of signals end the process at once, with status 130, while the first
// one's graceful end (a server draining its requests, a generation printing its result) is under way. It
// returns the function that stops watching.
func exitOnSecondSignal(stderr io.Writer, name string, signals []os.Signal) (stop func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, signals...) // the first signal comes here too, besides ending the context
	done := make(chan struct{})
	go func() {
		for seen := 0; ; seen++ {
			select {
			case <-done:
				return
			case sig := <-ch:
				if seen == 1 {
					fmt.Fprintf(stderr, "layerstream %s: second signal (%v): exiting at once\n", name, sig)
					os.Exit(130)
				}
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// printCommandUsage is a subcommand's --help.
func printCommandUsage(w io.Writer, c command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: layerstream %s [flags] %s\n\n%s\n\nflags:\n", c.name, c.usage, c.summary)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// longSpellings are the long names of the one-letter flags every command takes: refused (one spelling for
// every command), with the short one suggested.
var longSpellings = map[string]string{"quiet": "q", "verbose": "v"}

// flagSuggestion returns " (did you mean --x?)" for an undefined flag close to a defined one.
func flagSuggestion(fs *flag.FlagSet, err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: ")
	if !ok {
		return ""
	}
	if short, ok := longSpellings[strings.TrimLeft(name, "-")]; ok {
		return fmt.Sprintf(" (did you mean -%s?)", short)
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return didYouMean(strings.TrimLeft(name, "-"), names, "--")
}

// didYouMean returns " (did you mean PREFIX+name?)" for the candidate closest to s (by edit distance, or one
// that s is a prefix of; on a tie the one sharing the longer prefix with s, then the first in order), or "" when
// none is close.
func didYouMean(s string, candidates []string, prefix string) string {
	best, bestDist := "", 0
	shared := func(c string) int {
		n := 0
		for n < len(s) && n < len(c) && s[n] == c[n] {
			n++
		}
		return n
	}
	for _, c := range candidates {
		d := editDistance(s, c)
		if len(s) >= 3 && strings.HasPrefix(c, s) {
			d = 1
		}
		better := best == "" || d < bestDist || d == bestDist && (shared(c) > shared(best) || shared(c) == shared(best) && c < best)
		if d <= max(1, len(s)*2/5) && better {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s%s?)", prefix, best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// versionString is set at link time (-ldflags "-X main.versionString=v1.2.3").
var versionString string

// version is versionString, else read from the build information: the module version and the VCS revision
// the binary was built from.
func version() string {
	if versionString != "" {
		return versionString
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown version)"
	}
	v := bi.Main.Version
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if rev != "" {
		v += " " + rev[:min(12, len(rev))] + modified
	}
	return v + " " + bi.GoVersion
}

// reorderFlags moves flags after positional arguments to the front, so `split DIR --out X` works like
// `split --out X DIR`.
func reorderFlags(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
				continue
			}
			if i+1 < len(args) {
				flags = append(flags, args[i+1])
				i++
			}
		}
	}
	return append(flags, pos...)
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "layerstream: run language models larger than memory by streaming them one layer at a time.")
	fmt.Fprintln(w, "\nusage: layerstream <command> [flags] [args]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'layerstream <command> --help' for a command's flags. See README.md and TROUBLESHOOTING.md.")
}
