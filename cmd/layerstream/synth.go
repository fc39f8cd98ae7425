package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/progress"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/synth"
)

func init() {
	register(command{
		name:    "synth",
		summary: "write a seeded synthetic checkpoint (random weights) at a real model's shape, for benchmarks",
		usage:   "--shape NAME --out DIR",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			shape := fs.String("shape", "", "model shape: "+strings.Join(synth.ShapeNames(), ", "))
			layers := fs.Int("layers", 0, "number of layers (default: the shape's own)")
			dtype := fs.String("dtype", "bf16", "weight dtype: bf16 or f32")
			seed := fs.Uint64("seed", 0, "PRNG seed")
			tok := fs.String("tokenizer", "", "tokenizer.json to copy into the checkpoint (with its tokenizer_config.json)")
			out := fs.String("out", "", "output folder (required): new, empty, or an earlier synth output of the same kind (with or without --quantize), which is written over")
			quantize := fs.String("quantize", "none", "q8 or q4: write a shard folder directly, decoder-layer matrices as random Q8_0 or Q4_K blocks (no checkpoint: for shapes too large to write in bf16 first)")
			return func(ctx context.Context, args []string) error {
				if len(args) != 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				s, ok := synth.Shapes[*shape]
				if !ok {
					return usageErrorf("--shape %q is not known (known: %s)", *shape, strings.Join(synth.ShapeNames(), ", "))
				}
				if *out == "" {
					return usageErrorf("--out is required")
				}
				if *layers < 0 {
					return usageErrorf("--layers must be positive, got %d", *layers)
				}
				if *layers > 0 {
					s.NumLayers = *layers
				}
				dt, ok := map[string]checkpoint.DType{"bf16": checkpoint.BF16, "f32": checkpoint.F32}[strings.ToLower(*dtype)]
				if !ok {
					return usageErrorf("--dtype %q is not supported (bf16 or f32)", *dtype)
				}
				opts := synth.Options{Shape: s, DType: dt, Seed: *seed, Tokenizer: *tok}
				q, err := shards.ParseQuantization(*quantize)
				if err != nil {
					return usageErrorf("--quantize: %v", err)
				}
				kind := synthCheckpoint
				if q != shards.None {
					kind = synthShards
				}
				if err := claimSynthOut(*out, kind); err != nil {
					return fmt.Errorf("--out: %w", err)
				}
				if q != shards.None {
					start := time.Now()
					bar := progress.New(progressOut(), "synth", 0)
					ck, err := synth.Quantized(*out, opts, q.Target)
					if err != nil {
						return err
					}
					set, err := shards.Split(ctx, ck, shards.SplitOptions{Out: *out, Progress: bar.Update})
					bar.Finish()
					if err != nil {
						return err
					}
					slog.Info("wrote synthetic shards", "dir", *out, "shape", *shape, "layers", s.NumLayers, "quantize", q,
						"bytes", set.FileBytes(), "seconds", fmt.Sprintf("%.1f", time.Since(start).Seconds()))
					return nil
				}
				total, err := synth.TotalBytes(opts)
				if err != nil {
					return err
				}
				start := time.Now()
				if err := synth.Write(*out, opts); err != nil {
					return err
				}
				el := time.Since(start)
				slog.Info("wrote synthetic checkpoint", "dir", *out, "shape", *shape, "layers", s.NumLayers,
					"bytes", total, "seconds", fmt.Sprintf("%.1f", el.Seconds()),
					"MB/s", fmt.Sprintf("%.0f", float64(total)/1e6/el.Seconds()))
				return nil
			}
		},
	})
}

// synthCheckpoint and synthShards are the marker files synth creates in --out before writing anything else: a
// checkpoint (safetensors and config.json) or, with --quantize, a shard folder. A later run recognizes by them an
// earlier output (complete or interrupted) that it may write over.
const (
	synthCheckpoint = ".layerstream-synth-checkpoint"
	synthShards     = ".layerstream-synth-shards"
)

// claimSynthOut makes dir ready for synth's output of the given kind (synthCheckpoint or synthShards) and marks
// it. dir must be absent, empty, or an earlier output of the same kind: synth writes config.json, the weights and
// the tokenizer files over whatever has their names, and a quantized run's split deletes the .shard files it does
// not write, so a folder of anything else (a real checkpoint, another model's shards, an earlier output of the
// other kind, which would leave a folder mixing both) is refused, naming what it holds.
func claimSynthOut(dir, kind string) error {
	other := map[string]string{synthCheckpoint: synthShards, synthShards: synthCheckpoint}[kind]
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		if fi, serr := os.Stat(dir); serr == nil && !fi.IsDir() {
			return fmt.Errorf("%s is not a folder", dir)
		}
		return err
	case len(ents) > 0:
		var names []string
		for _, e := range ents {
			switch e.Name() {
			case kind:
				return nil // an earlier output of this kind
			case other:
				how := map[string]string{synthCheckpoint: "without --quantize (a checkpoint)", synthShards: "with --quantize (a shard folder)"}[other]
				return fmt.Errorf("%s holds an earlier synth output written %s: writing the other kind over it would leave a folder of both; choose a new or empty folder", dir, how)
			}
			names = append(names, e.Name())
		}
		if len(names) > 3 {
			names = append(names[:3], fmt.Sprintf("… (%d in all)", len(ents)))
		}
		return fmt.Errorf("%s is not empty (%s) and is not an earlier synth output: synth would overwrite its config.json and weights; choose a new or empty folder", dir, strings.Join(names, ", "))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, kind))
	if err != nil {
		return err
	}
	return f.Close()
}
