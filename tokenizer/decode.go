package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/layerstream/layerstream/internal/utf8x"
)

// decoder turns tokens back into text: the decoder chain of tokenizer.json, written so that it can run on a stream
// of tokens in chunks and give exactly what one run over all of them gives (see run).
type decoder struct {
	steps []decodeStep
}

type stepKind int

const (
	stepReplace stepKind = iota
	stepByteFallback
	stepFuse
	stepStrip
	stepMetaspace
	stepByteLevel
	stepJoinSpaces // no decoder in tokenizer.json: tokens joined with spaces
)

type decodeStep struct {
	kind stepKind
	// Replace
	pattern matcher
	content string
	// Strip
	char        string
	start, stop int
	// Metaspace
	replacement string
	dropFirst   bool // prepend_scheme is not "never": the first token loses its replacement characters
}

type decoderJSON struct {
	Type           string            `json:"type"`
	Decoders       []json.RawMessage `json:"decoders"`
	Pattern        patternJSON       `json:"pattern"`
	Content        string            `json:"content"`
	Start          int               `json:"start"`
	Stop           int               `json:"stop"`
	Replacement    string            `json:"replacement"`
	PrependScheme  string            `json:"prepend_scheme"`
	AddPrefixSpace *bool             `json:"add_prefix_space"`
}

func parseDecoder(raw json.RawMessage) (*decoder, error) {
	if isNull(raw) {
		return &decoder{steps: []decodeStep{{kind: stepJoinSpaces}}}, nil
	}
	steps, err := parseDecodeSteps(raw)
	if err != nil {
		return nil, err
	}
	return &decoder{steps: steps}, nil
}

func parseDecodeSteps(raw json.RawMessage) ([]decodeStep, error) {
	typ, err := typeOf(raw)
	if err != nil {
		return nil, err
	}
	var j decoderJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("%s: %w", typ, err)
	}
	switch typ {
	case "Sequence":
		var steps []decodeStep
		for i, r := range j.Decoders {
			s, err := parseDecodeSteps(r)
			if err != nil {
				return nil, fmt.Errorf("Sequence[%d]: %w", i, err)
			}
			steps = append(steps, s...)
		}
		return steps, nil
	case "Replace":
		m, err := parsePattern(j.Pattern)
		if err != nil {
			return nil, fmt.Errorf("Replace: %w", err)
		}
		return []decodeStep{{kind: stepReplace, pattern: m, content: j.Content}}, nil
	case "ByteFallback":
		return []decodeStep{{kind: stepByteFallback}}, nil
	case "Fuse":
		return []decodeStep{{kind: stepFuse}}, nil
	case "Strip":
		if utf8.RuneCountInString(j.Content) != 1 || j.Start < 0 || j.Stop < 0 {
			return nil, fmt.Errorf("Strip: want one content character and start, stop ≥ 0; got %q, %d, %d", j.Content, j.Start, j.Stop)
		}
		return []decodeStep{{kind: stepStrip, char: j.Content, start: j.Start, stop: j.Stop}}, nil
	case "Metaspace":
		rep := j.Replacement
		if rep == "" {
			rep = metaspace
		}
		drop := j.PrependScheme != "never"
		if j.PrependScheme == "" && j.AddPrefixSpace != nil {
			drop = *j.AddPrefixSpace
		}
		return []decodeStep{{kind: stepMetaspace, replacement: rep, dropFirst: drop}}, nil
	case "ByteLevel":
		return []decodeStep{{kind: stepByteLevel}}, nil
	}
	return nil, unsupported("decoder", typ, "Sequence", "Replace", "ByteFallback", "Fuse", "Strip", "Metaspace", "ByteLevel")
}

// decodeState carries what a chunked run needs from the chunks before it.
type decodeState struct {
	seen      int      // tokens already decoded
	stripLeft []int    // per step: leading characters a fused Strip may still remove
	held      []string // per step: trailing characters a fused Strip holds back until it knows they are not last
}

