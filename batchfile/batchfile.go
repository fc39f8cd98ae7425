// Package batchfile is the JSONL batch format that generate --batch-file reads and the queue's workers serve:
// one prompt per line with optional per-line settings, the seed each line samples with, the engine request a line
// becomes, and the JSON object written for each line's result. Both callers share it, so that a line gives the
// same request, seed and output object in one process (generate --batch-file) as on any queue worker.
package batchfile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/tokenizer"
)

// Line is one line of a batch file: a prompt as text or ids, and optional per-sequence settings that override
// the run's (Settings).
type Line struct {
	Prompt            *string  `json:"prompt"`
	IDs               []int    `json:"ids"`
	MaxNewTokens      *int     `json:"max_new_tokens"`
	Temperature       *float64 `json:"temperature"`
	TopK              *int     `json:"top_k"`
	TopP              *float64 `json:"top_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	Seed              *uint64  `json:"seed"`

	// Number is the 1-based line number in the file.
	Number int `json:"-"`
}

// Read parses the batch file at path (Parse).
func Read(path string) ([]Line, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--batch-file: %w", err)
	}
	return Parse(b, path)
}

// Parse parses a JSONL batch file's content; name is the file's name in errors. Blank lines are skipped; any
// other line must be one JSON object with exactly one of "prompt" and "ids" and no unknown fields (ParseLine).
func Parse(b []byte, name string) ([]Line, error) {
	var lines []Line
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for n := 1; sc.Scan(); n++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		l, err := ParseLine(text, n)
		if err != nil {
			return nil, fmt.Errorf("--batch-file %s line %d: %w", name, n, err)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--batch-file %s: %w", name, err)
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("--batch-file %s: no prompts (one JSON object per line)", name)
	}
	return lines, nil
}

// ParseLine parses one line (number n, 1-based) of a batch file.
func ParseLine(text []byte, n int) (Line, error) {
	l := Line{Number: n}
	d := json.NewDecoder(bytes.NewReader(text))
	d.DisallowUnknownFields()
	if err := d.Decode(&l); err != nil {
		return l, fmt.Errorf("%w (want a JSON object like {\"prompt\": \"...\"} or {\"ids\": [1, 2]})", err)
	}
	if d.More() {
		return l, errors.New("more than one JSON value on the line")
	}
	if (l.Prompt == nil) == (l.IDs == nil) {
		return l, errors.New("give exactly one of \"prompt\" and \"ids\"")
	}
	if l.RepetitionPenalty != nil && *l.RepetitionPenalty == 0 {
		return l, errors.New("repetition_penalty must be positive (1 is off), got 0")
	}
	return l, nil
}

// SeedFor is the seed the line samples with: its own, else the run's seed plus the line's number less one, so that
// lines of the same prompt give different samples (as many requests to a server would), line 1 samples as
// generate --seed does, and every line is reproduced by the seed its output names.
func (l Line) SeedFor(run uint64) uint64 {
	if l.Seed != nil {
		return *l.Seed
	}
	return run + uint64(l.Number-1)
}

// Settings are a run's defaults for its lines: the generate flags of --batch-file, or what submit sends with
// every prompt. Sampling is the model's own settings (engine.DefaultSampling) with the flags given applied; its
// Seed is the run's seed.
type Settings struct {
	MaxNewTokens int
	Sampling     engine.Sampling
	// Chat wraps text prompts in the model's chat template as a user message.
	Chat bool
}

// Request is the engine request of the line under the run's settings s: the prompt encoded with tok (needed by
// a text prompt only; tokErr says why it is nil), the line's settings over the run's, and its seed (SeedFor). The
// request has no Monitor; errors say what is wrong with the line, without naming it.
func (l Line) Request(s Settings, tok *tokenizer.Tokenizer, tokErr error) (engine.Request, error) {
	r := engine.Request{PromptIDs: l.IDs, MaxNewTokens: s.MaxNewTokens, Sampling: s.Sampling}
	if l.Prompt != nil {
		if tok == nil {
			return r, fmt.Errorf("a text prompt needs the tokenizer: %w (give \"ids\" to run without one)", tokErr)
		}
		var err error
		if r.PromptIDs, err = EncodePrompt(tok, *l.Prompt, s.Chat); err != nil {
			return r, err
		}
	}
	if l.MaxNewTokens != nil {
		r.MaxNewTokens = *l.MaxNewTokens
	}
	p := &r.Sampling
	setIf(&p.Temperature, l.Temperature)
	setIf(&p.TopK, l.TopK)
	if l.TopP != nil {
		p.TopP = engine.ExplicitTopP(*l.TopP)
	}
	setIf(&p.RepetitionPenalty, l.RepetitionPenalty)
	p.Seed = l.SeedFor(s.Sampling.Seed)
	return r, nil
}

// setIf sets *dst to *v when v is given.
func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// EncodePrompt tokenizes a prompt, wrapped in the model's chat template as a user message with chat.
func EncodePrompt(tok *tokenizer.Tokenizer, text string, chat bool) ([]int, error) {
	addSpecial := true
	if chat {
		if !tok.HasChatTemplate() {
			return nil, errors.New("--chat: the model's tokenizer_config.json has no chat_template")
		}
		var err error
		if text, err = tok.ApplyChatTemplate([]tokenizer.Message{{Role: "user", Content: text}}, true); err != nil {
			return nil, fmt.Errorf("--chat: %w", err)
		}
		addSpecial = false // the template writes the special tokens itself
	}
	ids, err := tok.Encode(text, addSpecial)
	if err != nil {
		return nil, fmt.Errorf("tokenize prompt: %w", err)
	}
	return ids, nil
}

// Result is the output object of one line. Seed is the one the line sampled with (Line.SeedFor). Error says what
// ended a sequence whose stop_reason is "error"; Warnings are the problems the line's guards saw (each naming
// its TROUBLESHOOTING.md section) that did not stop it. ID is the queue's id of the line (submit's results; empty
// in generate --batch-file's output).
type Result struct {
	ID           string `json:"id,omitempty"`
	PromptIDs    []int  `json:"prompt_ids"`
	GeneratedIDs []int  `json:"generated_ids"`
	Text         string `json:"text"`
	StopReason   string `json:"stop_reason"`
	Seed         uint64 `json:"seed"`
	// Passes are the model's forward passes for the sequence (its prompt's counted as one) and Draft the draft
	// tokens proposed and accepted (speculative decoding), as generate --json has them.
	Passes   int                `json:"passes"`
	Draft    *engine.DraftStats `json:"draft,omitempty"`
	Error    string             `json:"error,omitempty"`
	Warnings []string           `json:"warnings,omitempty"`
}

// NewResult is the output object of req's generation: res and err as the engine returned them, with the text
// decoded by tok (empty without one). A sequence that err or its guards ended has stop_reason "error" and the
// error's text; the problems its monitor saw that are not that error are its warnings.
func NewResult(req engine.Request, res *engine.Result, err error, tok *tokenizer.Tokenizer) Result {
	out := Result{PromptIDs: res.PromptIDs, GeneratedIDs: res.GeneratedIDs, StopReason: res.StopReason, Seed: req.Sampling.Seed, Passes: res.Passes}
	if res.Draft != (engine.DraftStats{}) {
		out.Draft = &res.Draft
	}
	if out.PromptIDs == nil {
		out.PromptIDs = req.PromptIDs
	}
	if out.GeneratedIDs == nil {
		out.GeneratedIDs = []int{}
	}
	if tok != nil {
		out.Text = tok.Decode(res.GeneratedIDs, true)
	}
	if res.StopReason == engine.StopError {
		out.Error = "ended with an error"
		if err != nil {
			out.Error = err.Error()
		}
	}
	if req.Monitor != nil {
		for _, p := range req.Monitor.Problems() {
			if !strings.Contains(out.Error, p.Error()) {
				out.Warnings = append(out.Warnings, p.Error())
			}
		}
	}
	return out
}

// Refused is the output object of a line the engine refused before any work (a prompt too long for the
// context, a token id outside the vocabulary...): stop_reason "error" and the reason, so that the line still has
// exactly one result. (generate --batch-file checks every line before it starts and refuses the file instead.)
func Refused(req engine.Request, err error) Result {
	return Result{PromptIDs: req.PromptIDs, GeneratedIDs: []int{}, StopReason: engine.StopError, Seed: req.Sampling.Seed, Error: err.Error()}
}

// Watcher observes the text of each generated token of one request with the request's monitor, as generate
// does without --batch-file, and makes the line's output object.
type Watcher struct {
	req     *engine.Request
	tok     *tokenizer.Tokenizer
	dec     *tokenizer.StreamDecoder
	problem error // a strict monitor's problem with the text, which ended the sequence
}

// Watch returns req's watcher; tok decodes the tokens (nil: the monitor sees ids without text).
func Watch(req *engine.Request, tok *tokenizer.Tokenizer) *Watcher {
	return &Watcher{req: req, tok: tok}
}

// OnToken is the callback to generate req with: a problem a strict monitor sees in the text ends this sequence
// only (engine.ErrStopped).
func (w *Watcher) OnToken(t engine.Token) error {
	if w.req.Monitor == nil {
		return nil
	}
	text := ""
	if w.tok != nil {
		if w.dec == nil {
			w.dec = w.tok.NewStreamDecoder(true)
			w.dec.Prime(w.req.PromptIDs)
		}
		text = w.dec.Next(t.ID)
	}
	if err := w.req.Monitor.ObserveToken(t.ID, text); err != nil {
		w.problem = err
		return engine.ErrStopped
	}
	return nil
}

// Result is the output object of the request's generation (NewResult), stop_reason "error" with the monitor's
// problem when that ended it.
func (w *Watcher) Result(res *engine.Result, err error) Result {
	w.dec = nil
	if w.problem != nil {
		res.StopReason, err = engine.StopError, w.problem
	}
	return NewResult(*w.req, res, err, w.tok)
}

// NewMonitor is the guard monitor of one line (strict: a problem ends the line), logging with the line's number.
func NewMonitor(strict bool, line int) *guard.Monitor {
	return guard.NewMonitor(guard.MonitorOptions{Strict: strict, Logger: slog.Default().With("batch_line", line)})
}
