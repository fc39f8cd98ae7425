package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/grammar"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/tokenizer"
)

func init() {
	register(command{
		name:    "generate",
		summary: "generate text, streaming the model through memory one layer at a time",
		usage:   "--model MODEL --prompt TEXT | --prompt-file FILE | --batch-file PROMPTS.jsonl",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			var o generateOptions
			fs.StringVar(&o.model, "model", "", modelFlagHelp)
			fs.StringVar(&o.prompt, "prompt", "", "prompt text")
			fs.StringVar(&o.promptFile, "prompt-file", "", "read the prompt from this `file` (- for standard input; one final newline is dropped)")
			fs.StringVar(&o.ids, "ids", "", "prompt as comma-separated token ids instead of --prompt")
			fs.BoolVar(&o.chat, "chat", false, "wrap the prompt in the model's chat template as a user message and print only the reply")
			fs.StringVar(&o.system, "system", "", "system message of the chat (implies --chat)")
			fs.IntVar(&o.maxNew, "max-new-tokens", 256, "most tokens to generate (0: until the context is full)")
			addSamplingFlags(fs, &o)
			fs.Var(&o.stop, "stop", "stop when the text contains this `string`, which is left out (repeatable)")
			fs.BoolVar(&o.logprobs, "logprobs", false, "with --json: the log-probability of every generated token")
			fs.IntVar(&o.topLogprobs, "top-logprobs", 0, "with --json: the `n` most likely tokens of every step with their log-probabilities (at most 20)")
			fs.StringVar(&o.jsonSchema, "json-schema", "", "constrain the output to a JSON value of the JSON Schema in this `file` (a subset: see docs/serving.md#structured-output)")
			fs.StringVar(&o.grammar, "grammar", "", "constrain the output to this grammar: json (any JSON value)")
			fs.BoolVar(&o.json, "json", false, "print one JSON object (ids, text, stop reason, seed, timings) instead of streaming text")
			fs.StringVar(&o.batchFile, "batch-file", "", "throughput mode: generate every line of this JSONL file ({\"prompt\": TEXT} or {\"ids\": [...]}, optional \"max_new_tokens\", \"temperature\", \"top_k\", \"top_p\", \"repetition_penalty\", \"seed\"), several sequences per layer load; prints one JSON object per line, in input order")
			fs.IntVar(&o.batchSize, "batch-size", 16, "with --batch-file: most sequences generated together (a line joins as soon as another ends)")
			fs.BoolVar(&o.strict, "strict", false, "stop with an error when a guard detects broken output (activations out of range, NaN, all-zero logits, degenerate repetition); with --batch-file, per line")
			addEngineFlags(fs, &o.eng)
			printPlan := fs.String("print-placement", "", "print the plan placing the model over these `devices` (NAME=SIZE,...; see 'layerstream placement') and exit")
			prof := addProfileFlags(fs)
			return func(ctx context.Context, args []string) error {
				if len(args) != 0 {
					return usageErrorf("unexpected arguments %q", args)
				}
				if o.model == "" {
					return usageErrorf("--model is required")
				}
				if *printPlan != "" {
					return printPlacement(os.Stdout, o.model, *printPlan, o.eng)
				}
				fs.Visit(func(f *flag.Flag) {
					if f.Name == "prompt" && o.prompt == "" {
						o.emptyPrompt = true
					}
				})
				if err := o.check(); err != nil {
					return err
				}
				if o.promptFile != "" {
					var err error
					if o.prompt, err = readPrompt(o.promptFile, os.Stdin); err != nil {
						return err
					}
				}
				p, finish := prof.Start()
				o.eng.Profiler = p
				run := runGenerate
				if o.batchFile != "" {
					run = func(ctx context.Context, o generateOptions, stdout io.Writer) error {
						return runBatch(ctx, o, stdout, os.Stderr)
					}
				}
				err := run(ctx, o, os.Stdout)
				return errors.Join(err, finish())
			}
		},
	})
}

// generateOptions are generate's flags.
type generateOptions struct {
	model, prompt, ids string
	promptFile, system string
	batchFile          string
	batchSize          int
	chat, json, strict bool
	maxNew, topK       int
	temperature, topP  float64
	repetitionPenalty  float64
	seed               seedFlag
	stop               stringsFlag
	logprobs           bool
	topLogprobs        int
	eng                engine.Options
	emptyPrompt        bool // --prompt "" was given
	jsonSchema         string
	grammar            string
}

