package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/hub"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/progress"
	"github.com/layerstream/layerstream/shards"
)

// encodingHelp is --encoding's help: what each encoding and quantization costs and saves, as measured on the
// synthetic TinyLlama-1.1B shape (README "Shard encodings and quantization" has the table and the commands).
const encodingHelp = `tensor storage (lossless): raw, zstd, shuffle-zstd or planes. TBD`

func init() {
	register(command{
		name:    "split",
		summary: "split a checkpoint into per-layer shard files plus a manifest (resumable), or --verify a split",
		usage:   "<checkpoint folder or Hub repo id>",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			out := fs.String("out", "", "output folder (default <checkpoint>/layerstream if writable, else the layerstream cache; always the cache for a Hugging Face cache snapshot)")
			encoding := fs.String("encoding", "raw", encodingHelp)
			diskRate := fs.String("disk-rate", "auto", "with --encoding: the rate the shards will be read at, e.g. 2GB (bytes per second); a tensor that decodes slower on all cores is stored raw. auto: measured with O_DIRECT on the output folder; off: keep every tensor that shrinks")
			quantize := fs.String("quantize", "none", "store weight matrices block-quantized: none, q8 (Q8_0) or q4 (Q4_K)")
			verify := fs.Bool("verify", false, "write nothing: re-read every shard, check every checksum and compare every tensor with the checkpoint")
			fs.BoolVar(&quiet, "quiet", false, "no progress bar (as -q)")
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
					return verifySplit(ctx, ck, dir, os.Stdout)
				}
				bar := progress.New(progressOut(), "split", 0)
				opts := shards.SplitOptions{Out: dir, Encoding: enc, Quantize: q, Progress: bar.Update, DiskRate: rate}
				start := time.Now()
				set, err := shards.Split(ctx, ck, opts)
				bar.Finish()
				if err != nil {
					return err
				}
				var stored int64
				for _, u := range set.Units() {
					stored += u.FileSize
				}
				slog.Info("split done", "units", len(set.Units()), "bytes_on_disk", stored, "encoding", enc,
					"seconds", fmt.Sprintf("%.1f", time.Since(start).Seconds()))
				fmt.Println(set.Dir)
				return nil
			}
		},
	})
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
		return fmt.Errorf("%d problems in %s; run layerstream split again to rewrite the bad shards", len(r.Problems), dir)
	}
	fmt.Fprintln(w, "OK")
	return nil
}
