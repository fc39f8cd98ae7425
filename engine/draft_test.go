package engine

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/testutil"
)

func tinyGGUF(name string) string {
	return filepath.Join("..", "gguf", "testdata", "tiny", "tiny-llama-"+name+".gguf")
}

// draftPrompts are prompts of the tiny GGUF model's vocabulary, one of them repetitive (where n-grams draft).
var draftPrompts = [][]int{
	{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421},
	{1, 300, 301, 302, 303, 300, 301, 302, 303, 300, 301},
	{1, 17},
}

// TestDraftGreedyUnchanged: greedy output with a draft — a draft model (the same weights quantized to Q8_0), or
// the context's own n-grams (on stories260K, whose stories repeat themselves) — is the output without it, token
// for token, alone, batched and in a session's next turn, while the passes are fewer than the tokens.
func TestDraftGreedyUnchanged(t *testing.T) {
	t.Run("model", func(t *testing.T) { checkDraftGreedy(t, tinyGGUF("F32"), tinyGGUF("Q8_0")) })
	t.Run("ngram", func(t *testing.T) {
		checkDraftGreedy(t, testutil.SharedPath(t, "models", "stories260K-hf"), DraftNgram)
	})
}

// checkDraftGreedy generates from draftPrompts with target drafted by draft and without (TestDraftGreedyUnchanged).
func checkDraftGreedy(t *testing.T, target, draft string) {
	checkDraftGreedyOn(t, target, draft, draftPrompts)
}