// schema is the grammar of --json-schema or --grammar (nil: none).
func (o *generateOptions) schema() (*grammar.Schema, error) {
	switch {
	case o.jsonSchema != "":
		b, err := os.ReadFile(o.jsonSchema)
		if err != nil {
			return nil, usageErrorf("--json-schema: %v", err)
		}
		s, err := grammar.Compile(b)
		if err != nil {
			return nil, usageErrorf("--json-schema %s: %v", o.jsonSchema, err)
		}
		return s, nil
	case o.grammar == "json":
		return grammar.AnyJSON, nil
	}
	return nil, nil
}

// check refuses flag combinations that do not go together.
func (o *generateOptions) check() error {
	if o.system != "" {
		o.chat = true
	}
	given := 0
	for _, s := range []string{o.prompt, o.promptFile, o.ids, o.batchFile} {
		if s != "" {
			given++
		}
	}
	switch {
	case o.emptyPrompt:
		return usageErrorf("--prompt is empty: give the text to continue")
	case given != 1:
		return usageErrorf("give exactly one of --prompt, --prompt-file, --ids and --batch-file")
	case o.batchFile != "" && o.batchSize < 1:
		return usageErrorf("--batch-size must be at least 1, got %d", o.batchSize)
	case o.batchFile != "" && (len(o.stop) > 0 || o.logprobs || o.topLogprobs > 0 || o.system != ""):
		return usageErrorf("--stop, --logprobs, --top-logprobs and --system are not available with --batch-file")
	case o.ids != "" && (o.chat || len(o.stop) > 0):
		return usageErrorf("--chat, --system and --stop work on text: give --prompt or --prompt-file instead of --ids")
	case (o.logprobs || o.topLogprobs > 0) && !o.json:
		return usageErrorf("--logprobs and --top-logprobs print with --json")
	case o.grammar != "" && o.grammar != "json":
		return usageErrorf("--grammar: the grammars are json, got %q", o.grammar)
	case o.grammar != "" && o.jsonSchema != "":
		return usageErrorf("give --grammar or --json-schema, not both")
	case o.batchFile != "" && (o.grammar != "" || o.jsonSchema != ""):
		return usageErrorf("--grammar and --json-schema are not available with --batch-file")
	case o.topLogprobs < 0 || o.topLogprobs > engine.MaxTopLogprobs:
		return usageErrorf("--top-logprobs must be in [0, %d], got %d", engine.MaxTopLogprobs, o.topLogprobs)
	}
	return nil
}

// readPrompt reads a prompt file (- for r, standard input), dropping one final newline.
func readPrompt(path string, stdin io.Reader) (string, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = io.ReadAll(stdin)
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return "", fmt.Errorf("--prompt-file: %w", err)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", fmt.Errorf("--prompt-file %s: the prompt is empty", path)
	}
	return s, nil
}

// addSamplingFlags defines the sampling flags (generate, chat): each left unset takes generation_config.json's
// value (samplingFor), and the seed a random one.
func addSamplingFlags(fs *flag.FlagSet, o *generateOptions) {
	o.temperature, o.topK, o.topP, o.repetitionPenalty = -1, -1, -1, -1 // unset: generation_config.json decides
	fs.Var(unsetFloat{p: &o.temperature}, "temperature", "sampling temperature (a `float`), 0 for greedy (default: generation_config.json, else greedy)")
	fs.Var(unsetInt{&o.topK}, "top-k", "sample among the k (an `int`) most likely tokens, 0 for all (default: generation_config.json)")
	fs.Var(unsetFloat{p: &o.topP, max: 1}, "top-p", "sample among the most likely tokens covering probability p (a `float`), 1 for all, 0 for the most likely alone (default: generation_config.json)")
	fs.Var(unsetFloat{p: &o.repetitionPenalty, positive: true}, "repetition-penalty", "penalise tokens already in the sequence by this `float`, 1 for off (default: generation_config.json)")
	fs.Var(&o.seed, "seed", "random seed for sampling (default: a random one, printed by -v, and by generate --json)")
}

// unsetFloat and unsetInt are flag values whose negative value means "not given": --help then prints no
// misleading "(default -1)" beside the generation_config.json default the usage text names.
// unsetFloat is finite and ≥ 0; with positive > 0 (where 0 would mean nothing else than "off" to the engine, as
// the repetition penalty's, whose off is 1); with max > 0, at most max.
type unsetFloat struct {
	p        *float64
	positive bool
	max      float64
}

func (f unsetFloat) String() string {
	if f.p == nil || *f.p < 0 {
		return ""
	}
	return strconv.FormatFloat(*f.p, 'g', -1, 64)
}

func (f unsetFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	switch {
	case f.positive && (err != nil || !(v > 0) || math.IsInf(v, 0)):
		return fmt.Errorf("want a finite number > 0 (1 is off), got %q", s)
	case err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v):
		return fmt.Errorf("want a finite number ≥ 0, got %q", s)
	case f.max > 0 && v > f.max:
		return fmt.Errorf("want a number in [0, %g], got %q", f.max, s)
	}
	*f.p = v
	return nil
}

