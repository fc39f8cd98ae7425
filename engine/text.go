package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/tokenizer"
)

// TextRequest is a generation given and returned as text (GenerateText): the prompt is tokenized (a chat
// rendered with the model's chat template first), generated ids are decoded, and stop strings are matched on
// the decoded text.
type TextRequest struct {
	// Prompt is plain text, encoded with the tokenizer's special tokens (BOS...). Give Prompt, Messages or
	// PromptIDs.
	Prompt string
	// Messages is a chat, rendered with the model's chat template and its generation prompt.
	Messages []tokenizer.Message
	// PromptIDs is a prompt already tokenized (EncodePrompt): used as it is when set.
	PromptIDs []int
	// MaxNewTokens bounds the generated tokens; 0 generates until the context is full.
	MaxNewTokens int
	Sampling     Sampling
	// Stop ends generation as soon as the text contains one of these strings; the text ends before it.
	Stop []string
	// StopIDs, Logprobs, TopLogprobs and Session are as in Request.
	StopIDs     []int
	Logprobs    bool
	TopLogprobs int
	Session     *Session
	// Monitor checks the request's residual stream and logits as Request.Monitor does, and the text of every
	// generated token too (guard.Monitor.ObserveToken: degenerate repetition, punctuation); in strict mode a
	// problem ends the request with its *guard.Problem.
	Monitor *guard.Monitor
	// Constraint restricts the generated tokens (Request.Constraint).
	Constraint Constraint
}

// TextChunk is text that became available during GenerateText.
type TextChunk struct {
	// Text is the new text (possibly empty): the chunks concatenate to TextResult.Text. Text that may be the
	// start of a stop string, or an incomplete UTF-8 character, is held back until it is known not to be.
	Text string
	// Token is the token generated at this step (even one whose text a stop string cuts off); nil for the last
	// chunk, which carries only what was held back until the end.
	Token *TextToken
	// Tokens are the generated tokens whose text this chunk's Text completes (a token that is part of a UTF-8
	// character comes with the one completing it; a token without text, the stop token, with the last chunk):
	// over the chunks, the tokens of TextResult.Text. A token whose text a stop string cut off, wholly or in
	// part, never comes. Report logprobs from these.
	Tokens []*TextToken
}

// TextToken is a generated token with its text and, when asked for, log-probabilities (Token).
type TextToken struct {
	ID          int
	Text        string // the text the token adds (special tokens included; "" for part of a UTF-8 character)
	Logprob     float64
	TopLogprobs []TextLogprob
}

// TextLogprob is a candidate token of a step with its text and log-probability.
type TextLogprob struct {
	ID      int
	Text    string
	Logprob float64
}

// TextResult is a finished text generation. Result.StopReason is StopString when a stop string ended it.
type TextResult struct {
	Result
	Text string
	// Stop is the stop string that ended generation (StopReason StopString).
	Stop string
}

// StopString: one of TextRequest.Stop appeared in the text.
const StopString = "stop_string"

// RequestError is a request the engine refuses before any work (empty prompt, context overflow, bad sampling
// parameters, a chat the template rejects...): the caller's mistake, not the engine's.
type RequestError struct {
	Err error
	// Field names what is at fault, one of the Field constants ("" when none is): a server names its own
	// request field after it.
	Field string
}

// The fields a RequestError names.
const (
	FieldPrompt       = "prompt"         // the prompt: its ids, its text or messages, its length
	FieldMaxNewTokens = "max_new_tokens" // MaxNewTokens, or the prompt and it together past the context
	FieldTopLogprobs  = "top_logprobs"
	FieldSampling     = "sampling"
	FieldLogitBias    = "logit_bias" // Sampling.LogitBias's token ids
	FieldStop         = "stop"
	FieldDraftTokens  = "draft_tokens"
)

// refuse is a RequestError naming field.
func refuse(field string, err error) *RequestError { return &RequestError{Err: err, Field: field} }

func (e *RequestError) Error() string { return e.Err.Error() }
func (e *RequestError) Unwrap() error { return e.Err }

