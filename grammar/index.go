package grammar

import (
	"fmt"
	"math"
)

// Index is a vocabulary's token texts as a trie of bytes, built once per tokenizer: the tokens a state allows
// are found by walking the trie with the automaton, a subtree left as soon as its prefix is refused.
type Index struct {
	vocab int
	nodes []trieNode
	edges []trieEdge
	ids   []int32 // tokens ending at each node: nodes[i].ids is ids[idFrom:idTo]
	bytes [][]byte
}

type trieNode struct {
	edgeFrom, edgeTo int32
	idFrom, idTo     int32
}

type trieEdge struct {
	b  byte
	to int32
}

// NewIndex builds the index of a vocabulary of n tokens; text gives the bytes a token adds to the text, or
// false for tokens that never come in constrained text (special tokens: the stop tokens are allowed apart).
func NewIndex(n int, text func(id int) ([]byte, bool)) *Index {
	type building struct {
		children map[byte]int
		ids      []int32
	}
	nodes := []building{{children: map[byte]int{}}}
	x := &Index{vocab: n, bytes: make([][]byte, n)}
	for id := range n {
		b, ok := text(id)
		if !ok || len(b) == 0 {
			continue
		}
		x.bytes[id] = b
		at := 0
		for _, c := range b {
			next, ok := nodes[at].children[c]
			if !ok {
				next = len(nodes)
				nodes = append(nodes, building{children: map[byte]int{}})
				nodes[at].children[c] = next
			}
			at = next
		}
		nodes[at].ids = append(nodes[at].ids, int32(id))
	}
	x.nodes = make([]trieNode, len(nodes))
	for i, b := range nodes {
		tn := trieNode{edgeFrom: int32(len(x.edges)), idFrom: int32(len(x.ids))}
		for c := range 256 {
			if to, ok := b.children[byte(c)]; ok {
				x.edges = append(x.edges, trieEdge{byte(c), int32(to)})
			}
		}
		x.ids = append(x.ids, b.ids...)
		tn.edgeTo, tn.idTo = int32(len(x.edges)), int32(len(x.ids))
		x.nodes[i] = tn
	}
	return x
}

// Vocab is the vocabulary's size.
func (x *Index) Vocab() int { return x.vocab }

// TokenBytes is the text of a token in the index (nil: not in it).
func (x *Index) TokenBytes(id int) []byte {
	if id < 0 || id >= len(x.bytes) {
		return nil
	}
	return x.bytes[id]
}

// allowed sets in mask the tokens whose whole text the state accepts.
func (x *Index) allowed(st State, mask []uint64) {
	x.walk(0, st, mask)
}

func (x *Index) walk(at int32, st State, mask []uint64) {
	n := &x.nodes[at]
	for _, id := range x.ids[n.idFrom:n.idTo] {
		mask[id>>6] |= 1 << (uint(id) & 63)
	}
	for _, e := range x.edges[n.edgeFrom:n.edgeTo] {
		if next, ok := st.Step(e.b); ok {
			x.walk(e.to, next, mask)
		}
	}
}

// Constraint keeps one generation to a schema: Allow masks the logits of the tokens that may not come next,
// Accept advances by the token chosen. Not safe for concurrent use: one per generation.
type Constraint struct {
	x     *Index
	st    State
	cache map[State][]uint64
	text  []byte
}

// maxCached bounds a constraint's cache of allowed-token masks.
const maxCached = 1024

// NewConstraint starts a generation of s's values over x's vocabulary.
func NewConstraint(s *Schema, x *Index) *Constraint {
	return &Constraint{x: x, st: s.Start(), cache: map[State][]uint64{}}
}

// Allow sets to -Inf the logits of the tokens that may not come next: a token whose text the schema refuses
// here, and a stop token (of stop) before the value is complete. When no token's text can continue the value
// (a vocabulary that cannot spell what must come), the stop tokens stay, and Accept then fails.
func (c *Constraint) Allow(logits []float32, stop []int) {
	complete := c.st.Complete()
	saved := make([]float32, len(stop))
	for i, id := range stop {
		if id >= 0 && id < len(logits) {
			saved[i] = logits[id]
		}
	}
	mask := c.mask()
	inf := float32(math.Inf(-1))
	some := false
	for id := range logits {
		if id < c.x.vocab && mask[id>>6]&(1<<(uint(id)&63)) != 0 {
			some = true
			continue
		}
		logits[id] = inf
	}
	if complete || !some {
		for i, id := range stop {
			if id >= 0 && id < len(logits) {
				logits[id] = saved[i]
			}
		}
	}
}

// mask is the allowed tokens of the current state (not the stop tokens), cached per state.
func (c *Constraint) mask() []uint64 {
	if m, ok := c.cache[c.st]; ok {
		return m
	}
	m := make([]uint64, (c.x.vocab+63)/64)
	if !c.st.Done() {
		c.x.allowed(c.st, m)
	}
	if len(c.cache) >= maxCached {
		clear(c.cache)
	}
	c.cache[c.st] = m
	return m
}

// Accept advances by the token chosen: its text must be accepted, or it is a token without text (a stop token)
// and the value complete.
func (c *Constraint) Accept(id int) error {
	b := c.x.TokenBytes(id)
	if b == nil {
		if c.st.Complete() {
			return nil
		}
		return fmt.Errorf("grammar: token %d ends the text before the JSON value is complete", id)
	}
	st, ok := c.st.StepString(b)
	if !ok {
		return fmt.Errorf("grammar: token %d (%q) does not continue the JSON text %q", id, b, c.text)
	}
	c.st = st
	c.text = append(c.text, b...)
	return nil
}

// Complete reports whether the text so far is a whole value.
func (c *Constraint) Complete() bool { return c.st.Complete() }

// Text is the text accepted so far.
func (c *Constraint) Text() string { return string(c.text) }