type unsetInt struct{ p *int }

func (f unsetInt) String() string {
	if f.p == nil || *f.p < 0 {
		return ""
	}
	return strconv.Itoa(*f.p)
}

func (f unsetInt) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return fmt.Errorf("want a non-negative integer, got %q", s)
	}
	*f.p = v
	return nil
}

// generateJSON is the --json output.
type generateJSON struct {
	PromptIDs    []int         `json:"prompt_ids"`
	GeneratedIDs []int         `json:"generated_ids"`
	Text         string        `json:"text"`
	StopReason   string        `json:"stop_reason"`
	Stop         string        `json:"stop,omitempty"` // the stop string that ended generation
	Seed         uint64        `json:"seed"`
	Logprobs     []logprobJSON `json:"logprobs,omitempty"`
	// Passes is the model's forward passes for the sequence, its prompt's counted as one; Draft the draft
	// tokens proposed and accepted (speculative decoding, --draft).
	Passes  int                `json:"passes"`
	Draft   *engine.DraftStats `json:"draft,omitempty"`
	Timings timingsJSON        `json:"timings"`
}

type logprobJSON struct {
	ID          int           `json:"id"`
	Token       string        `json:"token"`
	Logprob     float64       `json:"logprob"`
	TopLogprobs []logprobJSON `json:"top_logprobs,omitempty"`
}

type timingsJSON struct {
	TTFTSeconds         float64 `json:"ttft_s"`
	PrefillTokensPerSec float64 `json:"prefill_tokens_per_s"`
	DecodeTokensPerSec  float64 `json:"decode_tokens_per_s"`
	TotalSeconds        float64 `json:"total_s"`
}

