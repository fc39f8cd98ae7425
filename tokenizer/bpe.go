package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is the byte-pair-encoding model of tokenizer.json: a vocabulary, ranked merges, and the rules for characters
// missing from the vocabulary (byte fallback, unk).
type bpe struct {
	vocab  map[string]int
	tokens []string // id → token; "" for ids the model vocabulary does not use

	// merges maps the pair (left id, right id) to rank<<32 | merged id.
	merges map[uint64]uint64

	unkToken     string
	unk          int // -1 when unk_token is unset or missing from the vocabulary
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	prefix       string // continuing_subword_prefix
	suffix       string // end_of_word_suffix

	byteLevelIDs    [256]int32 // id of the byte-level character of each byte, -1 if missing
	byteFallbackIDs [256]int32 // id of "<0xXX>", -1 if missing
	runeIDs         []int32    // id of each single-character token by rune (below len), -1 if missing

	// metaspaceWords splits a word before every run of "▁" that follows another character. It is set only when no
	// vocabulary entry holds "▁" after another character, so no merge can cross such a boundary and the split
	// changes nothing but speed (SentencePiece-style tokenizers have no pre-tokenizer and would otherwise
	// merge a whole paragraph as one word).
	metaspaceWords bool

	mu    sync.Mutex
	cache [2]map[string][]int32 // merged words: [0] plain, [1] byte-level (a tokenizer normally makes one kind)

	scratch sync.Pool // *bpeScratch
}

const (
	maxCachedWord = 64    // bytes; longer words are merged every time
	maxCacheSize  = 20000 // entries; the cache is dropped when it grows past this
	metaspace     = "▁"
)

