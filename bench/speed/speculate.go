package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/internal/stats"
	"github.com/layerstream/layerstream/tokenizer"
)

// Issue 33's targets: speculative decoding on the real Qwen2.5-Coder pair (scripts/fetch-qwen-pair.sh), the
// 1.5B target streamed from disk as under a memory limit below its size (O_DIRECT, no layer kept resident, so
// every pass reads the whole model), verified in one pass per draft.
const (
	pairPassGoal  = 3
	pairSpeedGoal = 0.4
	ngramPassGoal = 2
)

// The real pair's files, as scripts/fetch-qwen-pair.sh names them.
const (
	pairTarget = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
	pairDraft  = "qwen2.5-coder-0.5b-instruct.gguf"
)

func speculationTargets() []*target {
	return []*target{
		{ID: 15, Name: "a draft model multiplies tokens per read", Ratio: "generated tokens ÷ forward passes of Qwen2.5-Coder-1.5B streamed from disk, drafts of Qwen2.5-Coder-0.5B, greedy code prompts", Threshold: pairPassGoal},
		{ID: 16, Name: "speculation cuts s/token when streaming", Ratio: "decode s/token of the 1.5B streamed with the 0.5B draft ÷ without a draft (O_DIRECT, alternated runs, medians)", AtMost: true, Threshold: pairSpeedGoal},
		{ID: 17, Name: "n-gram drafts pay on rewrites", Ratio: "generated tokens ÷ forward passes of the 1.5B with --draft ngram on a \"rewrite this code\" prompt", Threshold: ngramPassGoal},
	}
}

// codePrompts are the greedy code prompts of targets 15 and 16; rewritePrompt is target 17's.
var codePrompts = []string{
	"Write a Python function that checks whether a string is a palindrome, ignoring case and punctuation, with a docstring and three doctests.",
	"Write a Go function that merges two sorted slices of ints into one sorted slice, with a table-driven test.",
}

const rewritePrompt = "Rewrite this code, adding type hints to every function, and change nothing else:\n\n```python\n" +
	"def mean(values):\n    total = 0\n    for value in values:\n        total += value\n    return total / len(values)\n\n\n" +
	"def variance(values):\n    m = mean(values)\n    total = 0\n    for value in values:\n        total += (value - m) ** 2\n    return total / len(values)\n\n\n" +
	"def standard_deviation(values):\n    return variance(values) ** 0.5\n```"

// measureSpeculation measures targets 15-17, or says why they cannot be here (the pair not fetched).
func measureSpeculation(ctx context.Context, o options, r *report) error {
	ts := []*target{r.target(15), r.target(16), r.target(17)}
	target, draft := o.pairTarget, o.pairDraft
	for _, f := range []string{target, draft} {
		if _, err := os.Stat(f); err != nil {
			for _, t := range ts {
				t.setNotMeasurable(fmt.Sprintf("%v (scripts/fetch-qwen-pair.sh fetches the pair; --pair-dir)", err))
			}
			return nil
		}
	}
	open := func(d string) (*engine.Engine, error) {
		return engine.Open(ctx, target, engine.Options{DirectIO: engine.DirectIOOn, MemoryBudget: engine.MemoryBudgetOff,
			Draft: d, ShardDir: filepath.Join(o.cacheDir, "pair-target")})
	}
	phase(o.log, "opening Qwen2.5-Coder-1.5B (streamed with O_DIRECT) without a draft, with the 0.5B draft, with n-grams")
	plain, err := open("")
	if err != nil {
		return err
	}
	defer plain.Close()
	drafted, err := open(draft)
	if err != nil {
		return err
	}
	defer drafted.Close()
	reqs, err := chatRequests(plain, codePrompts, 4*o.newTokens)
	if err != nil {
		return err
	}
	var without, with []float64
	var tokens, passes, proposed, accepted int
	for i := range o.runs {
		phase(o.log, fmt.Sprintf("speculation run %d of %d: without a draft, then with it", i+1, o.runs))
		for _, req := range reqs {
			a, err := generate(ctx, plain, req)
			if err != nil {
				return err
			}
			b, err := generate(ctx, drafted, req)
			if err != nil {
				return err
			}
			if sameIDs(a.GeneratedIDs, b.GeneratedIDs) != len(a.GeneratedIDs) {
				ts[1].failWith("greedy output differs with the draft")
			}
			without, with = append(without, 1/a.Timings.DecodeTokensPerSec), append(with, 1/b.Timings.DecodeTokensPerSec)
			tokens, passes = tokens+len(b.GeneratedIDs), passes+b.Passes
			proposed, accepted = proposed+b.Draft.Proposed, accepted+b.Draft.Accepted
		}
	}
	ts[0].judge(float64(tokens) / float64(passes))
	ts[0].raw("draft tokens accepted", float64(accepted), "tokens")
	ts[0].raw("draft tokens proposed", float64(proposed), "tokens")
	ts[0].note("%d prompts × %d runs, %d new tokens each, --draft-tokens %d", len(reqs), o.runs, reqs[0].MaxNewTokens, engine.DefaultDraftTokens)
	wm, dm := stats.Median(with), stats.Median(without)
	if ts[1].Verdict != fail {
		ts[1].judge(wm / dm)
	}
	ts[1].raw("s/token with the draft (median)", wm, "s")
	ts[1].raw("s/token without (median)", dm, "s")
	ts[1].note("runs without %s, with %s", fmtRuns(without), fmtRuns(with))
	drafted.Close()
	return measureNgram(ctx, o, ts[2], open)
}

// measureNgram measures target 17.
func measureNgram(ctx context.Context, o options, t *target, open func(draft string) (*engine.Engine, error)) error {
	e, err := open(engine.DraftNgram)
	if err != nil {
		return err
	}
	defer e.Close()
	reqs, err := chatRequests(e, []string{rewritePrompt}, 160)
	if err != nil {
		return err
	}
	res, err := generate(ctx, e, reqs[0])
	if err != nil {
		return err
	}
	t.judge(float64(len(res.GeneratedIDs)) / float64(res.Passes))
	t.raw("tokens", float64(len(res.GeneratedIDs)), "tokens")
	t.raw("passes", float64(res.Passes), "passes")
	t.raw("decode", 1/res.Timings.DecodeTokensPerSec, "s/token")
	return nil
}

// chatRequests are greedy requests of the prompts as user messages in the model's chat template (plain text for
// a model without one), cut to their last tokens where the model's context is too short for them.
func chatRequests(e *engine.Engine, prompts []string, newTokens int) ([]engine.Request, error) {
	tok, err := e.Tokenizer()
	if err != nil {
		return nil, err
	}
	var reqs []engine.Request
	for _, p := range prompts {
		ids, err := e.EncodePrompt("", []tokenizer.Message{{Role: "user", Content: p}})
		if !tok.HasChatTemplate() {
			ids, err = e.EncodePrompt(p, nil)
		}
		if err != nil {
			return nil, err
		}
		if room := e.ContextLength() - newTokens - 1; len(ids) > room { // a small model (the tests'): its last tokens
			ids = ids[len(ids)-room:]
		}
		reqs = append(reqs, engine.Request{PromptIDs: ids, MaxNewTokens: newTokens})
	}
	return reqs, nil
}
