package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/layerstream/layerstream/internal/sections"
)

// Speculative decoding. A drafter proposes the tokens that may follow each decoding sequence; the batch loop
// feeds a sequence's last token and its draft to one forward pass (feed.every), whose logits at every position
// verify the draft: the sequence keeps the draft's tokens as long as its own choice agrees, then its own choice at
// the first disagreement (or, the whole draft accepted, at the last position), and the cache forgets the rest.
// One pass (one read of a streamed model) then gives up to 1 + len(draft) tokens.
//
// Greedy output is the same with or without a draft, token for token: a verification computes each position bit
// for bit as a decode step does (TestVerifyMatchesDecode). Sampled output keeps the target's distribution: every
// draft is deterministic (the draft model's greedy continuation, or text from the context), and speculative
// sampling with a deterministic proposal x accepts it with probability p(x), else draws from p without x
// (sampler.verify), which gives each token with probability p (Leviathan et al. 2023, Chen et al. 2023).

// drafter proposes continuations of sequences: draft returns, for each request, up to its n tokens that may
// follow its history. A drafter may keep state per sequence between steps; forget drops a sequence's.
type drafter interface {
	draft(ctx context.Context, reqs []draftRequest) ([][]int, error)
	forget(s *sequence)
	close()
}

// draftRequest asks for up to n (> 0) tokens following history, the ids of sequence seq so far.
type draftRequest struct {
	seq     *sequence
	history []int
	n       int
}

// DraftNgram is the Options.Draft value of prompt-lookup drafting (draftNgram).
const DraftNgram = "ngram"

// ngramSizes are the lengths of the context suffixes draftNgram looks up, longest first.
var ngramSizes = []int{4, 3, 2, 1}

// ngramDrafter drafts from the context itself (prompt lookup decoding, Saxena 2023): the tokens that followed the
// last earlier occurrence of the context's longest suffix of ngramSizes tokens. It costs no model, and pays where
// the output repeats its input (rewriting code, quoting, filling forms).
type ngramDrafter struct{}

func (ngramDrafter) draft(_ context.Context, reqs []draftRequest) ([][]int, error) {
	out := make([][]int, len(reqs))
	for i, r := range reqs {
		out[i] = draftNgram(r.history, r.n)
	}
	return out, nil
}

func (ngramDrafter) forget(*sequence) {}
func (ngramDrafter) close()           {}

// draftNgram returns up to n tokens that followed the last earlier occurrence of history's longest suffix of
// ngramSizes tokens, or nil.
func draftNgram(history []int, n int) []int {
	for _, size := range ngramSizes {
		if len(history) <= size {
			continue
		}
		suffix := history[len(history)-size:]
		for at := len(history) - size - 1; at >= 0; at-- { // the latest earlier occurrence
			if slices.Equal(history[at:at+size], suffix) {
				next := history[at+size : min(at+size+n, len(history))]
				return slices.Clone(next)
			}
		}
	}
	return nil
}

// modelDrafter drafts with a smaller model of the same vocabulary: its greedy continuation of each sequence,
// computed by its own engine (resident), one session per sequence keeping its cache between steps so that each
// step computes only the tokens the target accepted since.
type modelDrafter struct {
	e        *Engine
	sessions map[*sequence]*Session
}

// openDraftModel opens model as the draft of the target engine e, refusing one whose vocabulary differs.
func openDraftModel(ctx context.Context, model string, opts Options, target *Engine) (*modelDrafter, error) {
	d, err := Open(ctx, model, Options{Resident: true, Hub: opts.Hub, DType: opts.DType, KVCache: opts.KVCache, Profiler: nil})
	if err != nil {
		return nil, fmt.Errorf("draft model (--draft): %w", err)
	}
	if err := sameVocabulary(d, target); err != nil {
		d.Close()
		return nil, fmt.Errorf("draft model (--draft) %s: %w (see %s)", model, err, sections.Anchor(sections.Draft))
	}
	return &modelDrafter{e: d, sessions: map[*sequence]*Session{}}, nil
}

// sameVocabulary refuses a draft whose tokenizer differs from the target's: its tokens would not mean the same.
func sameVocabulary(draft, target *Engine) error {
	dt, derr := draft.Tokenizer()
	tt, terr := target.Tokenizer()
	if derr != nil || terr != nil {
		return fmt.Errorf("a draft model needs both models' tokenizers to compare their vocabularies: %w", errors.Join(derr, terr))
	}
	if dt.VocabSize() != tt.VocabSize() {
		return fmt.Errorf("its vocabulary has %d tokens, the target's %d: a draft must share the target's tokenizer", dt.VocabSize(), tt.VocabSize())
	}
	for id := range tt.VocabSize() {
		if a, b := dt.IDToken(id), tt.IDToken(id); a != b {
			return fmt.Errorf("its token %d is %q, the target's %q: a draft must share the target's tokenizer", id, a, b)
		}
	}
	if draft.cfg.VocabSize > target.cfg.VocabSize {
		return fmt.Errorf("its vocab_size %d exceeds the target's %d", draft.cfg.VocabSize, target.cfg.VocabSize)
	}
	return nil
}

// draft runs the draft model's greedy continuations of every request together (its batch loop shares each of
// its passes among them), each in the sequence's own session. A history the draft model's context cannot extend
// gets no draft.
func (m *modelDrafter) draft(ctx context.Context, reqs []draftRequest) ([][]int, error) {
	out := make([][]int, len(reqs))
	var batch []Request
	var at []int
	for i, r := range reqs {
		n := min(r.n, m.e.ContextLength()-len(r.history))
		if n <= 0 {
			continue
		}
		s := m.sessions[r.seq]
		if s == nil {
			s = m.e.NewSession()
			m.sessions[r.seq] = s
		}
		batch = append(batch, Request{PromptIDs: r.history, MaxNewTokens: n, StopIDs: []int{}, Session: s})
		at = append(at, i)
	}
	if len(batch) == 0 {
		return out, nil
	}
	res, err := m.e.GenerateBatch(ctx, batch, nil)
	if err != nil {
		return nil, fmt.Errorf("draft model: %w", err)
	}
	for k, r := range res {
		out[at[k]] = r.GeneratedIDs
	}
	return out, nil
}

func (m *modelDrafter) forget(s *sequence) {
	if sess := m.sessions[s]; sess != nil {
		sess.Close()
		delete(m.sessions, s)
	}
}

func (m *modelDrafter) close() { m.e.Close() }