// checkDraftGreedyOn is checkDraftGreedy on the given prompts.
func checkDraftGreedyOn(t *testing.T, target, draft string, prompts [][]int) {
	ctx := context.Background()
	plain := open(t, target, Options{ShardDir: filepath.Join(t.TempDir(), "s")})
	reqs := make([]Request, len(prompts))
	for i, p := range prompts {
		ids := make([]int, len(p))
		for k, id := range p {
			ids[k] = id % plain.cfg.VocabSize
		}
		reqs[i] = Request{PromptIDs: ids, MaxNewTokens: 60, StopIDs: []int{}}
	}
	want, err := plain.GenerateBatch(ctx, reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := open(t, target, Options{ShardDir: filepath.Join(t.TempDir(), "s"), Draft: draft})
	passes, tokens, proposed, accepted := 0, 0, 0, 0
	for i, req := range reqs {
		got, err := e.Generate(ctx, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.GeneratedIDs, want[i].GeneratedIDs) {
			t.Fatalf("prompt %d alone: %v, without a draft %v", i, got.GeneratedIDs, want[i].GeneratedIDs)
		}
		passes, tokens = passes+got.Passes, tokens+len(got.GeneratedIDs)
		proposed, accepted = proposed+got.Draft.Proposed, accepted+got.Draft.Accepted
		if got.Passes != len(got.GeneratedIDs)-got.Draft.Accepted {
			t.Errorf("prompt %d: %d passes for %d tokens with %d accepted", i, got.Passes, len(got.GeneratedIDs), got.Draft.Accepted)
		}
	}
	t.Logf("%d tokens in %d passes (%.2f per pass); %d of %d draft tokens accepted", tokens, passes, float64(tokens)/float64(passes), accepted, proposed)
	if accepted == 0 || passes >= tokens {
		t.Errorf("no draft token accepted: %d tokens in %d passes", tokens, passes)
	}
	batch, err := e.GenerateBatch(ctx, reqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range batch {
		if !slices.Equal(batch[i].GeneratedIDs, want[i].GeneratedIDs) {
			t.Fatalf("prompt %d batched: %v, without a draft %v", i, batch[i].GeneratedIDs, want[i].GeneratedIDs)
		}
	}
	// A session's second turn continues from the cache the first left (drafts truncated out of it).
	s := e.NewSession()
	defer s.Close()
	first, err := e.Generate(ctx, Request{PromptIDs: reqs[0].PromptIDs, MaxNewTokens: 20, StopIDs: []int{}, Session: s}, nil)
	if err != nil {
		t.Fatal(err)
	}
	next := slices.Concat(reqs[0].PromptIDs, first.GeneratedIDs, reqs[2].PromptIDs)
	got, err := e.Generate(ctx, Request{PromptIDs: next, MaxNewTokens: 20, StopIDs: []int{}, Session: s}, nil)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := plain.Generate(ctx, Request{PromptIDs: next, MaxNewTokens: 20, StopIDs: []int{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.CachedPromptTokens == 0 || !slices.Equal(got.GeneratedIDs, alone.GeneratedIDs) {
		t.Errorf("session's next turn: %v (%d cached), alone without a draft: %v", got.GeneratedIDs, got.CachedPromptTokens, alone.GeneratedIDs)
	}
}

// TestDraftRefused: a draft model of another vocabulary is refused by name, and so are drafts where they cannot
// keep greedy output unchanged.
func TestDraftRefused(t *testing.T) {
	other := filepath.Join("..", "gguf", "testdata", "families", "qwen2.gguf")
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{Draft: other}, "must share the target's tokenizer"},
		{Options{Draft: DraftNgram, GraphDecode: true}, "needs the host kernels"},
		{Options{Draft: DraftNgram, Arithmetic: ArithmeticLlamaCpp}, "other roundings"},
		{Options{Draft: DraftNgram, DraftTokens: MaxDraftTokens + 1}, "draft tokens"},
		{Options{DraftTokens: 4}, "without a draft"},
	} {
		c.opts.ShardDir = filepath.Join(t.TempDir(), "s")
		e, err := Open(context.Background(), tinyGGUF("F32"), c.opts)
		if err == nil {
			e.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want an error saying %q", c.opts, err, c.want)
		}
	}
}

// TestSpeculativeSamplingDistribution: a draft leaves the sampled token's distribution unchanged. For logits,
// sampling settings and a draft token (likely, unlikely, or cut by top-k/top-p), 40,000 draws of sampler.verify
// follow the distribution sampler.next draws from: a chi-square test over the tokens (p > 0.001 each case, so the
// test fails by chance about once in a thousand runs per case; the seeds are fixed, so it does not flake).
func TestSpeculativeSamplingDistribution(t *testing.T) {
	logits := []float32{2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0}
	for _, c := range []struct {
		s  Sampling
		xs []int
	}{
		{Sampling{Temperature: 1}, []int{0}},
		{Sampling{Temperature: 1}, []int{5}},
		{Sampling{Temperature: 0.7, TopK: 4}, []int{6}}, // the draft outside the top-k
		{Sampling{Temperature: 1.3, TopP: 0.8}, []int{1}},
		{Sampling{Temperature: 1, RepetitionPenalty: 1.3}, []int{2}},
		{Sampling{Temperature: 1}, []int{1, 0}},               // a tree's two candidates
		{Sampling{Temperature: 0.8, TopK: 5}, []int{4, 7, 2}}, // one of three cut by top-k
	} {
		const draws = 40000
		ref, err := newSampler(c.s)
		if err != nil {
			t.Fatal(err)
		}
		history := []int{2, 3}
		order, probs, sum := ref.dist(ref.penalized(logits, history))
		p := make([]float64, len(logits))
		for i, id := range order {
			p[id] = probs[i] / sum
		}
		c.s.Seed = 7
		sm, _ := newSampler(c.s)
		counts := make([]float64, len(logits))
		for range draws {
			tok, which := sm.verify(logits, history, c.xs)
			if which >= 0 && tok != c.xs[which] || which < 0 && slices.Contains(c.xs, tok) {
				t.Fatalf("%+v: verify gave %d, candidate %d", c, tok, which)
			}
			counts[tok]++
		}
		chi2, df := 0.0, -1
		for id, n := range counts {
			if p[id] == 0 {
				if n > 0 {
					t.Fatalf("%+v draft %v: token %d drawn %v times, probability 0", c.s, c.xs, id, n)
				}
				continue
			}
			e := p[id] * draws
			chi2 += (n - e) * (n - e) / e
			df++
		}
		if crit := chi2Critical001(df); chi2 > crit {
			t.Errorf("%+v draft %v: chi-square %.1f over %d degrees of freedom > %.1f (p < 0.001): counts %v, expected %v", c.s, c.xs, chi2, df, crit, counts, p)
		}
	}
}

// chi2Critical001 is the chi-square distribution's 0.999 quantile for df degrees of freedom (1-7).
func chi2Critical001(df int) float64 {
	return []float64{0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32}[df]
}

// TestDraftEndsMidVerification: a sequence that ends while its draft is verified (its callback fails on a token
// the draft proposed) leaves its cache holding its history only: a session's next turn, and the prefix cache's
// next request, compute what a plain engine computes (found by review: the draft's unverified positions stayed
// in the row).
func TestDraftEndsMidVerification(t *testing.T) {
	checkDraftEndsMid(t, tinyGGUF("F32"), tinyGGUF("Q8_0"), []int{1, 300, 301, 302, 303, 300, 301, 302, 303, 300, 301})
}

// checkDraftEndsMid ends generations of target drafted by draft at each of their first tokens (TestDraftEndsMidVerification).
func checkDraftEndsMid(t *testing.T, target, draft string, prompt []int) {
	ctx := context.Background()
	plain := open(t, target, Options{ShardDir: filepath.Join(t.TempDir(), "s")})
	boom := errors.New("boom")
	for _, prefix := range []bool{false, true} {
		e := open(t, target, Options{ShardDir: filepath.Join(t.TempDir(), "s"), Draft: draft, PrefixCache: prefix})
		for stopAt := 2; stopAt <= 9; stopAt++ {
			var s *Session
			if !prefix {
				s = e.NewSession()
			}
			n := 0
			res, err := e.Generate(ctx, Request{PromptIDs: prompt, MaxNewTokens: 30, StopIDs: []int{}, Session: s}, func(Token) error {
				if n++; n == stopAt {
					return boom
				}
				return nil
			})
			if !errors.Is(err, boom) || res.Draft.Proposed == 0 {
				t.Fatalf("stop at %d: %v, draft %+v", stopAt, err, res.Draft)
			}
			next := slices.Concat(prompt, res.GeneratedIDs, []int{17, 18})
			got, err := e.Generate(ctx, Request{PromptIDs: next, MaxNewTokens: 10, StopIDs: []int{}, Session: s}, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := plain.Generate(ctx, Request{PromptIDs: next, MaxNewTokens: 10, StopIDs: []int{}}, nil)
			if !slices.Equal(got.GeneratedIDs, want.GeneratedIDs) || got.CachedPromptTokens == 0 {
				t.Errorf("prefix cache %v, stop at %d: next %v (cached %d), alone %v", prefix, stopAt, got.GeneratedIDs, got.CachedPromptTokens, want.GeneratedIDs)
			}
			if s != nil {
				s.Close()
			}
		}
	}
}

// TestDraftDynamicRope: with dynamic NTK rope, whose frequencies follow a pass's length past the original
// context, drafts leave every token and its log-probability as decode steps give them (a verification builds each
// position's table as a decode step at it would; found by review).
func TestDraftDynamicRope(t *testing.T) {
	c := familyBase("LlamaForCausalLM", "llama")
	maps.Copy(c, map[string]any{"max_position_embeddings": 16, "rope_parameters": map[string]any{"rope_type": "dynamic", "rope_theta": 1000.0, "factor": 4.0}})
	dir := writeFamily(t, c, nil)
	prompt := []int{1, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8, 5, 6}
	run := func(draft string) ([]Token, *Result) {
		e := open(t, dir, Options{ShardDir: filepath.Join(t.TempDir(), "s"), Draft: draft})
		var toks []Token
		res, err := e.Generate(context.Background(), Request{PromptIDs: prompt, MaxNewTokens: 30, StopIDs: []int{}, Logprobs: true}, func(tk Token) error {
			toks = append(toks, tk)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return toks, res
	}
	plain, _ := run("")
	drafted, res := run(DraftNgram)
	if res.Draft.Accepted == 0 {
		t.Fatalf("no draft token accepted (%+v): the test exercises nothing", res.Draft)
	}
	for i := range plain {
		if plain[i].ID != drafted[i].ID || plain[i].Logprob != drafted[i].Logprob {
			t.Fatalf("token %d: %d (logprob %v) without a draft, %d (logprob %v) with", i+1, plain[i].ID, plain[i].Logprob, drafted[i].ID, drafted[i].Logprob)
		}
	}
}
