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
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	shapeName := fs.String("shape", "tinyllama-1.1b", "model shape of the synthetic checkpoint: "+
		strings.Join(synth.ShapeNames(), ", "))
	layers := fs.Int("layers", 0, "decoder layers (default: the shape's; --quick: 4)")
	quick := fs.Bool("quick", false, "a quick run: 4 layers unless --layers is given")
	newTokens := fs.Int("new-tokens", 8, "tokens generated per decode run (at least 2)")
	runs := fs.Int("runs", 5, "measured decode runs per engine; ratios use the medians")
	prefill := fs.Int("prefill-tokens", 512, "prompt length of the prefill measurement (target 5)")
	dtype := fs.String("dtype", "auto", "compute dtype of weight matrices, passed to the engine: auto, f32 or bf16")
	weights := fs.String("weights", "bf16", "dtype of the synthetic model's weights: bf16 or f32")
	quantize := fs.String("quantize", "", "q8 or q4: write the model directly as quantized shards (no float checkpoint: "+
		"the llama3-70b shape is 40 GB of q4 shards, 140 GB as bf16) and measure only streaming from disk, targets 2 "+
		"and 10, with the streamed engine's peak memory")
	var pc peerConfig
	fs.StringVar(&pc.Python, "peer-python", os.Getenv("LAYERSTREAM_PEER_PYTHON"), "a Python with llama-cpp-python: "+
		"llama.cpp runs the same model (as GGUF) beside layerstream, alternated, for targets 6, 7 and 9 (default "+
		"$LAYERSTREAM_PEER_PYTHON; empty: no peer, those targets are not measured)")
	fs.StringVar(&pc.Convert, "peer-convert", os.Getenv("LAYERSTREAM_PEER_CONVERT"), "llama.cpp's convert_hf_to_gguf.py "+
		"(in llama-cpp-python's sdist, vendor/llama.cpp), to make the GGUF once per model (default $LAYERSTREAM_PEER_CONVERT)")
	fs.StringVar(&pc.ConvertPython, "peer-convert-python", os.Getenv("LAYERSTREAM_PEER_CONVERT_PYTHON"), "a Python "+
		"with torch and transformers for --peer-convert (default $LAYERSTREAM_PEER_CONVERT_PYTHON, else --peer-python)")
	fs.StringVar(&pc.Tokenizer, "peer-tokenizer", os.Getenv("LAYERSTREAM_PEER_TOKENIZER"), "a tokenizer.json with the "+
		"shape's vocabulary, which the converter needs (default $LAYERSTREAM_PEER_TOKENIZER)")
	ggufModel := fs.String("gguf-model", filepath.Join("testdata", "models", "smollm2-135m-instruct-q4_1.gguf"),
		"the GGUF file of target 13 (scripts/fetch-smollm2.sh fetches it), run resident beside llama.cpp (--peer-python)")
	pairDir := fs.String("pair-dir", filepath.Join("testdata", "models"), "the folder of the real Qwen2.5-Coder "+
		"0.5B/1.5B GGUF pair of targets 15-17 (scripts/fetch-qwen-pair.sh fetches them; absent: not measured)")
	noPanels := fs.Bool("no-panels", false, "targets 21-23: open the real pair's target with its resident matrices in rows, "+
		"not packed in panels (engine.Options.NoPanels, layerstream's --no-panels)")
	seed := fs.Uint64("seed", 1, "seed of the synthetic weights and prompts")
	cache := fs.String("cache", filepath.Join(os.TempDir(), "layerstream-speed"), "folder of the synthetic "+
		"models, reused across runs")
	asJSON := fs.Bool("json", false, "print the report as one JSON object on stdout (the text report goes to stderr)")
	prepare := fs.Bool("prepare", false, "only create the synthetic model if missing, then exit")
	verbose := fs.Bool("verbose", false, "show the engine's info logs")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s [flags]\n\nMeasures the speed ratios of issues 9 and 15 in one run; exit status 1 "+
			"when a target is missed, 2 on an error.\n\n", name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitError
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "%s: %s\n", name, fmt.Sprintf(format, a...))
		return exitError
	}
	shape, ok := synth.Shapes[*shapeName]
	switch {
	case fs.NArg() != 0:
		return usage("unexpected arguments %q", fs.Args())
	case !ok:
		return usage("unknown --shape %q (known: %s)", *shapeName, strings.Join(synth.ShapeNames(), ", "))
	case *layers < 0:
		return usage("--layers must be positive, got %d", *layers)
	case *newTokens < 2:
		return usage("--new-tokens must be at least 2 (decode speed is measured after the first token), got %d", *newTokens)
	case *runs < 1:
		return usage("--runs must be at least 1, got %d", *runs)
	case *prefill < 1:
		return usage("--prefill-tokens must be at least 1, got %d", *prefill)
	case *weights != "bf16" && *weights != "f32":
		return usage("--weights must be bf16 or f32, got %q", *weights)
	}
	q, err := shards.ParseQuantization(*quantize)
	if err != nil {
		return usage("--quantize: %v", err)
	}
	stored := checkpoint.BF16
	if *weights == "f32" {
		stored = checkpoint.F32
	}
	switch {
	case *layers > 0:
		shape.NumLayers = *layers
	case *quick:
		shape.NumLayers = 4
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))

	dir := modelDir(*cache, *shapeName, shape.NumLayers, string(stored), *seed)
	var shardDir string
	if q != shards.None {
		dir = modelDir(*cache, *shapeName, shape.NumLayers, string(q), *seed)
		shardDir, err = prepareQuantized(ctx, dir, shape, stored, *seed, q, stderr)
	} else {
		shardDir, err = prepareModel(ctx, dir, shape, stored, *seed, pc, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: synthetic model: %v\n", name, err)
		return exitError
	}
	if *prepare {
		fmt.Fprintf(stderr, "speed: synthetic model ready in %s\n", shardDir)
		return exitOK
	}
	o := options{shards: shardDir, shapeName: *shapeName, newTokens: *newTokens, runs: *runs,
		prefillTokens: *prefill, batchNewTokens: 64, dtype: engine.DType(*dtype), seed: *seed, memcpyBytes: memcpyBytes, readBytes: readBytes,
		log: stderr, ggufModel: *ggufModel, ggufPython: pc.Python, cacheDir: *cache, streamOnly: q != shards.None,
		pairTarget: filepath.Join(*pairDir, pairTarget), pairDraft: filepath.Join(*pairDir, pairDraft), noPanels: *noPanels}
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
	rep, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return exitError
	}
	rep.Command = strings.Join(append([]string{name}, args...), " ")
	text := stdout
	if *asJSON {
		text = stderr
	}
	fmt.Fprintln(stderr)
	if err := rep.writeText(text); err != nil {
		fmt.Fprintf(stderr, "%s: writing the report: %v\n", name, err)
		return exitError
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "%s: writing the JSON report: %v\n", name, err)
			return exitError
		}
	}
	if rep.Missed > 0 {
		return exitMissed
	}
	return exitOK
}
