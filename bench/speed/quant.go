package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/stats"
	"github.com/layerstream/layerstream/shards"
)

// Issue 18's targets: quantized shards streamed from disk against bf16 ones (the fewer bytes, the fewer
// seconds), a GGUF file's resident decode against llama.cpp on the same file, and the lossless planes encoding
// streamed no slower than raw bf16 shards.
const (
	quantQ8Goal = 0.6
	quantQ4Goal = 0.35
	planesGoal  = 1
)

func quantTargets() []*target {
	return []*target{
		{ID: 11, Name: "q8 shards stream faster", Ratio: "s/token of q8 shards ÷ the model's bf16 shards, streamed with O_DIRECT (alternated runs, medians)", AtMost: true, Threshold: quantQ8Goal},
		{ID: 12, Name: "q4 shards stream faster still", Ratio: "s/token of q4 shards ÷ the model's bf16 shards, streamed with O_DIRECT (alternated runs, medians)", AtMost: true, Threshold: quantQ4Goal},
		{ID: 13, Name: "GGUF decode at llama.cpp's rate or beyond", Ratio: "resident decode tok/s of SmolLM2-135M-Instruct Q4_1 (GGUF) ÷ llama.cpp's on the same file, same threads", Threshold: 1},
		{ID: 14, Name: "lossless encoding no slower than raw", Ratio: "s/token of the model's --encoding planes shards ÷ its raw bf16 shards, streamed with O_DIRECT (alternated runs, medians)", AtMost: true, Threshold: planesGoal},
	}
}

// A split is one way the synthetic model is stored besides its raw bf16 shards: quantized, or encoded.
type split struct {
	name string // in the report, and the folder's suffix
	opts shards.SplitOptions
}

// splits are the other splits measured against the raw bf16 shards, in the order their runs alternate, and
// each one's target. The planes split measures the disk's read rate itself, as a user's split does.
var splits = []struct {
	split
	target int
}{
	{split{"q8", shards.SplitOptions{Quantize: shards.Q8}}, 11},
	{split{"q4", shards.SplitOptions{Quantize: shards.Q4}}, 12},
	{split{"planes", shards.SplitOptions{Encoding: shards.Planes}}, 14},
}

// splitDir is the folder of the split named name of the synthetic model in dir.
func splitDir(dir, name string) string { return filepath.Join(dir, "shards-"+name) }

// splitsMissing reports whether one of the other splits of the model in dir is missing.
func splitsMissing(dir string) bool {
	for _, sp := range splits {
		if !shards.IsSet(splitDir(dir, sp.name)) {
			return true
		}
	}
	return false
}

// splitOthers splits the checkpoint ckpt into the other splits' folders of dir, those that are missing.
func splitOthers(ctx context.Context, ckpt, dir string, log io.Writer) error {
	ck, err := checkpoint.Open(ckpt)
	if err != nil {
		return err
	}
	for _, sp := range splits {
		out := splitDir(dir, sp.name)
		if shards.IsSet(out) {
			continue
		}
		fmt.Fprintf(log, "speed: splitting into %s (%s)\n", out, sp.name)
		start := time.Now()
		opts := sp.opts
		opts.Out = out
		if _, err := shards.Split(ctx, ck, opts); err != nil {
			return err
		}
		fmt.Fprintf(log, "speed: split in %.1f s\n", time.Since(start).Seconds())
	}
	return nil
}

// measureQuantized measures targets 11, 12 and 14: the raw bf16, q8, q4 and planes shards of the model, each in
// an engine reading with O_DIRECT, decode runs alternated (bf16, q8, q4, planes, bf16, …); the ratios are of
// the median s/token.
func measureQuantized(ctx context.Context, o options, r *report, req engine.Request) error {
	var ts []*target
	for _, sp := range splits {
		ts = append(ts, r.target(sp.target))
	}
	switch disk := r.Machine.DirectRead; {
	case !disk.Supported:
		for _, t := range ts {
			t.setNotMeasurable("the filesystem refuses O_DIRECT: " + disk.Reason)
		}
		return nil
	case directIO == nil:
		for _, t := range ts {
			t.setUnavailable(noDirectIO)
		}
		return nil
	}
	const base = "bf16"
	dirs := map[string]string{base: o.shards}
	order := []string{base}
	for _, sp := range splits {
		d := splitDir(filepath.Dir(o.shards), sp.name)
		if !shards.IsSet(d) {
			reason := "no " + sp.name + " split at " + d + " (the harness makes it with the model: run it again without --prepare skipped)"
			for _, t := range ts {
				t.setUnavailable(reason)
			}
			return nil
		}
		dirs[sp.name] = d
		order = append(order, sp.name)
	}
	engines := map[string]*engine.Engine{}
	bytes := map[string]int64{}
	for _, q := range order {
		phase(o.log, fmt.Sprintf("opening a streamed engine on the %s shards, reading with O_DIRECT", q))
		opts := engine.Options{DType: o.dtype}
		directIO(&opts)
		e, err := engine.Open(ctx, dirs[q], opts)
		if err != nil {
			return err
		}
		defer e.Close()
		if _, err := generate(ctx, e, warmUp(req)); err != nil {
			return err
		}
		engines[q] = e
		set, err := shards.Open(dirs[q])
		if err != nil {
			return err
		}
		for _, u := range set.Units() {
			if u.Layer >= 0 {
				bytes[q] += u.FileSize
			}
		}
	}
	secs := map[string][]float64{}
	for i := range o.runs {
		phase(o.log, fmt.Sprintf("O_DIRECT decode run %d of %d: %s shards", i+1, o.runs, strings.Join(order, ", ")))
		for _, q := range order {
			res, err := generate(ctx, engines[q], req)
			if err != nil {
				return err
			}
			secs[q] = append(secs[q], 1/res.Timings.DecodeTokensPerSec)
		}
	}
	baseSecs := stats.Median(secs[base])
	disk := r.Machine.DirectRead.GBps * 1e9
	for i, sp := range splits {
		q, t := sp.name, ts[i]
		m := stats.Median(secs[q])
		t.judge(m / baseSecs)
		t.raw(q+" s/token with O_DIRECT (median)", m, "s")
		t.raw("bf16 s/token with O_DIRECT (median)", baseSecs, "s")
		t.raw(q+" layer shard bytes", float64(bytes[q]), "B")
		t.raw("bf16 layer shard bytes", float64(bytes[base]), "B")
		t.note("byte ratio %.3f; disk bounds (bytes ÷ the best O_DIRECT pass): %s %.3f s, bf16 %.3f s", float64(bytes[q])/float64(bytes[base]),
			q, float64(bytes[q])/disk, float64(bytes[base])/disk)
		t.note("%s runs: %s; bf16 runs: %s", q, fmtRuns(secs[q]), fmtRuns(secs[base]))
	}
	return nil
}

