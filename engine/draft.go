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

// drafter proposes continuations of sequences: draft returns, for each request, a draft of up to its n tokens
// that may follow its history (a chain, and up to its leaves more as a tree). A drafter may keep state per
// sequence between steps; forget drops a sequence's.
type drafter interface {
	draft(ctx context.Context, reqs []draftRequest) ([]draftTree, error)
	forget(s *sequence)
	close()
}

// draftRequest asks for up to n (> 0) tokens following history, the ids of sequence seq so far, and up to leaves
// second choices beside them.
type draftRequest struct {
	seq     *sequence
	history []int
	n       int
	leaves  int
}

// draftTree is a draft: a chain of tokens (each the child of the one before it, the first the child of the
// sequence's last token), then leaves, each a sibling of a chain token — another candidate at its position. Leaf
// i is ids[chain+i], the child of chain token leafParent[i] (-1: of the last token). One pass verifies the whole
// tree: the chain is written to the cache ahead of its attention, a leaf attends to its ancestors there and to
// itself (hostOps.Attention).
type draftTree struct {
	ids        []int
	chain      int
	leafParent []int
}

// written is how many of a pass's t new positions — the last token, then the draft — are written to the cache:
// all of them for a chain (d nil), the last token and the chain for a tree (its leaves would overwrite the
// chain's positions).
func (d *draftTree) written(t int) int {
	if d == nil {
		return t
	}
	return 1 + d.chain
}

// chainDraft is a draft without leaves.
func chainDraft(ids []int) draftTree { return draftTree{ids: ids, chain: len(ids)} }

// children returns the draft tokens (indices into ids) that may follow node: chain token node (-1: the last
// token): the next chain token first, then the leaves hanging from it.
func (d draftTree) children(node int) []int {
	var kids []int
	if node+1 < d.chain {
		kids = append(kids, node+1)
	}
	for i, p := range d.leafParent {
		if p == node {
			kids = append(kids, d.chain+i)
		}
	}
	return kids
}

// depth is draft token i's distance from the last token (1 for its children).
func (d draftTree) depth(i int) int {
	if i < d.chain {
		return i + 1
	}
	return d.leafParent[i-d.chain] + 2
}

// DraftNgram is the Options.Draft value of prompt-lookup drafting (draftNgram).
const DraftNgram = "ngram"

// ngramSizes are the lengths of the context suffixes draftNgram looks up, longest first.
var ngramSizes = []int{4, 3, 2, 1}

// ngramDrafter drafts from the context itself (prompt lookup decoding, Saxena 2023): the tokens that followed the
// last earlier occurrence of the context's longest suffix of ngramSizes tokens. It costs no model, and pays where
// the output repeats its input (rewriting code, quoting, filling forms).
type ngramDrafter struct{}

func (ngramDrafter) draft(_ context.Context, reqs []draftRequest) ([]draftTree, error) {
	out := make([]draftTree, len(reqs))
	for i, r := range reqs {
		out[i] = chainDraft(draftNgram(r.history, r.n))
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
// its passes among them), each in the sequence's own session: the chain, and as leaves its second choices at the
// first positions (request.leaves). A history the draft model's context cannot extend gets no draft.
func (m *modelDrafter) draft(ctx context.Context, reqs []draftRequest) ([]draftTree, error) {
	out := make([]draftTree, len(reqs))
	var batch []Request
	var at []int
	for i, r := range reqs {
		n := min(r.n, m.e.ContextLength()-len(r.history))
		if n <= 0 || slices.ContainsFunc(r.history, func(id int) bool { return id >= m.e.cfg.VocabSize }) {
			continue // the draft model's context is full, or the target chose an id past its vocabulary's rows
		}
		s := m.sessions[r.seq]
		if s == nil {
			s = m.e.NewSession()
			m.sessions[r.seq] = s
		}
		req := Request{PromptIDs: r.history, MaxNewTokens: n, StopIDs: []int{}, Session: s}
		if r.leaves > 0 {
			req.TopLogprobs = 2
		}
		batch = append(batch, req)
		at = append(at, i)
	}
	if len(batch) == 0 {
		return out, nil
	}
	seconds := make([][]int, len(batch)) // each step's second choice
	res, err := m.e.GenerateBatch(ctx, batch, func(k int, t Token) error {
		second := -1
		for _, c := range t.TopLogprobs {
			if c.ID != t.ID {
				second = c.ID
				break
			}
		}
		seconds[k] = append(seconds[k], second)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("draft model: %w", err)
	}
	for k, r := range res {
		d := chainDraft(r.GeneratedIDs)
		for depth, second := range seconds[k] {
			if len(d.leafParent) == reqs[at[k]].leaves || depth >= d.chain {
				break
			}
			if second >= 0 {
				d.ids = append(d.ids, second)
				d.leafParent = append(d.leafParent, depth-1)
			}
		}
		out[at[k]] = d
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
