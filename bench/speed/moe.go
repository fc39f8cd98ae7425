package main

import (
	"fmt"

	"github.com/layerstream/layerstream/internal/stats"
	"github.com/layerstream/layerstream/profiler"
	"github.com/layerstream/layerstream/shards"
)

// Issue 34's targets: a mixture of experts streamed from disk (O_DIRECT, no expert kept between tokens, in less
// memory than the model) reads a decode step's active bytes only, the layers' attention, norms, router and shared
// expert and the top-k routed experts, at the disk's rate: scripts/speed.sh --shape qwen3-30b-a3b --quantize q4.
const (
	moeReadGoal  = 1.2
	moeSpeedGoal = 1.3
)

func moeTargets() []*target {
	return []*target{
		{ID: 18, Name: "a mixture of experts reads its routed experts only", Ratio: "shard bytes read per decoded token ÷ active bytes (the layers' tensors but their experts, and num_experts_per_tok experts per layer), O_DIRECT, no expert cache", AtMost: true, Threshold: moeReadGoal},
		{ID: 19, Name: "routed experts stream at the disk's rate", Ratio: "s/token with O_DIRECT ÷ the active bytes' disk time (active bytes ÷ the O_DIRECT read rate of the passes around each run; median over runs)", AtMost: true, Threshold: moeSpeedGoal},
	}
}

// isMoETarget reports whether target id is one of moeTargets.
func isMoETarget(id int) bool { return id == 18 || id == 19 }

// activeBytes is the shard bytes a decode step of one sequence needs from the layers in units: a dense layer's
// whole shard, a sparse layer's tensors of no expert and k of its experts (of the mean expert size); 0 when no
// layer lays out experts.
func activeBytes(units []shards.UnitInfo, k int) int64 {
	var n int64
	sparse := false
	for _, u := range units {
		experts := u.Experts()
		if experts == 0 {
			n += u.FileSize
			continue
		}
		sparse = true
		var all int64
		for e := range experts {
			all += u.PartBytes(e)
		}
		n += u.PartBytes(shards.NoExpert) + int64(k)*all/int64(experts)
	}
	if !sparse {
		return 0
	}
	return n
}

// judgeMoE judges targets 18 and 19 from target 2's O_DIRECT runs: their s/token (secs) and ratios to the disk
// passes around each (of the whole layer files, layerBytes), the last run's profile (the bytes its decode steps
// read) and the streamed engine's peak memory (0: unknown), which must stay below the model's bytes.
func judgeMoE(r *report, units []shards.UnitInfo, k int, secs, ratios []float64, last profiler.Summary, peak int64) {
	t18, t19 := r.target(18), r.target(19)
	active := activeBytes(units, k)
	if active == 0 {
		t18.setNotMeasurable("the model is no mixture of experts (scripts/speed.sh --shape qwen3-30b-a3b --quantize q4)")
		t19.setNotMeasurable(t18.Reason)
		return
	}
	if last.DecodeSteps == 0 {
		t18.failWith("no decode step was profiled")
		t19.failWith(t18.Reason)
		return
	}
	perToken := float64(last.DecodeReadBytes) / float64(last.DecodeSteps)
	t18.judge(perToken / float64(active))
	t18.raw("shard bytes read per decoded token (last run)", perToken, "B")
	t18.raw("active bytes per token", float64(active), "B")
	t18.raw("decoder-layer shard bytes", float64(r.Model.LayerFileBytes), "B")
	layer := float64(r.Model.LayerFileBytes)
	var scaled []float64
	for _, x := range ratios {
		scaled = append(scaled, x*layer/float64(active)) // the passes' time scaled to the active bytes
	}
	t19.judge(stats.Median(scaled))
	t19.raw("s/token with O_DIRECT (median)", stats.Median(secs), "s")
	t19.raw("active bytes' time at the best pass", float64(active)/(r.Machine.DirectRead.GBps*1e9), "s/token")
	t19.note("runs' ratios: %s", fmtRuns(scaled))
	model := r.Model.LayerFileBytes + r.Model.HeadWeightBytes
	if peak > 0 {
		t18.raw("peak memory while streaming", float64(peak), "B")
		t18.raw("model bytes (layer shards and output projection)", float64(model), "B")
		if peak >= model {
			t18.failWith(fmt.Sprintf("the streamed engine's peak memory (%d B) is not below the model's bytes (%d B)", peak, model))
		}
	}
	t18.note("streamed with O_DIRECT and no expert cache: every expert a token is routed to is read again from disk")
}