// measureGGUF measures target 13: the SmolLM2 Q4_1 GGUF resident in layerstream and in llama.cpp, decode runs
// alternated, the same prompt ids and new tokens, llama.cpp on as many threads as layerstream has cores.
func measureGGUF(ctx context.Context, o options, r *report) error {
	t := r.target(13)
	switch {
	case o.ggufPython == "":
		t.setNotMeasurable("no llama.cpp: give --peer-python (a Python with llama-cpp-python)")
		return nil
	case o.ggufModel == "":
		t.setNotMeasurable("no GGUF model given (--gguf-model)")
		return nil
	}
	if _, err := os.Stat(o.ggufModel); err != nil {
		t.setNotMeasurable(fmt.Sprintf("%v (scripts/fetch-smollm2.sh fetches it)", err))
		return nil
	}
	phase(o.log, "opening a resident engine on "+o.ggufModel)
	e, err := engine.Open(ctx, o.ggufModel, engine.Options{Resident: true, ShardDir: filepath.Join(o.cacheDir, "gguf-shards")})
	if err != nil {
		return err
	}
	defer e.Close()
	cfg := e.Config()
	eos := checkpoint.EOSTokenIDs(cfg, e.Generation())
	req := engine.Request{PromptIDs: syntheticPrompt(cfg.VocabSize, eos, decodePromptTokens, o.seed), MaxNewTokens: 4 * o.newTokens, StopIDs: []int{}}
	phase(o.log, "starting llama.cpp on "+o.ggufModel)
	p, err := startPeer(ctx, peerConfig{Python: o.ggufPython}, o.ggufModel, runtime.GOMAXPROCS(0), decodePromptTokens+req.MaxNewTokens+64, 1)
	if err != nil {
		return err
	}
	defer p.close()
	if _, err := generate(ctx, e, warmUp(req)); err != nil {
		return err
	}
	if _, _, err := p.decode(req.PromptIDs, 4); err != nil {
		return err
	}
	var ours, theirs []float64
	var ourIDs, theirIDs []int
	for i := range o.runs {
		phase(o.log, fmt.Sprintf("GGUF decode run %d of %d: layerstream, then llama.cpp", i+1, o.runs))
		res, err := generate(ctx, e, req)
		if err != nil {
			return err
		}
		tokS, ids, err := p.decode(req.PromptIDs, req.MaxNewTokens)
		if err != nil {
			return err
		}
		ours, theirs = append(ours, res.Timings.DecodeTokensPerSec), append(theirs, tokS)
		ourIDs, theirIDs = res.GeneratedIDs, ids
	}
	om, tm := stats.Median(ours), stats.Median(theirs)
	t.judge(om / tm)
	t.raw("layerstream resident decode (median)", om, "tok/s")
	t.raw("llama.cpp decode (median)", tm, "tok/s")
	t.note("%d new tokens after a %d-token prompt; layerstream runs %s, llama.cpp runs %s", req.MaxNewTokens,
		len(req.PromptIDs), fmtRuns(ours), fmtRuns(theirs))
	t.note("greedy tokens of the last runs: %d of %d the same (llama.cpp's own float rounding, amplified by its "+
		"8-bit activations, parts from itself too: see engine's TestGGUFSmolLM2MatchesLlamaCpp)", sameIDs(ourIDs, theirIDs), len(ourIDs))
	t.note("llama.cpp: %s", p.System)
	return nil
}
