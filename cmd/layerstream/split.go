package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/hub"
	"github.com/layerstream/layerstream/imatrix"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/progress"
	"github.com/layerstream/layerstream/internal/sections"
	"github.com/layerstream/layerstream/shards"
)

// encodingHelp is --encoding's help: what each encoding and quantization costs and saves, as measured on the
// synthetic TinyLlama-1.1B shape (docs/models.md, "Shard encodings and quantization", has the table and the commands).
const encodingHelp = `lossless tensor storage: raw, planes, zstd or shuffle-zstd. Measured streaming 8 bf16 TinyLlama-1.1B layers
with O_DIRECT (~1.9 GB/s) on 2 cores, bytes and s/token against raw: planes 75% (4-bit codes for each byte plane,
decoded at ~8 GB/s per core; Huffman codes, 67% at ~1.5 GB/s, only where decoding keeps up with --disk-rate),
0.64-0.92x raw's s/token; zstd 78%, decoded at ~0.6 GB/s, 2.5-3.6x slower; shuffle-zstd 74.5%, ~1 GB/s, 1.8-3.7x
slower (for archiving). Encodings pay only when the disk is read: shards that fit in memory stream fastest raw,
from the page cache (planes 2-5x slower there). Q8_0/Q4_K blocks shrink 2-6%: stored raw unless they decode fast enough`

func init() {
	register(command{
		name:    "split",
		summary: "split a checkpoint into per-layer shard files plus a manifest (resumable), or --verify a split",
		usage:   "<checkpoint folder or Hub repo id>",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			out := fs.String("out", "", "output folder (default: the checkpoint's folder in the layerstream cache, $LAYERSTREAM_CACHE or ~/.cache/layerstream; <checkpoint>/layerstream instead where an earlier version split it there)")
			encoding := fs.String("encoding", "raw", encodingHelp)
			diskRate := fs.String("disk-rate", "auto", "with --encoding: the rate the shards will be read at, e.g. 2GB (bytes per second): a tensor whose decoding, timed at split, would take more than half the cores' time the disk takes to read it raw gets faster codes (planes) or is stored raw. auto: measured with O_DIRECT on the output folder; off: keep the smallest encoding of every tensor that shrinks")
			quantize := fs.String("quantize", "none", "store weight matrices block-quantized (lossy): none, q8 (Q8_0: 53% of bf16's layer bytes, 0.49-0.54x its s/token streamed with O_DIRECT on the TinyLlama-1.1B shape; scales searched, about 60 ns a weight per core; products with 15-bit inputs, mean KL divergence from bf16 on SmolLM2-135M 5.7e-4, llama.cpp's Q8_0 3.7e-3) or q4 (Q4_K: 28%, 0.26-0.36x); the embedding stays bf16")
			imat := fs.String("imatrix", "", "with --quantize: an importance matrix file (layerstream imatrix) weighting the quantizers' errors by each column's mean squared input (Q8_0's scale search; Q4_K and Q4_1 as llama.cpp's quantize --imatrix): on SmolLM2-135M the mean KL divergence from bf16 goes from 5.7e-4 to 3.9e-4 (q8) and from 9.2e-3 to 6.5e-3 (q4) (docs/models.md)")
			verify := fs.Bool("verify", false, "write nothing: re-read every shard, check every checksum and compare every tensor with the checkpoint")
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 {
					return usageErrorf("expected one checkpoint folder or repo id, got %d arguments", len(args))
				}
				enc, err := shards.ParseEncoding(*encoding)
				if err != nil {
					return usageErrorf("--encoding: %v", err)
				}
				q, err := shards.ParseQuantization(*quantize)
				if err != nil {
					return usageErrorf("--quantize: %v", err)
				}
				rate, err := parseDiskRate(*diskRate)
				if err != nil {
					return usageErrorf("--disk-rate: %v", err)
				}
				var imp *imatrix.Matrix
				if *imat != "" {
					if q == shards.None {
						return usageErrorf("--imatrix weights the quantizers: it needs --quantize q8 or q4")
					}
					if imp, err = imatrix.Read(*imat); err != nil {
						return fmt.Errorf("--imatrix: %w", err)
					}
				}
				hubOpts := hub.OptionsFromEnv()
				hubOpts.Progress = progressOut()
				src, err := hub.Resolve(ctx, args[0], hubOpts) // a local folder comes back as it is
				if err != nil {
					return err
				}
				ck, err := engine.OpenCheckpoint(src)
				if err != nil {
					return err
				}
				dir := *out
				if dir == "" {
					dir = shards.DefaultDirFor(ck.Dir, q)
				}
				if *verify {
					if imp != nil {
						return usageErrorf("--verify quantizes the checkpoint again with the split's own copy of its importance matrix: leave --imatrix out")
					}
					return verifySplit(ctx, ck, dir, os.Stdout)
				}
				if imp != nil {
					if err := shards.CheckImportance(ck, q, imp); err != nil {
						return fmt.Errorf("--imatrix %s: %w", *imat, err)
					}
				}
				warnKeptQuantized(ck, q)
				bar := progress.New(progressOut(), "split", 0)
				opts := shards.SplitOptions{Out: dir, Encoding: enc, Quantize: q, Importance: imp, Progress: bar.Update, DiskRate: rate}
				start := time.Now()
				set, err := shards.Split(ctx, ck, opts)
				bar.Finish()
				if err != nil {
					return err
				}
				slog.Info("split done", "units", len(set.Units()), "bytes_on_disk", set.FileBytes(), "encoding", enc,
					"seconds", fmt.Sprintf("%.1f", time.Since(start).Seconds()))
				fmt.Println(set.Dir)
				return nil
			}
		},
	})
}

