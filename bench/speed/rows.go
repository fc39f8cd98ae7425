package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/stats"
)

// Issue 40's targets: products of several rows on quantized blocks, on the real 1.5B Q4_K_M (the pair's target,
// kept resident): a pass over k new positions of one sequence (a draft's verification) against a one-position
// pass, and 16 sequences generating together against llama.cpp's 16 on the same file.
const (
	rows8Goal     = 1.3
	rows32Goal    = 2
	rowsBatchGoal = 1.5
	rowsRuns      = 5 // passes of each size (engine.PassTime), after a round that warms up
)

// rowsTargets are issue 40's targets.
func rowsTargets() []*target {
	return []*target{
		{ID: 21, Name: "an 8-row pass costs little more than one row", Ratio: "time of a forward pass over 8 new positions of one sequence (a draft's verification) ÷ over 1, Qwen2.5-Coder-1.5B Q4_K_M resident (medians)", AtMost: true, Threshold: rows8Goal},
		{ID: 22, Name: "a 32-row pass at most twice one row", Ratio: "time of a forward pass over 32 new positions ÷ over 1, the same model (medians)", AtMost: true, Threshold: rows32Goal},
		{ID: 23, Name: "16 sequences beyond llama.cpp's on a real model", Ratio: fmt.Sprintf("aggregate tok/s of %d sequences (resident) ÷ llama.cpp's %d parallel sequences, Qwen2.5-Coder-1.5B Q4_K_M", batchSize, batchSize), Threshold: rowsBatchGoal},
	}
}

// measureRows measures targets 21-23 on the pair's target (o.pairTarget), or says why they cannot be here.
func measureRows(ctx context.Context, o options, r *report) error {
	ts := []*target{r.target(21), r.target(22), r.target(23)}
	if _, err := os.Stat(o.pairTarget); err != nil {
		for _, t := range ts {
			t.setNotMeasurable(fmt.Sprintf("%v (scripts/fetch-qwen-pair.sh fetches the pair; --pair-dir)", err))
		}
		return nil
	}
	phase(o.log, "opening Qwen2.5-Coder-1.5B resident: passes of 1, 8 and 32 positions")
	e, err := engine.Open(ctx, o.pairTarget, engine.Options{Resident: true, ShardDir: filepath.Join(o.cacheDir, "pair-target"), NoPanels: o.noPanels})
	if err != nil {
		return err
	}
	defer e.Close()
	eos := checkpoint.EOSTokenIDs(e.Config(), e.Generation())
	prompt := syntheticPrompt(e.Config().VocabSize, eos, decodePromptTokens, o.seed+300)
	sizes := []int{1, 8, 32}
	times, err := e.PassTime(ctx, prompt, sizes, rowsRuns+1)
	if err != nil {
		return err
	}
	med := make([]float64, len(sizes))
	for i := range sizes {
		secs := make([]float64, rowsRuns)
		for j, d := range times[i][1:] { // the first round warms up
			secs[j] = d.Seconds()
		}
		med[i] = stats.Median(secs)
	}
	for i, t := range ts[:2] {
		t.judge(med[i+1] / med[0])
		t.raw(fmt.Sprintf("pass over %d positions (median)", sizes[i+1]), med[i+1]*1000, "ms")
		t.raw("pass over 1 position (median)", med[0]*1000, "ms")
		t.note("%d passes of each size, interleaved, after one that warms up", rowsRuns)
	}
	if o.noPanels {
		for _, t := range ts {
			t.note("--no-panels: the resident matrices kept in rows (engine.Options.NoPanels)")
		}
	}
	if o.ggufPython == "" { // the real GGUF needs no conversion: llama.cpp itself is all target 23 needs
		ts[2].setNotMeasurable("llama.cpp is not installed here (LAYERSTREAM_PEER_PYTHON)")
		return nil
	}
	phase(o.log, "starting llama.cpp on "+o.pairTarget)
	p, err := startPeer(ctx, peerConfig{Python: o.ggufPython}, o.pairTarget, runtime.GOMAXPROCS(0), batchSize*(decodePromptTokens+o.batchNewTokens)+64, batchSize)
	if err != nil {
		return err
	}
	defer p.close()
	return compareBatch(ctx, o, e, p, eos, ts[2])
}