func runGenerate(ctx context.Context, o generateOptions, stdout io.Writer) error {
	monitor := guard.NewMonitor(guard.MonitorOptions{Strict: o.strict})
	schema, err := o.schema()
	if err != nil {
		return err
	}
	hint := ""
	if o.ids == "" || !o.json {
		hint = "give --ids and --json to run without one"
	}
	e, err := openEngine(ctx, o.model, o.eng, hint)
	if err != nil {
		return err
	}
	defer e.Close()
	_, tokErr := e.Tokenizer() // loaded now: the next line is logged as generation starts
	if o.ids == "" && tokErr != nil {
		return tokErr
	}
	sampling := samplingFor(o, e)
	slog.Debug("sampling", "seed", sampling.Seed, "temperature", sampling.Temperature, "top_k", sampling.TopK,
		"top_p", sampling.TopP, "repetition_penalty", sampling.RepetitionPenalty)
	out := generateJSON{Seed: sampling.Seed}
	var res *engine.Result
	var promptIDs []int
	if o.ids != "" {
		if promptIDs, err = parseIDs(o.ids); err != nil {
			return usageErrorf("%v", err)
		}
	}
	if tokErr != nil && schema != nil {
		return tokErr // the grammar reads the tokens' texts
	}
	if tokErr != nil { // no tokenizer (so --ids): ids only
		res, err = generateIDs(ctx, e, promptIDs, o, sampling, monitor, stdout, &out)
	} else {
		var tr *engine.TextResult
		tr, err = generateText(ctx, e, promptIDs, o, sampling, monitor, schema, stdout, &out)
		if tr != nil {
			res, out.Text, out.Stop = &tr.Result, tr.Text, tr.Stop
		}
	}
	if v, layer, step := monitor.PeakActivation(); layer >= 0 {
		slog.Debug("residual stream peak", "max_abs", v, "after_layer", layer, "step", step)
	}
	if !o.json {
		return err
	}
	if res == nil || (err != nil && ctx.Err() == nil) {
		return err // nothing generated, or a failure: no JSON, the error says it
	}
	// After Ctrl-C the partial result is printed (stop_reason "cancelled"), and the exit status says so.
	out.PromptIDs, out.GeneratedIDs, out.StopReason = res.PromptIDs, res.GeneratedIDs, res.StopReason
	out.Passes = res.Passes
	if o.eng.Draft != "" {
		out.Draft = &res.Draft
	}
	out.Timings = timingsJSON{
		TTFTSeconds:         res.Timings.TTFT.Seconds(),
		PrefillTokensPerSec: res.Timings.PrefillTokensPerSec,
		DecodeTokensPerSec:  res.Timings.DecodeTokensPerSec,
		TotalSeconds:        res.Timings.Total.Seconds(),
	}
	if out.GeneratedIDs == nil {
		out.GeneratedIDs = []int{}
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	return errors.Join(err, enc.Encode(out))
}

// generateText runs a text prompt (a chat with --chat), or promptIDs when not nil (--ids), through
// Engine.GenerateText: streamed to stdout in text mode (a text prompt first, except for a chat, whose reply is
// printed alone), collected into out with --json.
func generateText(ctx context.Context, e *engine.Engine, promptIDs []int, o generateOptions, s engine.Sampling, monitor *guard.Monitor, schema *grammar.Schema, stdout io.Writer, out *generateJSON) (*engine.TextResult, error) {
	req := engine.TextRequest{Prompt: o.prompt, PromptIDs: promptIDs, MaxNewTokens: o.maxNew, Sampling: s, Stop: o.stop,
		Logprobs: o.logprobs, TopLogprobs: o.topLogprobs, Monitor: monitor}
	if schema != nil {
		c, err := e.JSONConstraint(schema)
		if err != nil {
			return nil, err
		}
		req.Constraint = c
	}
	if o.chat {
		req.Prompt = ""
		if o.system != "" {
			req.Messages = append(req.Messages, tokenizer.Message{Role: "system", Content: o.system})
		}
		req.Messages = append(req.Messages, tokenizer.Message{Role: "user", Content: o.prompt})
	}
	if !o.json && !o.chat {
		// The prompt is echoed before the first token comes: a request the engine refuses fails first, printing
		// nothing.
		if req.PromptIDs == nil {
			ids, err := e.EncodePrompt(req.Prompt, nil)
			if err != nil {
				return nil, err
			}
			req.PromptIDs = ids
		}
		if err := e.CheckRequest(engine.Request{PromptIDs: req.PromptIDs, MaxNewTokens: req.MaxNewTokens, Sampling: req.Sampling}); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(stdout, o.prompt); err != nil {
			return nil, err
		}
	}
	res, err := e.GenerateText(ctx, req, func(c engine.TextChunk) error {
		if !o.json {
			if _, err := io.WriteString(stdout, c.Text); err != nil {
				return err
			}
		}
		if o.logprobs || o.topLogprobs > 0 {
			for _, tok := range c.Tokens {
				lp := logprobJSON{ID: tok.ID, Token: tok.Text, Logprob: tok.Logprob}
				for _, t := range tok.TopLogprobs {
					lp.TopLogprobs = append(lp.TopLogprobs, logprobJSON{ID: t.ID, Token: t.Text, Logprob: t.Logprob})
				}
				out.Logprobs = append(out.Logprobs, lp)
			}
		}
		return nil
	})
	if !o.json && res != nil {
		io.WriteString(stdout, "\n") // end the text (a partial one too, so that an error starts on a line of its own)
	}
	return res, err
}

// generateIDs runs a prompt given as token ids (--ids) on a model without a tokenizer: ids only (with --json,
// their log-probabilities too).
func generateIDs(ctx context.Context, e *engine.Engine, promptIDs []int, o generateOptions, s engine.Sampling, monitor *guard.Monitor, stdout io.Writer, out *generateJSON) (*engine.Result, error) {
	req := engine.Request{PromptIDs: promptIDs, MaxNewTokens: o.maxNew, Sampling: s, Monitor: monitor,
		Logprobs: o.logprobs, TopLogprobs: o.topLogprobs}
	return e.Generate(ctx, req, func(t engine.Token) error {
		if o.logprobs || o.topLogprobs > 0 {
			lp := logprobJSON{ID: t.ID, Logprob: t.Logprob}
			for _, c := range t.TopLogprobs {
				lp.TopLogprobs = append(lp.TopLogprobs, logprobJSON{ID: c.ID, Logprob: c.Logprob})
			}
			out.Logprobs = append(out.Logprobs, lp)
		}
		return monitor.ObserveToken(t.ID, "")
	})
}

// samplingFor combines the flags with the model's defaults (Engine.DefaultSampling, from generation_config.json):
// a flag left at -1 takes the model's value. The seed is --seed, else a random one.
func samplingFor(o generateOptions, e *engine.Engine) engine.Sampling {
	s := e.DefaultSampling()
	s.Seed = o.seed.value()
	for _, f := range []struct {
		flag float64
		dst  *float64
	}{{o.temperature, &s.Temperature}, {o.repetitionPenalty, &s.RepetitionPenalty}} {
		if f.flag >= 0 {
			*f.dst = f.flag
		}
	}
	if o.topP >= 0 {
		s.TopP = engine.ExplicitTopP(o.topP)
	}
	if o.topK >= 0 {
		s.TopK = o.topK
	}
	return s
}