// Tokenizer returns the model's tokenizer (tokenizer.json in the model folder), loaded on first use.
func (e *Engine) Tokenizer() (*tokenizer.Tokenizer, error) {
	e.tokOnce.Do(func() {
		// The shard folder's tokenizer files are copies (or, from a GGUF file, made from its metadata): errors
		// name where they came from, where a broken one is to be fixed, and the copy read.
		name := e.Dir()
		switch path, generated := e.store.set.Source().Origin("tokenizer.json"); {
		case generated:
			name = fmt.Sprintf("%s (made from its metadata, written to %s)", path, e.Dir())
		case path != "":
			name = fmt.Sprintf("%s (copied to %s)", filepath.Dir(path), e.Dir())
		}
		e.tok, e.tokErr = tokenizer.LoadNamed(e.Dir(), name)
		if e.tokErr != nil {
			e.tokErr = fmt.Errorf("engine: %w", e.tokErr)
		}
	})
	return e.tok, e.tokErr
}

// EncodePrompt returns the token ids of a text prompt (with the tokenizer's special tokens) or of a chat
// (rendered with the model's chat template, generation prompt added). Errors are *RequestError, except a
// missing tokenizer.
func (e *Engine) EncodePrompt(prompt string, messages []tokenizer.Message) ([]int, error) {
	return e.encode(prompt, messages, nil)
}

// EncodeChat is EncodePrompt for a chat, with more variables for the chat template: "tools" (the tools offered,
// as transformers passes them: a list of {"type": "function", "function": {"name", "description",
// "parameters"}}), Qwen3's "enable_thinking"...
func (e *Engine) EncodeChat(messages []tokenizer.Message, vars map[string]any) ([]int, error) {
	if messages == nil {
		messages = []tokenizer.Message{}
	}
	return e.encode("", messages, vars)
}

func (e *Engine) encode(prompt string, messages []tokenizer.Message, vars map[string]any) ([]int, error) {
	tok, err := e.Tokenizer()
	if err != nil {
		return nil, err
	}
	if (prompt == "") == (messages == nil) {
		return nil, refuse(FieldPrompt, errors.New("give a prompt or messages, not both or neither"))
	}
	addSpecial := true
	if messages != nil {
		if !tok.HasChatTemplate() {
			return nil, refuse(FieldPrompt, errors.New("the model has no chat template (tokenizer_config.json chat_template or chat_template.jinja): give a plain prompt"))
		}
		if prompt, err = tok.ApplyChatTemplateWith(messages, true, vars); err != nil {
			return nil, refuse(FieldPrompt, err)
		}
		addSpecial = false // the template writes the special tokens itself
	}
	ids, err := tok.Encode(prompt, addSpecial)
	if err != nil {
		return nil, refuse(FieldPrompt, fmt.Errorf("tokenize prompt: %w", err))
	}
	return ids, nil
}

// GenerateText is Generate in text: it encodes the prompt (EncodePrompt), generates, and calls onText (which
// may be nil) with the text of every step as it becomes printable, then once more (Token nil) with the text
// held back until the end. Returning ErrStopped from onText ends generation (StopReason "stopped"); another
// error ends it with that error. Errors and cancellation return the result so far, as Generate does.
func (e *Engine) GenerateText(ctx context.Context, req TextRequest, onText func(TextChunk) error) (*TextResult, error) {
	tok, err := e.Tokenizer()
	if err != nil {
		return nil, err
	}
	ids := req.PromptIDs
	if ids == nil {
		if ids, err = e.EncodePrompt(req.Prompt, req.Messages); err != nil {
			return nil, err
		}
	} else if len(ids) == 0 {
		return nil, refuse(FieldPrompt, errors.New("engine: empty prompt"))
	}
	for _, s := range req.Stop {
		if s == "" {
			return nil, refuse(FieldStop, errors.New("a stop string is empty"))
		}
	}
	r := Request{PromptIDs: ids, MaxNewTokens: req.MaxNewTokens, Sampling: req.Sampling, StopIDs: req.StopIDs,
		Logprobs: req.Logprobs, TopLogprobs: req.TopLogprobs, Session: req.Session, Monitor: req.Monitor, Constraint: req.Constraint}
	dec := tok.NewStreamDecoder(true)
	dec.Prime(ids) // the first generated word keeps its leading space
	m := stopMatcher{stops: req.Stop}
	var held heldTokens
	stop := ""
	prev := ids[len(ids)-1]
	res, err := e.Generate(ctx, r, func(t Token) error {
		piece := dec.Next(t.ID)
		at := len(m.text)
		text, hit := m.add(piece)
		if onText != nil {
			tt := &TextToken{ID: t.ID, Text: tokenText(tok, prev, t.ID), Logprob: t.Logprob}
			for _, c := range t.TopLogprobs {
				tt.TopLogprobs = append(tt.TopLogprobs, TextLogprob{ID: c.ID, Text: tokenText(tok, prev, c.ID), Logprob: c.Logprob})
			}
			prev = t.ID
			held.add(tt, at, piece)
			if err := onText(TextChunk{Text: text, Token: tt, Tokens: held.release(m.emitted)}); err != nil {
				return err
			}
		}
		if hit {
			stop = m.stop
			return ErrStopped
		}
		if req.Monitor != nil {
			return req.Monitor.ObserveToken(t.ID, piece)
		}
		return nil
	})
	if res == nil {
		return nil, err
	}
	out := &TextResult{Result: *res}
	if stop == "" {
		tail, hit := m.add(dec.Flush())
		rest := held.release(m.emitted)
		if hit {
			stop = m.stop
		} else {
			tail += m.flush()
			rest = append(rest, held.release(-1)...) // tokens without text (the stop token) too
		}
		if onText != nil && (tail != "" || len(rest) > 0) && err == nil {
			if cerr := onText(TextChunk{Text: tail, Tokens: rest}); cerr != nil && !errors.Is(cerr, ErrStopped) {
				err = cerr
			}
		}
	}
	if stop != "" {
		out.StopReason, out.Stop = StopString, stop
	}
	out.Text = m.text[:m.emitted]
	return out, err
}

