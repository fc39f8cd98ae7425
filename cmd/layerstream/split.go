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
	"github.com/layerstream/layerstream/hub"
	"github.com/layerstream/layerstream/shards"
)

func init() {
	register(command{
		name:    "split",
		summary: "split a checkpoint into per-layer shard files plus a manifest (resumable), or --verify a split",
		usage:   "<checkpoint folder or Hub repo id>",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			out := fs.String("out", "", "output folder (default <checkpoint>/layerstream if writable, else the layerstream cache; always the cache for a Hugging Face cache snapshot)")
			encoding := fs.String("encoding", "raw", "tensor storage: raw, zstd or shuffle-zstd (lossless)")
			verify := fs.Bool("verify", false, "write nothing: re-read every shard, check every checksum and compare every tensor with the checkpoint")
			quiet := fs.Bool("quiet", false, "no progress bar")
			return func(ctx context.Context, args []string) error {
				if len(args) != 1 {
					return usageErrorf("expected one checkpoint folder or repo id, got %d arguments", len(args))
				}
				enc, err := shards.ParseEncoding(*encoding)
				if err != nil {
					return usageErrorf("--encoding: %v", err)
				}
				showProgress := !*quiet && isTerminal(os.Stderr)
				hubOpts := hub.OptionsFromEnv()
				if showProgress {
					hubOpts.Progress = os.Stderr
				}
				src, err := hub.Resolve(ctx, args[0], hubOpts) // a local folder comes back as it is
				if err != nil {
					return err
				}
				ck, err := checkpoint.Open(src)
				if err != nil {
					return err
				}
				dir := *out
				if dir == "" {
					dir = shards.DefaultDir(ck.Dir)
				}
				if *verify {
					return verifySplit(ctx, ck, dir, os.Stdout)
				}
				opts := shards.SplitOptions{Out: dir, Encoding: enc}
				var bar *progressBar
				if showProgress {
					bar = &progressBar{w: os.Stderr, label: "split", start: time.Now()}
					opts.Progress = bar.update
				}
				start := time.Now()
				set, err := shards.Split(ctx, ck, opts)
				bar.finish()
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

// isTerminal reports whether f is a character device (a terminal), where a progress bar belongs.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressBar draws "label  42% [=====>    ] 1.20/2.86 GB  850 MB/s  ETA 2s" on one line, at most 10 times a
// second.
type progressBar struct {
	w     io.Writer
	label string
	start time.Time
	last  time.Time
	drawn bool
}

func (p *progressBar) update(done, total int64) {
	now := time.Now()
	if done < total && now.Sub(p.last) < 100*time.Millisecond {
		return
	}
	p.last, p.drawn = now, true
	frac := 1.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	const width = 30
	n := int(frac * width)
	bar := strings.Repeat("=", n)
	if n < width {
		bar += ">" + strings.Repeat(" ", width-n-1)
	}
	el := now.Sub(p.start).Seconds()
	rate := float64(done) / max(el, 1e-9)
	eta := "--"
	if rate > 0 && done < total {
		eta = time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second).String()
	} else if done >= total {
		eta = "0s"
	}
	fmt.Fprintf(p.w, "\r%s %3.0f%% [%s] %.2f/%.2f GB  %4.0f MB/s  ETA %s   ", p.label, 100*frac, bar,
		float64(done)/1e9, float64(total)/1e9, rate/1e6, eta)
}

// finish ends the bar's line; a nil bar does nothing.
func (p *progressBar) finish() {
	if p != nil && p.drawn {
		fmt.Fprintln(p.w)
	}
}
