package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/tokenizer"
)

// batchLine is one line of a --batch-file: a prompt as text or ids, and optional per-sequence settings that
// override the flags.
type batchLine struct {
	Prompt            *string  `json:"prompt"`
	IDs               []int    `json:"ids"`
	MaxNewTokens      *int     `json:"max_new_tokens"`
	Temperature       *float64 `json:"temperature"`
	TopK              *int     `json:"top_k"`
	TopP              *float64 `json:"top_p"`
	RepetitionPenalty *float64 `json:"repetition_penalty"`
	Seed              *uint64  `json:"seed"`

	line int // 1-based line number in the file
}

// batchResultJSON is the output for one input line. Seed is the one the line sampled with: its own, else the
// run's (--seed, else a random one) plus the line's number less one (lineSeed). Error says what ended a sequence whose stop_reason is "error"; Warnings are the problems the
// line's guards saw (each naming its TROUBLESHOOTING.md section) that did not stop it.
type batchResultJSON struct {
	PromptIDs    []int  `json:"prompt_ids"`
	GeneratedIDs []int  `json:"generated_ids"`
	Text         string `json:"text"`
	StopReason   string `json:"stop_reason"`
	Seed         uint64 `json:"seed"`
	// Passes and Draft as generate --json has them.
	Passes   int                `json:"passes"`
	Draft    *engine.DraftStats `json:"draft,omitempty"`
	Error    string             `json:"error,omitempty"`
	Warnings []string           `json:"warnings,omitempty"`
}

// readBatchFile parses a JSONL file of prompts. Blank lines are skipped; any other line must be one JSON object
// with exactly one of "prompt" and "ids" and no unknown fields.
func readBatchFile(path string) ([]batchLine, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--batch-file: %w", err)
	}
	var lines []batchLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for n := 1; sc.Scan(); n++ {
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		l := batchLine{line: n}
		d := json.NewDecoder(bytes.NewReader(text))
		d.DisallowUnknownFields()
		if err := d.Decode(&l); err != nil {
			return nil, fmt.Errorf("--batch-file %s line %d: %w (want a JSON object like {\"prompt\": \"...\"} or {\"ids\": [1, 2]})", path, n, err)
		}
		if d.More() {
			return nil, fmt.Errorf("--batch-file %s line %d: more than one JSON value on the line", path, n)
		}
		if (l.Prompt == nil) == (l.IDs == nil) {
			return nil, fmt.Errorf("--batch-file %s line %d: give exactly one of \"prompt\" and \"ids\"", path, n)
		}
		if l.RepetitionPenalty != nil && *l.RepetitionPenalty == 0 {
			return nil, fmt.Errorf("--batch-file %s line %d: repetition_penalty must be positive (1 is off), got 0", path, n)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--batch-file %s: %w", path, err)
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("--batch-file %s: no prompts (one JSON object per line)", path)
	}
	return lines, nil
}

// lineSeed is the seed line l samples with: its own, else the run's seed plus the line's number less one, so that
// lines of the same prompt give different samples (as many requests to a server would), line 1 samples as
// generate --seed does, and every line is reproduced by the seed its output names.
func lineSeed(run uint64, l batchLine) uint64 {
	if l.Seed != nil {
		return *l.Seed
	}
	return run + uint64(l.line-1)
}