func (d *decoder) newState() decodeState {
	st := decodeState{stripLeft: make([]int, len(d.steps)), held: make([]string, len(d.steps))}
	for i, s := range d.steps {
		st.stripLeft[i] = s.start
	}
	return st
}

// run decodes one chunk of a token stream. st holds what earlier chunks left; final says no chunk follows.
// Decoding all tokens in one final chunk is Hugging Face's decode. A non-final chunk that ends inside a character
// (byte-fallback bytes, or byte-level bytes of an unfinished UTF-8 sequence) is refused (ok false, st unchanged):
// the caller retries with more tokens. Steps that see the fused text (after Fuse or ByteLevel) keep their
// position-dependent work in st, so concatenating the chunks' texts gives the one-chunk result.
//
// scratch, when not nil, is reused for the working copies (a StreamDecoder passes its own).
func (d *decoder) run(in []string, st *decodeState, final bool, scratch *decodeScratch) (string, bool) {
	if scratch == nil {
		scratch = &decodeScratch{}
	}
	tokens := append(scratch.tokens[:0], in...)
	defer func() { scratch.tokens = tokens[:0] }()
	next := &scratch.next
	next.seen = st.seen
	next.stripLeft = append(next.stripLeft[:0], st.stripLeft...)
	next.held = append(next.held[:0], st.held...)
	fused := false
	for k, step := range d.steps {
		switch step.kind {
		case stepReplace:
			for i := range tokens {
				tokens[i] = replaceAll(step.pattern, tokens[i], step.content)
			}
		case stepByteFallback:
			if !final && len(tokens) > 0 {
				if _, ok := fallbackByte(tokens[len(tokens)-1]); ok {
					return "", false
				}
			}
			tokens = fuseFallbackBytes(tokens)
		case stepFuse:
			tokens = fuse(tokens, strings.Join(tokens, ""))
			fused = true
		case stepStrip:
			if !fused {
				for i := range tokens {
					tokens[i] = stripToken(tokens[i], step.char, step.start, step.stop)
				}
				continue
			}
			tokens = fuse(tokens, next.stripFused(k, step, strings.Join(tokens, ""), final))
		case stepMetaspace:
			for i := range tokens {
				first := i == 0 && (fused || next.seen == 0)
				if first && step.dropFirst {
					tokens[i] = strings.ReplaceAll(tokens[i], step.replacement, "")
				} else {
					tokens[i] = strings.ReplaceAll(tokens[i], step.replacement, " ")
				}
			}
		case stepByteLevel:
			b := byteLevelDecode(tokens)
			if !final && incompleteUTF8(b) {
				return "", false
			}
			tokens = fuse(tokens, lossyUTF8(b))
			fused = true
		case stepJoinSpaces:
			s := strings.Join(tokens, " ")
			if next.seen > 0 && len(in) > 0 {
				s = " " + s
			}
			tokens = fuse(tokens, s)
			fused = true
		}
	}
	next.seen += len(in)
	*st, *next = *next, *st // the old state's slices become the next run's scratch
	return strings.Join(tokens, ""), true
}

// decodeScratch holds the buffers of decoder.run between calls.
type decodeScratch struct {
	tokens []string
	next   decodeState
}

// fuse replaces tokens with the one token s, reusing the slice.
func fuse(tokens []string, s string) []string {
	return append(tokens[:0], s)
}

// stripFused applies Strip to the fused text, of which s is the next chunk.
func (st *decodeState) stripFused(k int, step decodeStep, s string, final bool) string {
	for st.stripLeft[k] > 0 && strings.HasPrefix(s, step.char) {
		s = s[len(step.char):]
		st.stripLeft[k]--
	}
	if s != "" {
		st.stripLeft[k] = 0
	}
	if step.stop == 0 {
		return s
	}
	s = st.held[k] + s
	body := strings.TrimRight(s, step.char)
	if !final {
		st.held[k] = s[len(body):]
		return body
	}
	st.held[k] = ""
	for n := 0; n < step.stop && strings.HasSuffix(s, step.char); n++ {
		s = s[:len(s)-len(step.char)]
	}
	return s
}