// tokenText is the text id adds after prev (special tokens included): decoded after prev rather than alone, so
// that decoders that strip the text's leading space keep the space a word token starts with.
func tokenText(tok *tokenizer.Tokenizer, prev, id int) string {
	before := tok.Decode([]int{prev}, false)
	if both := tok.Decode([]int{prev, id}, false); strings.HasPrefix(both, before) {
		return both[len(before):]
	}
	return tok.Decode([]int{id}, false)
}

// heldTokens are the generated tokens whose text is not all given out yet (held back as the possible start of a
// stop string), each with the position in the text where its own ends: a token whose piece is empty (part of a
// UTF-8 character) ends where the next piece with text does.
type heldTokens struct {
	tokens []*TextToken
	end    []int // -1: not known yet
}

// add holds t, whose piece of text was appended at position at.
func (h *heldTokens) add(t *TextToken, at int, piece string) {
	end := -1
	if piece != "" {
		end = at + len(piece)
		for i := len(h.end) - 1; i >= 0 && h.end[i] < 0; i-- {
			h.end[i] = end
		}
	}
	h.tokens = append(h.tokens, t)
	h.end = append(h.end, end)
}

// release returns the tokens whose text ends at or before the position emitted (-1: all of them), and forgets
// them.
func (h *heldTokens) release(emitted int) []*TextToken {
	n := 0
	for n < len(h.end) && (emitted < 0 || h.end[n] >= 0 && h.end[n] <= emitted) {
		n++
	}
	out := h.tokens[:n:n]
	h.tokens, h.end = h.tokens[n:], h.end[n:]
	return out
}

// stopMatcher finds stop strings in text arriving piece by piece, holding back the end of the text while it
// may be the start of one.
type stopMatcher struct {
	stops   []string
	text    string // all the text so far
	emitted int    // bytes of text given out
	stop    string // the stop string found
}

// add appends piece and returns the text that can be given out; hit reports a stop string completed by the
// piece, the text then ending before it (before the one that starts first, when the piece completes several).
func (m *stopMatcher) add(piece string) (out string, hit bool) {
	from := len(m.text)
	m.text += piece
	if len(m.stops) == 0 {
		return m.flush(), false
	}
	end := -1
	for _, s := range m.stops {
		start := max(0, from-len(s)+1)
		if i := strings.Index(m.text[start:], s); i >= 0 && (end < 0 || start+i < end) {
			end, m.stop = start+i, s
		}
	}
	if end >= 0 {
		m.text = m.text[:max(end, m.emitted)] // (the text given out never holds the start of a stop string)
		return m.flush(), true
	}
	hold := 0
	for _, s := range m.stops {
		for k := min(len(s)-1, len(m.text)); k > hold; k-- {
			if strings.HasSuffix(m.text, s[:k]) {
				hold = k
				break
			}
		}
	}
	safe := max(m.emitted, len(m.text)-hold)
	out, m.emitted = m.text[m.emitted:safe], safe
	return out, false
}

// flush gives out the text held back.
func (m *stopMatcher) flush() string {
	out := m.text[m.emitted:]
	m.emitted = len(m.text)
	return out
}