// warnKeptQuantized says when --quantize meets matrices already block-quantized (a GGUF file's): they are kept
// as they are (quantizing them again would only lose more), so the split is not of the type asked for.
func warnKeptQuantized(ck *checkpoint.Checkpoint, q shards.Quantization) {
	if q == shards.None {
		return
	}
	n, types := 0, map[checkpoint.DType]bool{}
	for _, t := range ck.Tensors {
		if t.DType.Quantized() {
			n++
			types[t.DType] = true
		}
	}
	if n > 0 {
		names := slices.Sorted(maps.Keys(types))
		slog.Warn(fmt.Sprintf("--quantize %s: %d matrices are already block-quantized and are kept as they are", q, n),
			"types", fmt.Sprint(names), "checkpoint", ck.Dir)
	}
}

// parseDiskRate reads --disk-rate as shards.SplitOptions.DiskRate: auto is 0 (measure), off is -1.
func parseDiskRate(s string) (float64, error) {
	switch s {
	case "auto":
		return 0, nil
	case "off":
		return -1, nil
	}
	n, err := bytesize.Parse(strings.TrimSuffix(s, "/s"))
	if err != nil {
		return 0, fmt.Errorf("%v (or auto, off)", err)
	}
	return float64(n), nil
}

func verifySplit(ctx context.Context, ck *checkpoint.Checkpoint, dir string, w io.Writer) error {
	set, err := shards.Open(dir)
	if err != nil {
		return err
	}
	r, err := set.Verify(ctx, ck)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %d units, %d tensors, %d bytes checked against %s\n", dir, r.Units, r.Tensors, r.Bytes, ck.Dir)
	if !r.OK() {
		for _, p := range r.Problems {
			fmt.Fprintln(w, "  problem:", p)
		}
		return fmt.Errorf("%d problems in %s; run layerstream split again to rewrite the bad shards (see TROUBLESHOOTING.md %q)", len(r.Problems), dir, sections.Corrupt)
	}
	fmt.Fprintln(w, "OK")
	return nil
}