// runBatch is generate --batch-file: every line becomes a request, and the requests go through the engine's
// batch loop, --batch-size at a time: a line joins as soon as another ends (continuous batching), and one JSON
// object per line is written to stdout in input order, each as soon as it and the lines before it are done.
// Aggregate timings go to stderr. Each line has its own guard monitor (strict with --strict): a line whose
// sequence a problem ended (NaN logits always) says so in its "error" and the others go on; the exit status is
// then 1. After Ctrl-C, the lines printed are those up to the first that had generated nothing.
func runBatch(ctx context.Context, o generateOptions, stdout, stderr io.Writer) error {
	lines, err := readBatchFile(o.batchFile)
	if err != nil {
		return err
	}
	o.eng.MaxBatch = o.batchSize
	e, err := openEngine(ctx, o.model, o.eng, "")
	if err != nil {
		return err
	}
	defer e.Close()
	tok, tokErr := e.Tokenizer() // nil without tokenizer files: then only "ids" lines work

	reqs := make([]engine.Request, len(lines))
	base := samplingFor(o, e)
	for i, l := range lines {
		where := fmt.Sprintf("--batch-file %s line %d", o.batchFile, l.line)
		r := engine.Request{PromptIDs: l.IDs, MaxNewTokens: o.maxNew, Sampling: base}
		if l.Prompt != nil {
			if tok == nil {
				return fmt.Errorf("%s: a text prompt needs the tokenizer: %w (give \"ids\" to run without one)", where, tokErr)
			}
			if r.PromptIDs, err = encodePrompt(tok, *l.Prompt, o.chat); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
		}
		if l.MaxNewTokens != nil {
			r.MaxNewTokens = *l.MaxNewTokens
		}
		s := &r.Sampling
		setIf(&s.Temperature, l.Temperature)
		setIf(&s.TopK, l.TopK)
		if l.TopP != nil {
			s.TopP = engine.ExplicitTopP(*l.TopP)
		}
		setIf(&s.RepetitionPenalty, l.RepetitionPenalty)
		s.Seed = lineSeed(base.Seed, l)
		if err := e.CheckRequest(r); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		r.Monitor = guard.NewMonitor(guard.MonitorOptions{Strict: o.strict, Logger: slog.Default().With("batch_line", l.line)})
		reqs[i] = r
	}

	// The guards see each line's token text as it comes, as in generate without --batch-file (on the engine's
	// goroutine; onResult reads stopped[i] after line i has ended).
	decoders := make([]*tokenizer.StreamDecoder, len(reqs))
	stopped := make([]error, len(reqs)) // a strict guard's problem with a line's text
	onToken := func(i int, t engine.Token) error {
		text := ""
		if tok != nil {
			if decoders[i] == nil {
				decoders[i] = tok.NewStreamDecoder(true)
				decoders[i].Prime(reqs[i].PromptIDs)
			}
			text = decoders[i].Next(t.ID)
		}
		if err := reqs[i].Monitor.ObserveToken(t.ID, text); err != nil {
			stopped[i] = err
			return engine.ErrStopped // ends this line only
		}
		return nil
	}
	enc := json.NewEncoder(stdout)
	start, passes := time.Now(), e.Load().Steps
	var generated, printed int
	var failed []int // lines a problem ended
	var ttfts []float64
	err = e.GenerateEach(ctx, reqs, onToken, func(i int, res *engine.Result, err error) error {
		decoders[i] = nil
		if ctx.Err() != nil && len(res.GeneratedIDs) == 0 {
			return ctx.Err() // interrupted: the lines printed stay a prefix of the file
		}
		generated += len(res.GeneratedIDs)
		if res.Timings.TTFT > 0 {
			ttfts = append(ttfts, res.Timings.TTFT.Seconds())
		}
		if stopped[i] != nil {
			res.StopReason, err = engine.StopError, stopped[i]
		}
		out := batchResultJSON{PromptIDs: res.PromptIDs, GeneratedIDs: res.GeneratedIDs, StopReason: res.StopReason, Seed: reqs[i].Sampling.Seed, Passes: res.Passes}
		if res.Draft != (engine.DraftStats{}) {
			out.Draft = &res.Draft
		}
		if tok != nil {
			out.Text = tok.Decode(res.GeneratedIDs, true)
		}
		if res.StopReason == engine.StopError {
			failed = append(failed, lines[i].line)
			out.Error = "ended with an error"
			if err != nil {
				out.Error = err.Error()
			}
		}
		for _, p := range reqs[i].Monitor.Problems() {
			if !strings.Contains(out.Error, p.Error()) {
				out.Warnings = append(out.Warnings, p.Error())
			}
		}
		printed++
		return enc.Encode(out)
	})
	if ctx.Err() != nil {
		return fmt.Errorf("--batch-file %s: interrupted; the first %d of %d lines are printed: %w", o.batchFile, printed, len(reqs), ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("--batch-file %s: %w", o.batchFile, err)
	}
	d := time.Since(start)
	fmt.Fprintf(stderr, "%d sequences, %d tokens generated in %.2f s: %.1f tokens/s aggregate (--batch-size %d, %d forward passes); first token after %s s (median, max)\n",
		len(reqs), generated, d.Seconds(), float64(generated)/d.Seconds(), o.batchSize, e.Load().Steps-passes, medianMax(ttfts))
	if len(failed) > 0 {
		return fmt.Errorf("--batch-file %s: %d of %d lines ended with an error (their \"error\" says why), the first at line %d",
			o.batchFile, len(failed), len(reqs), failed[0])
	}
	return nil
}

// medianMax formats the median and the largest of xs ("-" when empty).
func medianMax(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	slices.Sort(xs)
	return fmt.Sprintf("%.2f, %.2f", xs[len(xs)/2], xs[len(xs)-1])
}

// setIf sets *dst to *v when v is given.
func setIf[T any](dst *T, v *T) {
	if v != nil {
		*dst = *v
	}
}

// encodePrompt tokenizes a prompt, wrapped in the model's chat template as a user message with chat.
func encodePrompt(tok *tokenizer.Tokenizer, text string, chat bool) ([]int, error) {
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