// bpeModelJSON holds the small fields of a BPE model. dropout is not read: it randomizes merges for training, and
// encoding here is deterministic.
type bpeModelJSON struct {
	Type                    string  `json:"type"`
	UnkToken                *string `json:"unk_token"`
	ContinuingSubwordPrefix *string `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string `json:"end_of_word_suffix"`
	FuseUnk                 bool    `json:"fuse_unk"`
	ByteFallback            bool    `json:"byte_fallback"`
	IgnoreMerges            bool    `json:"ignore_merges"`
}

// parseBPE reads the model object at the scanner's position: vocab and merges with jsonScanner as they come
// (they are most of a tokenizer.json), the other fields with encoding/json.
func parseBPE(s *jsonScanner) (*bpe, error) {
	if s.peek() != '{' {
		return nil, s.errorf("want the model object")
	}
	b := &bpe{unk: -1}
	small := map[string]json.RawMessage{}
	var vocabRaw, mergesRaw json.RawMessage
	mergesParsed := false
	err := s.object(func(key []byte) error {
		switch string(key) {
		case "vocab":
			if s.peek() != '{' { // not a BPE vocabulary: the model type decides the error below
				v, err := s.skip()
				vocabRaw = v
				return err
			}
			start := s.pos
			if err := b.parseVocab(s); err != nil {
				return fmt.Errorf("vocab: %w", err)
			}
			vocabRaw = s.data[start:s.pos]
		case "merges":
			start := s.pos
			// Merged tokens depend on continuing_subword_prefix, which Hugging Face writes (maybe as null)
			// before the vocabulary and merges. In another order the merges are read at the end.
			var prefix *string
			if raw, ok := small["continuing_subword_prefix"]; ok && b.vocab != nil && json.Unmarshal(raw, &prefix) == nil {
				if prefix != nil {
					b.prefix = *prefix
				}
				if err := b.parseMerges(s); err != nil {
					return fmt.Errorf("merges: %w", err)
				}
				mergesParsed = true
				mergesRaw = s.data[start:s.pos]
				return nil
			}
			v, err := s.skip()
			mergesRaw = v
			return err
		default:
			v, err := s.skip()
			small[string(key)] = v
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var m bpeModelJSON
	if raw, err := json.Marshal(small); err != nil {
		return nil, err
	} else if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m.Type == "" && mergesRaw != nil {
		m.Type = "BPE" // old files omit the model type
	}
	if m.Type != "BPE" {
		return nil, fmt.Errorf("unsupported model type %q: only BPE tokenizers (byte-level like GPT-2/Qwen/Llama-3, or SentencePiece-style like Llama-2) are supported, not WordPiece, Unigram or WordLevel", m.Type)
	}
	b.fuseUnk, b.byteFallback, b.ignoreMerges = m.FuseUnk, m.ByteFallback, m.IgnoreMerges
	if m.ContinuingSubwordPrefix != nil {
		b.prefix = *m.ContinuingSubwordPrefix
	}
	if m.EndOfWordSuffix != nil {
		b.suffix = *m.EndOfWordSuffix
	}
	if b.vocab == nil {
		if isNull(vocabRaw) {
			return nil, errors.New("vocab: missing")
		}
		if err := b.parseVocab(&jsonScanner{data: vocabRaw}); err != nil {
			return nil, fmt.Errorf("vocab: %w", err)
		}
	}
	if m.UnkToken != nil && *m.UnkToken != "" {
		b.unkToken = *m.UnkToken
		if id, ok := b.vocab[b.unkToken]; ok {
			b.unk = id
		}
	}
	if !mergesParsed {
		if err := b.parseMerges(&jsonScanner{data: mergesRaw}); err != nil {
			return nil, fmt.Errorf("merges: %w", err)
		}
	}
	b.initTables()
	return b, nil
}

const maxID = 1 << 21 // ids past this (2M) are taken for a corrupt file

// parseVocab reads the {"token": id, ...} object at the scanner's position.
func (b *bpe) parseVocab(s *jsonScanner) error {
	b.vocab = make(map[string]int, (len(s.data)-s.pos)/48)
	top := -1
	err := s.object(func(key []byte) error {
		id, err := s.int()
		if err != nil {
			return err
		}
		if id > maxID {
			return fmt.Errorf("token %q has id %d (want 0..%d)", key, id, maxID)
		}
		b.vocab[string(key)] = id
		top = max(top, id)
		return nil
	})
	if err != nil {
		return err
	}
	b.tokens = make([]string, top+1)
	for tok, id := range b.vocab {
		if b.tokens[id] != "" {
			return fmt.Errorf("id %d is used by both %q and %q", id, b.tokens[id], tok)
		}
		b.tokens[id] = tok
	}
	return nil
}

// parseMerges reads merges as "a b" strings (older files) or ["a", "b"] pairs, in rank order, from the scanner's
// position (none when it is at the end or at null).
func (b *bpe) parseMerges(s *jsonScanner) error {
	b.merges = map[uint64]uint64{}
	switch s.peek() {
	case 0: // absent
		return nil
	case 'n':
		if v, err := s.skip(); err != nil || string(v) != "null" {
			return s.errorf("want a list or null")
		}
		return nil
	}
	b.merges = make(map[uint64]uint64, (len(s.data)-s.pos)/40)
	var joined []byte
	return s.array(func(rank int) error {
		var left, right []byte
		var err error
		if s.peek() == '"' {
			line, err := s.str(nil)
			if err != nil {
				return err
			}
			i := bytes.IndexByte(line, ' ')
			if i < 0 || bytes.IndexByte(line[i+1:], ' ') >= 0 {
				return fmt.Errorf("[%d] = %q: want two tokens separated by one space", rank, line)
			}
			left, right = line[:i], line[i+1:]
		} else {
			n := 0
			err = s.array(func(i int) error {
				if i > 1 {
					return fmt.Errorf("[%d]: want a pair", rank)
				}
				var e error
				if i == 0 {
					left, e = s.str(nil)
				} else {
					right, e = s.str(nil)
				}
				n++
				return e
			})
			if err != nil {
				return err
			}
			if n != 2 {
				return fmt.Errorf("[%d]: want a pair of tokens", rank)
			}
		}
		a, ok1 := b.vocab[string(left)]
		c, ok2 := b.vocab[string(right)]
		if !ok1 || !ok2 {
			return fmt.Errorf("[%d] = %q %q: part not in the vocabulary", rank, left, right)
		}
		joined = append(append(joined[:0], left...), bytes.TrimPrefix(right, []byte(b.prefix))...)
		id, ok := b.vocab[string(joined)]
		if !ok {
			return fmt.Errorf("[%d] = %q %q: result %q not in the vocabulary", rank, left, right, joined)
		}
		key := uint64(a)<<32 | uint64(c)
		if _, dup := b.merges[key]; !dup { // the first (lowest) rank wins
			b.merges[key] = uint64(rank)<<32 | uint64(id)
		}
		return nil
	})
}

func (b *bpe) initTables() {
	for i := range 256 {
		b.byteLevelIDs[i], b.byteFallbackIDs[i] = -1, -1
		if id, ok := b.vocab[string(byteLevelRunes[i])]; ok {
			b.byteLevelIDs[i] = int32(id)
		}
		if id, ok := b.vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.byteFallbackIDs[i] = int32(id)
		}
	}
	if b.prefix == "" && b.suffix == "" {
		b.runeIDs = make([]int32, 0x3100) // Latin, Greek, Cyrillic, CJK punctuation, kana…
		for i := range b.runeIDs {
			b.runeIDs[i] = -1
		}
		for tok, id := range b.vocab {
			if r, n := utf8.DecodeRuneInString(tok); n == len(tok) && r != utf8.RuneError && int(r) < len(b.runeIDs) {
				b.runeIDs[r] = int32(id)
			}
		}
	}
	b.cache = [2]map[string][]int32{{}, {}}
}

// useMetaspaceWords turns on the word split described at bpe.metaspaceWords when the tokenizer has no
// pre-tokenizer and the vocabulary allows it.
func (b *bpe) useMetaspaceWords(noPreTokenizer bool) {
	if !noPreTokenizer || b.prefix != "" || b.suffix != "" {
		return
	}
	if _, ok := b.vocab[metaspace]; !ok {
		return
	}
	for tok := range b.vocab {
		if i := strings.Index(strings.TrimLeft(tok, metaspace), metaspace); i >= 0 {
			return
		}
	}
	b.metaspaceWords = true
}

// size is one past the largest model id.
func (b *bpe) size() int { return len(b.tokens) }

// encode appends the ids of one pre-tokenized word. byteLevel says the word holds raw bytes still to be mapped to
// GPT-2's byte-level alphabet (the ByteLevel pre-tokenizer defers that mapping to here).
func (b *bpe) encode(word string, byteLevel bool, out []int) ([]int, error) {
	if !b.metaspaceWords || byteLevel {
		return b.encodeWord(word, byteLevel, out)
	}
	start := 0
	for i := 1; i < len(word); i++ {
		if strings.HasPrefix(word[i:], metaspace) && !strings.HasSuffix(word[:i], metaspace) {
			var err error
			if out, err = b.encodeWord(word[start:i], false, out); err != nil {
				return out, err
			}
			start = i
		}
	}
	return b.encodeWord(word[start:], false, out)
}

func (b *bpe) encodeWord(word string, byteLevel bool, out []int) ([]int, error) {
	if word == "" {
		return out, nil
	}
	if b.ignoreMerges {
		w := word
		if byteLevel {
			w = byteLevelString(word)
		}
		if id, ok := b.vocab[w]; ok {
			return append(out, id), nil
		}
	}
	cacheable := len(word) <= maxCachedWord
	if cacheable {
		b.mu.Lock()
		ids, ok := b.cache[cacheIndex(byteLevel)][word]
		b.mu.Unlock()
		if ok {
			for _, id := range ids {
				out = append(out, int(id))
			}
			return out, nil
		}
	}
	s, _ := b.scratch.Get().(*bpeScratch)
	if s == nil {
		s = &bpeScratch{}
	}
	defer b.scratch.Put(s)
	if err := b.initSymbols(s, word, byteLevel); err != nil {
		return out, err
	}
	b.mergeAll(s)
	n0 := len(out)
	for _, sym := range s.syms {
		if sym.size > 0 {
			out = append(out, int(sym.id))
		}
	}
	if cacheable {
		ids := make([]int32, len(out)-n0)
		for i, id := range out[n0:] {
			ids[i] = int32(id)
		}
		b.mu.Lock()
		c := b.cache[cacheIndex(byteLevel)]
		if len(c) >= maxCacheSize {
			clear(c)
		}
		c[strings.Clone(word)] = ids // a copy: word may be a slice of a long text
		b.mu.Unlock()
	}
	return out, nil
}

func cacheIndex(byteLevel bool) int {
	if byteLevel {
		return 1
	}
	return 0
}

type symbol struct {
	id         int32
	prev, next int32 // neighbour indexes, -1 at the ends
	size       int32 // bytes covered; 0 once merged into the symbol on its left

	// The merge of this symbol with the next one (mergeShort only): its rank (noMerge when there is none) and
	// the merged id.
	rank  uint32
	newID int32
}

const noMerge = ^uint32(0)

// maxShortWord is the most symbols a word may have for mergeShort; longer ones go through the heap.
var maxShortWord = 48

type mergeCandidate struct {
	rank        uint32
	pos         int32
	left, right int32 // the pair's ids when queued
	newID       int32
}

type bpeScratch struct {
	syms []symbol
	heap []mergeCandidate
}

// initSymbols splits a word into its starting symbols: one per byte for byte-level words, otherwise one per
// character. A character (for byte-level words, a byte's byte-level character) missing from the vocabulary
// becomes byte fallback tokens, or unk (fused with fuse_unk), or without unk_token is dropped, as in Hugging Face
// tokenizers' BPE::merge_word.
func (b *bpe) initSymbols(s *bpeScratch, word string, byteLevel bool) error {
	s.syms = s.syms[:0]
	add := func(id int32, size int) {
		n := int32(len(s.syms))
		s.syms = append(s.syms, symbol{id: id, prev: n - 1, next: n + 1, size: int32(size)})
	}
	unkSize := 0 // bytes of a pending (fused) unk
	known := func(id int32, size int) {
		if unkSize > 0 {
			add(int32(b.unk), unkSize)
			unkSize = 0
		}
		add(id, size)
	}
	// missing handles char (its UTF-8 bytes), size bytes of the word, absent from the vocabulary. (A symbol's
	// size only needs to be positive: 0 marks one merged into its left neighbour.)
	missing := func(char string, size int) error {
		if b.byteFallback && b.hasFallback(char) {
			for j := 0; j < len(char); j++ {
				known(b.byteFallbackIDs[char[j]], 1)
			}
			return nil
		}
		if b.unkToken != "" {
			if b.unk < 0 {
				return fmt.Errorf("character %q is not in the vocabulary and unk_token %q is not either", char, b.unkToken)
			}
			if unkSize > 0 && !b.fuseUnk {
				add(int32(b.unk), unkSize)
				unkSize = 0
			}
			unkSize += size
		}
		// Without unk_token a character missing from the vocabulary is dropped, as in Hugging Face tokenizers.
		return nil
	}
	for i := 0; i < len(word); {
		if byteLevel {
			if id := b.byteLevelIDs[word[i]]; id >= 0 {
				known(id, 1)
			} else if err := missing(string(byteLevelRunes[word[i]]), 1); err != nil {
				return err
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(word[i:])
		id := int32(-1)
		if b.runeIDs != nil && int(r) < len(b.runeIDs) && r != utf8.RuneError {
			id = b.runeIDs[r]
		} else {
			tok := word[i : i+n]
			if i > 0 && b.prefix != "" {
				tok = b.prefix + tok
			}
			if i+n == len(word) && b.suffix != "" {
				tok += b.suffix
			}
			if v, ok := b.vocab[tok]; ok {
				id = int32(v)
			}
		}
		if id >= 0 {
			known(id, n)
		} else if err := missing(word[i:i+n], n); err != nil {
			return err
		}
		i += n
	}
	if unkSize > 0 {
		add(int32(b.unk), unkSize)
	}
	if len(s.syms) > 0 {
		s.syms[len(s.syms)-1].next = -1
	}
	return nil
}

func (b *bpe) hasFallback(char string) bool {
	for i := 0; i < len(char); i++ {
		if b.byteFallbackIDs[char[i]] < 0 {
			return false
		}
	}
	return true
}

// mergeAll applies merges lowest rank first (ties: leftmost first), exactly as Hugging Face's Word::merge_all:
// by scanning for short words, with a priority queue for long ones.
func (b *bpe) mergeAll(s *bpeScratch) {
	if len(s.syms) < 2 {
		return
	}
	if len(s.syms) <= maxShortWord {
		b.mergeShort(s.syms)
		return
	}
	b.mergeLong(s)
}

// mergeShort finds the best pair by scanning the ranks kept on the symbols: no queue, and only the two pairs
// around each merge are looked up again.
func (b *bpe) mergeShort(syms []symbol) {
	pairAt := func(pos int32) {
		sym := &syms[pos]
		sym.rank = noMerge
		if sym.next < 0 {
			return
		}
		if v, ok := b.merges[uint64(sym.id)<<32|uint64(syms[sym.next].id)]; ok {
			sym.rank, sym.newID = uint32(v>>32), int32(uint32(v))
		}
	}
	for i := range syms {
		pairAt(int32(i))
	}
	for {
		best, bestRank := int32(-1), noMerge
		for i := int32(0); i >= 0; i = syms[i].next {
			if syms[i].rank < bestRank { // strictly less: the leftmost of equal ranks wins
				best, bestRank = i, syms[i].rank
			}
		}
		if best < 0 {
			return
		}
		cur := &syms[best]
		right := syms[cur.next]
		cur.id = cur.newID
		cur.size += right.size
		syms[cur.next].size = 0
		cur.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = best
		}
		if cur.prev >= 0 {
			pairAt(cur.prev)
		}
		pairAt(best)
	}
}

// mergeLong uses a priority queue of candidate pairs. A queued pair is stale once either side has changed (a
// changed side changes the merged token too).
func (b *bpe) mergeLong(s *bpeScratch) {
	syms := s.syms
	h := s.heap[:0]
	pairAt := func(pos int32) {
		next := syms[pos].next
		if next < 0 {
			return
		}
		left, right := syms[pos].id, syms[next].id
		if v, ok := b.merges[uint64(left)<<32|uint64(right)]; ok {
			h = heapPush(h, mergeCandidate{rank: uint32(v >> 32), pos: pos, left: left, right: right, newID: int32(uint32(v))})
		}
	}
	for i := range syms {
		pairAt(int32(i))
	}
	for len(h) > 0 {
		var top mergeCandidate
		top, h = heapPop(h)
		cur := &syms[top.pos]
		if cur.size == 0 || cur.next < 0 {
			continue
		}
		right := syms[cur.next]
		if cur.id != top.left || right.id != top.right {
			continue // stale: one side changed since this pair was queued
		}
		cur.id = top.newID
		cur.size += right.size
		syms[cur.next].size = 0
		cur.next = right.next
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			pairAt(cur.prev)
		}
		pairAt(top.pos)
	}
	s.heap = h[:0]
}

func lessCandidate(a, b mergeCandidate) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

func heapPush(h []mergeCandidate, c mergeCandidate) []mergeCandidate {
	h = append(h, c)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !lessCandidate(h[i], h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapPop(h []mergeCandidate) (mergeCandidate, []mergeCandidate) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && lessCandidate(h[r], h[l]) {
			m = r
		}
		if !lessCandidate(h[m], h[i]) {
			break
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
	return top, h
}

// byteLevelRunes is GPT-2's bytes_to_unicode table: printable bytes map to themselves, the others to U+0100….
var byteLevelRunes, byteLevelBytes = func() ([256]rune, map[rune]byte) {
	var runes [256]rune
	back := make(map[rune]byte, 256)
	n := rune(0)
	for i := range 256 {
		if (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF) {
			runes[i] = rune(i)
		} else {
			runes[i] = 256 + n
			n++
		}
		back[runes[i]] = byte(i)
	}
	return runes, back
}()

// byteLevelString maps every byte of s to its byte-level character.
func byteLevelString(s string) string {
	var sb strings.Builder
	sb.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		sb.WriteRune(byteLevelRunes[s[i]])
	}
	return sb.String()
}