// stripToken removes up to start leading and stop trailing copies of char from one token.
func stripToken(s, char string, start, stop int) string {
	for n := 0; n < start && strings.HasPrefix(s, char); n++ {
		s = s[len(char):]
	}
	for n := 0; n < stop && strings.HasSuffix(s, char); n++ {
		s = s[:len(s)-len(char)]
	}
	return s
}

// fallbackByte reads a byte-fallback token "<0xXX>".
func fallbackByte(tok string) (byte, bool) {
	if len(tok) != 6 || !strings.HasPrefix(tok, "<0x") || tok[5] != '>' {
		return 0, false
	}
	var b byte
	for _, c := range tok[3:5] {
		switch {
		case c >= '0' && c <= '9':
			b = b<<4 | byte(c-'0')
		case c >= 'A' && c <= 'F':
			b = b<<4 | byte(c-'A'+10)
		case c >= 'a' && c <= 'f':
			b = b<<4 | byte(c-'a'+10)
		default:
			return 0, false
		}
	}
	return b, true
}

// fuseFallbackBytes turns each run of "<0xXX>" tokens into its text; a run that is not valid UTF-8 becomes one
// U+FFFD per byte, as in Hugging Face's ByteFallback decoder.
func fuseFallbackBytes(tokens []string) []string {
	out := tokens[:0]
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\uFFFD")
			}
		}
		run = run[:0]
	}
	for _, tok := range tokens {
		if b, ok := fallbackByte(tok); ok {
			run = append(run, b)
			continue
		}
		flush()
		out = append(out, tok)
	}
	flush()
	return out
}

// byteLevelDecode maps byte-level characters back to bytes; a token with other characters (an added token such
// as "<|im_end|>" written with them) contributes its own bytes.
func byteLevelDecode(tokens []string) []byte {
	var b []byte
	for _, tok := range tokens {
		n := len(b)
		ok := true
		for _, r := range tok {
			c, found := byteLevelBytes[r]
			if !found {
				ok = false
				break
			}
			b = append(b, c)
		}
		if !ok {
			b = append(b[:n], tok...)
		}
	}
	return b
}

// validPrefix returns how many bytes of b (b[0] a lead byte) form a valid start of its sequence, and the
// sequence's full length (0 when b[0] cannot start one).
func validPrefix(b []byte) (int, int) {
	lo, hi, n := utf8x.SecondByte(b[0])
	if n == 0 {
		return 0, 0
	}
	k := 1
	for k < n && k < len(b) {
		c := b[k]
		if k == 1 && (c < lo || c > hi) || k > 1 && (c < 0x80 || c > 0xBF) {
			break
		}
		k++
	}
	return k, n
}

// incompleteUTF8 reports whether b ends with the unfinished start of a UTF-8 sequence.
func incompleteUTF8(b []byte) bool {
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			return false
		}
		if c >= 0xC0 {
			got, n := validPrefix(b[len(b)-k:])
			return n > k && got == k
		}
	}
	return false
}

// lossyUTF8 converts b to a string, replacing each maximal invalid subpart with U+FFFD (Rust's
// String::from_utf8_lossy, which Hugging Face's ByteLevel decoder uses).
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || n > 1 {
			sb.Write(b[i : i+n])
			i += n
			continue
		}
		sb.WriteString("\uFFFD")
		got, _ := validPrefix(b[i:])
		i += max(got, 1)
	}
	return sb.String()
}

