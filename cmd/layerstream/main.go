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
}

var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

// errUsage marks an error caused by wrong arguments: the subcommand's usage is printed after it.
var errUsage = errors.New("usage")

func usageErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, args...))
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "layerstream: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return 2
	}
	fs := flag.NewFlagSet("layerstream "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	verbose := fs.Bool("v", false, "verbose logging")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: layerstream %s [flags] %s\n\n%s\n\nflags:\n", c.name, c.usage, c.summary)
		fs.PrintDefaults()
	}
	runFn := c.setup(fs)
	if err := fs.Parse(reorderFlags(fs, args[1:])); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runFn(ctx, fs.Args()); err != nil {
		fmt.Fprintf(stderr, "layerstream %s: %v\n", c.name, err)
		if errors.Is(err, errUsage) {
			fs.Usage()
			return 2
		}
		if errors.Is(err, context.Canceled) {
			return 130
		}
		return 1
	}
	return 0
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
