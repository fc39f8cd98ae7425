package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/stats"
	"github.com/layerstream/layerstream/shards"
)

// Issue 18's targets: quantized shards streamed from disk against bf16 ones (the fewer bytes, the fewer
// seconds), and a GGUF file's resident decode against llama.cpp on the same file.
const (
	quantQ8Goal = 0.6
	quantQ4Goal = 0.35
)

func quantTargets() []*target {
	return []*target{
		{ID: 11, Name: "q8 shards stream faster", Ratio: "s/token of q8 shards ÷ the model's bf16 shards, streamed with O_DIRECT (alternated runs, medians)", AtMost: true, Threshold: quantQ8Goal},
		{ID: 12, Name: "q4 shards stream faster still", Ratio: "s/token of q4 shards ÷ the model's bf16 shards, streamed with O_DIRECT (alternated runs, medians)", AtMost: true, Threshold: quantQ4Goal},
		{ID: 13, Name: "GGUF decode at llama.cpp's rate or beyond", Ratio: "resident decode tok/s of SmolLM2-135M-Instruct Q4_1 (GGUF) ÷ llama.cpp's on the same file, same threads", Threshold: 1},
	}
}

// quantDirs are the q8 and q4 splits of the synthetic model in dir.
func quantDirs(dir string) map[shards.Quantization]string {
	return map[shards.Quantization]string{shards.Q8: filepath.Join(dir, "shards-q8"), shards.Q4: filepath.Join(dir, "shards-q4")}
}

// quantSplitsMissing reports whether a quantized split of the model in dir is missing.
func quantSplitsMissing(dir string) bool {
	for _, d := range quantDirs(dir) {
		if !shards.IsSet(d) {
			return true
		}
	}
	return false
}

// splitQuantized splits the checkpoint ckpt into the q8 and q4 folders of dir, those that are missing.
func splitQuantized(ctx context.Context, ckpt, dir string, log io.Writer) error {
	ck, err := checkpoint.Open(ckpt)
	if err != nil {
		return err
	}
	for _, q := range []shards.Quantization{shards.Q8, shards.Q4} {
		out := quantDirs(dir)[q]
		if shards.IsSet(out) {
			continue
		}
		fmt.Fprintf(log, "speed: splitting into %s (%s)\n", out, q)
		start := time.Now()
		if _, err := shards.Split(ctx, ck, shards.SplitOptions{Out: out, Quantize: q}); err != nil {
			return err
		}
		fmt.Fprintf(log, "speed: split in %.1f s\n", time.Since(start).Seconds())
	}
	return nil
}

// measureQuantized measures targets 11 and 12: the bf16, q8 and q4 shards of the model, each in an engine
// reading with O_DIRECT, decode runs alternated (bf16, q8, q4, bf16, …); the ratios are of the median s/token.
func measureQuantized(ctx context.Context, o options, r *report, req engine.Request) error {
	t11, t12 := r.target(11), r.target(12)
	switch disk := r.Machine.DirectRead; {
	case !disk.Supported:
		t11.setNotMeasurable("the filesystem refuses O_DIRECT: " + disk.Reason)
		t12.setNotMeasurable("the filesystem refuses O_DIRECT: " + disk.Reason)
		return nil
	case directIO == nil:
		t11.setUnavailable(noDirectIO)
		t12.setUnavailable(noDirectIO)
		return nil
	}
	dirs := map[shards.Quantization]string{shards.None: o.shards}
	for q, d := range quantDirs(filepath.Dir(o.shards)) {
		if !shards.IsSet(d) {
			reason := "no " + string(q) + " split at " + d + " (the harness makes it with the model: run it again without --prepare skipped)"
			t11.setUnavailable(reason)
			t12.setUnavailable(reason)
			return nil
		}
		dirs[q] = d
	}
	order := []shards.Quantization{shards.None, shards.Q8, shards.Q4}
	engines := map[shards.Quantization]*engine.Engine{}
	bytes := map[shards.Quantization]int64{}
	for _, q := range order {
		phase(o.log, fmt.Sprintf("opening a streamed engine on the %s shards, reading with O_DIRECT", name(q)))
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
	secs := map[shards.Quantization][]float64{}
	for i := range o.runs {
		phase(o.log, fmt.Sprintf("O_DIRECT decode run %d of %d: bf16, q8, q4 shards", i+1, o.runs))
		for _, q := range order {
			res, err := generate(ctx, engines[q], req)
			if err != nil {
				return err
			}
			secs[q] = append(secs[q], 1/res.Timings.DecodeTokensPerSec)
		}
	}
	base := stats.Median(secs[shards.None])
	disk := r.Machine.DirectRead.GBps * 1e9
	for q, t := range map[shards.Quantization]*target{shards.Q8: t11, shards.Q4: t12} {
		m := stats.Median(secs[q])
		t.judge(m / base)
		t.raw(name(q)+" s/token with O_DIRECT (median)", m, "s")
		t.raw("bf16 s/token with O_DIRECT (median)", base, "s")
		t.raw(name(q)+" layer shard bytes", float64(bytes[q]), "B")
		t.raw("bf16 layer shard bytes", float64(bytes[shards.None]), "B")
		t.note("byte ratio %.3f; disk bounds (bytes ÷ the best O_DIRECT pass): %s %.3f s, bf16 %.3f s", float64(bytes[q])/float64(bytes[shards.None]),
			name(q), float64(bytes[q])/disk, float64(bytes[shards.None])/disk)
		t.note("%s runs: %s; bf16 runs: %s", name(q), fmtRuns(secs[q]), fmtRuns(secs[shards.None]))
	}
	return nil
}

// name is a quantization's name in the report.
func name(q shards.Quantization) string {
	if q == shards.None {
		return "bf16"
	}
	return string(q)
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