// token returns the text of id for decoding, or false when it is skipped (unknown id, or special when skipSpecial).
func (t *Tokenizer) token(id int, skipSpecial bool) (string, bool) {
	if a, ok := t.addedByID[id]; ok {
		return a.content, !(skipSpecial && a.special)
	}
	if id >= 0 && id < len(t.model.tokens) && t.model.tokens[id] != "" {
		return t.model.tokens[id], true
	}
	return "", false
}

// Decode turns ids into text. Ids outside the vocabulary are skipped, as are special tokens when
// skipSpecialTokens is set.
func (t *Tokenizer) Decode(ids []int, skipSpecialTokens bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		if tok, ok := t.token(id, skipSpecialTokens); ok {
			tokens = append(tokens, tok)
		}
	}
	st := t.decoder.newState()
	text, _ := t.decoder.run(tokens, &st, true, nil)
	return text
}

// StreamDecoder decodes generated ids one at a time for streaming output. The texts returned by Next and Flush
// concatenate to exactly Decode of all the ids, and never split a UTF-8 character: bytes spelled out by
// byte-level tokens are held until their character is complete, and a run of byte-fallback tokens ("<0xE2>"…)
// until a token that is not a byte ends it (Hugging Face turns the whole run into U+FFFD when any of it is
// invalid, so only a finished run is final).
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []string
	state       decodeState
	scratch     decodeScratch
}

// NewStreamDecoder starts a stream; skipSpecial leaves special tokens out of the text.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) *StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial, state: t.decoder.newState()}
}

// Prime feeds ids whose text is already shown, such as the prompt before generated ids, so that what Next
// returns continues that text: decoders that strip a leading space at the start of the text would otherwise
// strip it from the first generated token.
func (d *StreamDecoder) Prime(ids []int) {
	for _, id := range ids {
		d.Next(id)
	}
}

// Next adds one id and returns the text that became printable ("" while a character is incomplete).
func (d *StreamDecoder) Next(id int) string {
	tok, ok := d.t.token(id, d.skipSpecial)
	if !ok {
		return ""
	}
	d.pending = append(d.pending, tok)
	text, ok := d.t.decoder.run(d.pending, &d.state, false, &d.scratch)
	if !ok {
		return ""
	}
	d.pending = d.pending[:0]
	return text
}

// Flush ends the stream and returns the text still held back (incomplete characters come out as U+FFFD, as in
// Decode). The decoder can then start a new stream.
func (d *StreamDecoder) Flush() string {
	text, _ := d.t.decoder.run(d.pending, &d.state, true, &d.scratch)
	d.pending = d.pending[:0]
	d.state = d.t.decoder.newState()
	return text
}

// TokenBytes returns the bytes token id adds to a text it does not begin (decoded after other tokens), or false
// for added tokens (special or not: their text is markup, not content) and ids outside the vocabulary. A
// byte-level or byte-fallback token that is part of a UTF-8 character gives that part.
func (t *Tokenizer) TokenBytes(id int) ([]byte, bool) {
	if _, ok := t.addedByID[id]; ok {
		return nil, false
	}
	if id < 0 || id >= len(t.model.tokens) || t.model.tokens[id] == "" {
		return nil, false
	}
	tok := t.model.tokens[id]
	fused := false
	for _, step := range t.decoder.steps {
		switch step.kind {
		case stepReplace:
			tok = replaceAll(step.pattern, tok, step.content)
		case stepByteFallback:
			if b, ok := fallbackByte(tok); ok {
				tok = string([]byte{b})
			}
		case stepFuse:
			fused = true
		case stepStrip: // after Fuse, it strips the text's ends, which a token in the middle is not
			if !fused {
				tok = stripToken(tok, step.char, step.start, step.stop)
			}
		case stepMetaspace:
			tok = strings.ReplaceAll(tok, step.replacement, " ")
		case stepByteLevel:
			tok, fused = string(byteLevelDecode([]string{tok})), true
		case stepJoinSpaces:
			tok = " " + tok
		}
	}
	return []byte(tok), true
}
