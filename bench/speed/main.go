// Command speed measures layerstream's speed targets (issues 9 and 15) in one run, on a synthetic checkpoint at a
// real model shape: the machine's memory-copy, memory-read, O_DIRECT read and matmul rates, then ten ratios, each
// with its goal, the measured value, PASS / FAIL / UNAVAILABLE / NOT MEASURABLE HERE and the numbers behind it,
// and the profile of the streamed runs. Three of the ratios compare with llama.cpp running the same model beside
// layerstream (the peer, optional: --peer-python).
// It exits 1 when a target is missed (failed, or unmeasurable because the engine lacks the feature), 2 on an
// error. docs/performance.md explains the protocol and how to read the output.
//
//	go run ./bench/speed --quick    # 4 layers, about a minute
//	go run ./bench/speed            # TinyLlama-1.1B shape, all 22 layers, bf16 (≈ 2.2 GB of shards)
//	scripts/speed.sh --json         # builds the binary first; JSON on stdout, the report on stderr
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/synth"
)

// Exit codes.
const (
	exitOK     = 0
	exitMissed = 1 // a target failed or could not be measured for lack of an engine feature
	exitError  = 2 // bad flags, or the measurement itself failed
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := mainExit(ctx, filepath.Base(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// mainExit runs the harness with command-line args and returns the exit code.
func mainExit(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	f, code, ok := parseFlags(name, args, stderr)
	if !ok {
		return code
	}
	if err := f.check(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitError
	}
	level := slog.LevelWarn
	if f.verbose {
		level = slog.LevelInfo
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))
	o, err := f.options(ctx, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: synthetic model: %v\n", name, err)
		return exitError
	}
	if f.prepare {
		fmt.Fprintf(stderr, "speed: synthetic model ready in %s\n", o.shards)
		return exitOK
	}
	rep, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitError
	}
	rep.Command = strings.Join(append([]string{name}, args...), " ")
	if err := rep.write(stdout, stderr, f.json); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitError
	}
	if rep.Missed > 0 {
		return exitMissed
	}
	return exitOK
}

// flags are the command line's settings.
type flags struct {
	shapeName, dtype, weights, quantize string
	shape                               synth.Shape
	layers, newTokens, runs, prefill    int
	quick, noPanels, json, prepare      bool
	verbose                             bool
	peer                                peerConfig
	ggufModel, pairDir, cache           string
	seed                                uint64
}

// parseFlags reads the command line; ok is false, with the exit status, when it asks for help or is wrong.
func parseFlags(name string, args []string, stderr io.Writer) (f *flags, code int, ok bool) {
	f = &flags{}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.shapeName, "shape", "tinyllama-1.1b", "model shape of the synthetic checkpoint: "+
		strings.Join(synth.ShapeNames(), ", "))
	fs.IntVar(&f.layers, "layers", 0, "decoder layers (default: the shape's; --quick: 4)")
	fs.BoolVar(&f.quick, "quick", false, "a quick run: 4 layers unless --layers is given")
	fs.IntVar(&f.newTokens, "new-tokens", 8, "tokens generated per decode run (at least 2)")
	fs.IntVar(&f.runs, "runs", 5, "measured decode runs per engine; ratios use the medians")
	fs.IntVar(&f.prefill, "prefill-tokens", 512, "prompt length of the prefill measurement (target 5)")
	fs.StringVar(&f.dtype, "dtype", "auto", "compute dtype of weight matrices, passed to the engine: auto, f32 or bf16")
	fs.StringVar(&f.weights, "weights", "bf16", "dtype of the synthetic model's weights: bf16 or f32")
	fs.StringVar(&f.quantize, "quantize", "", "q8 or q4: write the model directly as quantized shards (no float checkpoint: "+
		"the llama3-70b shape is 40 GB of q4 shards, 140 GB as bf16) and measure only streaming from disk, targets 2 "+
		"and 10, with the streamed engine's peak memory")
	pc := &f.peer
	fs.StringVar(&pc.Python, "peer-python", os.Getenv("LAYERSTREAM_PEER_PYTHON"), "a Python with llama-cpp-python: "+
		"llama.cpp runs the same model (as GGUF) beside layerstream, alternated, for targets 6, 7 and 9 (default "+
		"$LAYERSTREAM_PEER_PYTHON; empty: no peer, those targets are not measured)")
	fs.StringVar(&pc.Convert, "peer-convert", os.Getenv("LAYERSTREAM_PEER_CONVERT"), "llama.cpp's convert_hf_to_gguf.py "+
		"(in llama-cpp-python's sdist, vendor/llama.cpp), to make the GGUF once per model (default $LAYERSTREAM_PEER_CONVERT)")
	fs.StringVar(&pc.ConvertPython, "peer-convert-python", os.Getenv("LAYERSTREAM_PEER_CONVERT_PYTHON"), "a Python "+
		"with torch and transformers for --peer-convert (default $LAYERSTREAM_PEER_CONVERT_PYTHON, else --peer-python)")
	fs.StringVar(&pc.Tokenizer, "peer-tokenizer", os.Getenv("LAYERSTREAM_PEER_TOKENIZER"), "a tokenizer.json with the "+
		"shape's vocabulary, which the converter needs (default $LAYERSTREAM_PEER_TOKENIZER)")
	fs.StringVar(&f.ggufModel, "gguf-model", filepath.Join("testdata", "models", "smollm2-135m-instruct-q4_1.gguf"),
		"the GGUF file of target 13 (scripts/fetch-smollm2.sh fetches it), run resident beside llama.cpp (--peer-python)")
	fs.StringVar(&f.pairDir, "pair-dir", filepath.Join("testdata", "models"), "the folder of the real Qwen2.5-Coder "+
		"0.5B/1.5B GGUF pair of targets 15-17 (scripts/fetch-qwen-pair.sh fetches them; absent: not measured)")
	fs.BoolVar(&f.noPanels, "no-panels", false, "targets 21-23: open the real pair's target with its resident matrices in rows, "+
		"not packed in panels (engine.Options.NoPanels, layerstream's --no-panels)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the synthetic weights and prompts")
	fs.StringVar(&f.cache, "cache", filepath.Join(os.TempDir(), "layerstream-speed"), "folder of the synthetic "+
		"models, reused across runs")
	fs.BoolVar(&f.json, "json", false, "print the report as one JSON object on stdout (the text report goes to stderr)")
	fs.BoolVar(&f.prepare, "prepare", false, "only create the synthetic model if missing, then exit")
	fs.BoolVar(&f.verbose, "verbose", false, "show the engine's info logs")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s [flags]\n\nMeasures the speed ratios of issues 9 and 15 in one run; exit status 1 "+
			"when a target is missed, 2 on an error.\n\n", name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, exitOK, false
		}
		return nil, exitError, false
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", name, fs.Args())
		return nil, exitError, false
	}
	return f, 0, true
}

// check checks the flags' values and settles the shape's layers.
func (f *flags) check() error {
	shape, ok := synth.Shapes[f.shapeName]
	switch {
	case !ok:
		return fmt.Errorf("unknown --shape %q (known: %s)", f.shapeName, strings.Join(synth.ShapeNames(), ", "))
	case f.layers < 0:
		return fmt.Errorf("--layers must be positive, got %d", f.layers)
	case f.newTokens < 2:
		return fmt.Errorf("--new-tokens must be at least 2 (decode speed is measured after the first token), got %d", f.newTokens)
	case f.runs < 1:
		return fmt.Errorf("--runs must be at least 1, got %d", f.runs)
	case f.prefill < 1:
		return fmt.Errorf("--prefill-tokens must be at least 1, got %d", f.prefill)
	case f.weights != "bf16" && f.weights != "f32":
		return fmt.Errorf("--weights must be bf16 or f32, got %q", f.weights)
	}
	if _, err := shards.ParseQuantization(f.quantize); err != nil {
		return fmt.Errorf("--quantize: %w", err)
	}
	switch {
	case f.layers > 0:
		shape.NumLayers = f.layers
	case f.quick:
		shape.NumLayers = 4
	}
	f.shape = shape
	return nil
}

// options makes the synthetic model if it is missing (as quantized shards, or a checkpoint and its shards) and
// returns the run's options, llama.cpp's among them where it can run.
func (f *flags) options(ctx context.Context, stderr io.Writer) (options, error) {
	q, _ := shards.ParseQuantization(f.quantize) // checked
	stored := checkpoint.BF16
	if f.weights == "f32" {
		stored = checkpoint.F32
	}
	dir := modelDir(f.cache, f.shapeName, f.shape.NumLayers, string(stored), f.seed)
	var shardDir string
	var err error
	if q != shards.None {
		dir = modelDir(f.cache, f.shapeName, f.shape.NumLayers, string(q), f.seed)
		shardDir, err = prepareQuantized(ctx, dir, f.shape, stored, f.seed, q, stderr)
	} else {
		shardDir, err = prepareModel(ctx, dir, f.shape, stored, f.seed, f.peer, stderr)
	}
	if err != nil {
		return options{}, err
	}
	pc := f.peer
	o := options{shards: shardDir, shapeName: f.shapeName, newTokens: f.newTokens, runs: f.runs,
		prefillTokens: f.prefill, batchNewTokens: 64, dtype: engine.DType(f.dtype), seed: f.seed, memcpyBytes: memcpyBytes, readBytes: readBytes,
		log: stderr, ggufModel: f.ggufModel, ggufPython: pc.Python, cacheDir: f.cache, streamOnly: q != shards.None,
		pairTarget: filepath.Join(f.pairDir, pairTarget), pairDraft: filepath.Join(f.pairDir, pairDraft), noPanels: f.noPanels}
	switch {
	case !pc.enabled():
		o.noPeer = "no llama.cpp: give --peer-python (a Python with llama-cpp-python) and, to make the GGUF, " +
			"--peer-convert and --peer-tokenizer (or their LAYERSTREAM_PEER_* variables)"
	default:
		o.peer, o.gguf = pc, ggufPath(dir, stored)
		if _, err := os.Stat(o.gguf); err != nil {
			o.peer, o.noPeer = peerConfig{}, fmt.Sprintf("no GGUF of the model for llama.cpp at %s (converting it needs %s)", o.gguf, pc.missing())
		}
	}
	return o, nil
}

// write prints the report: as text on stdout, or with asJSON as JSON on stdout and the text on stderr.
func (r *report) write(stdout, stderr io.Writer, asJSON bool) error {
	text := stdout
	if asJSON {
		text = stderr
	}
	fmt.Fprintln(stderr)
	if err := r.writeText(text); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("writing the JSON report: %w", err)
		}
	}
	return nil
}
