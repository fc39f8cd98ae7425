package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/guard"
	"github.com/layerstream/layerstream/tokenizer"
)

func init() {
	register(command{
		name:    "generate",
		summary: "generate text, streaming the model through memory one layer at a time",
		usage:   "--model DIR|SHARDS|REPO --prompt TEXT | --batch-file PROMPTS.jsonl",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			var o generateOptions
			fs.StringVar(&o.model, "model", "", "model: checkpoint folder (split into shards on first use), shard folder or Hugging Face repo id (required)")
			fs.StringVar(&o.prompt, "prompt", "", "prompt text")
			fs.StringVar(&o.ids, "ids", "", "prompt as comma-separated token ids instead of --prompt")
			fs.BoolVar(&o.chat, "chat", false, "wrap the prompt in the model's chat template as a user message")
			fs.IntVar(&o.maxNew, "max-new-tokens", 256, "most tokens to generate (0: until the context is full)")
			o.temperature, o.topK, o.topP, o.repetitionPenalty = -1, -1, -1, -1 // unset: generation_config.json decides
			fs.Var(unsetFloat{&o.temperature}, "temperature", "sampling temperature (a `float`), 0 for greedy (default: generation_config.json, else greedy)")
			fs.Var(unsetInt{&o.topK}, "top-k", "sample among the k (an `int`) most likely tokens, 0 for all (default: generation_config.json)")
			fs.Var(unsetFloat{&o.topP}, "top-p", "sample among the most likely tokens covering probability p (a `float`), 1 for all (default: generation_config.json)")
			fs.Var(unsetFloat{&o.repetitionPenalty}, "repetition-penalty", "penalise tokens already in the sequence by this `float`, 1 for off (default: generation_config.json)")
			fs.Uint64Var(&o.seed, "seed", 0, "random seed for sampling")
			fs.BoolVar(&o.json, "json", false, "print one JSON object (ids, text, stop reason, timings) instead of streaming text")
			fs.StringVar(&o.batchFile, "batch-file", "", "throughput mode: generate every line of this JSONL file ({\"prompt\": TEXT} or {\"ids\": [...]}, optional \"max_new_tokens\", \"temperature\", \"top_k\", \"top_p\", \"repetition_penalty\", \"seed\"), several sequences per layer load; prints one JSON object per line, in input order")
			fs.IntVar(&o.batchSize, "batch-size", 16, "with --batch-file: sequences generated together")
			fs.BoolVar(&o.strict, "strict", false, "stop with an error when a guard detects broken output (NaN, all-zero logits, degenerate repetition)")
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
					dtype := o.eng.DType
					if dtype == "auto" {
						dtype = "f32"
					}
					return printPlacement(os.Stdout, o.model, *printPlan, dtype)
				}
				if o.batchFile != "" {
					if o.prompt != "" || o.ids != "" {
						return usageErrorf("--batch-file takes the prompts from the file: give no --prompt or --ids")
					}
					if o.strict {
						return usageErrorf("--strict is not available with --batch-file (the guards follow one sequence)")
					}
					if o.batchSize < 1 {
						return usageErrorf("--batch-size must be at least 1, got %d", o.batchSize)
					}
				} else if (o.prompt == "") == (o.ids == "") {
					return usageErrorf("give exactly one of --prompt, --ids and --batch-file")
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
	batchFile          string
	batchSize          int
	chat, json, strict bool
	maxNew, topK       int
	temperature, topP  float64
	repetitionPenalty  float64
	seed               uint64
	eng                engine.Options
}

// unsetFloat and unsetInt are flag values whose negative value means "not given": --help then prints no
// misleading "(default -1)" beside the generation_config.json default the usage text names.
type unsetFloat struct{ p *float64 }

func (f unsetFloat) String() string {
	if f.p == nil || *f.p < 0 {
		return ""
	}
	return strconv.FormatFloat(*f.p, 'g', -1, 64)
}

func (f unsetFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 {
		return fmt.Errorf("want a non-negative number, got %q", s)
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
	PromptIDs    []int       `json:"prompt_ids"`
	GeneratedIDs []int       `json:"generated_ids"`
	Text         string      `json:"text"`
	StopReason   string      `json:"stop_reason"`
	Timings      timingsJSON `json:"timings"`
}

type timingsJSON struct {
	TTFTSeconds         float64 `json:"ttft_s"`
	PrefillTokensPerSec float64 `json:"prefill_tokens_per_s"`
	DecodeTokensPerSec  float64 `json:"decode_tokens_per_s"`
	TotalSeconds        float64 `json:"total_s"`
}

func runGenerate(ctx context.Context, o generateOptions, stdout io.Writer) error {
	if o.eng.Hub.Progress == nil {
		o.eng.Hub.Progress = os.Stderr
	}
	monitor := guard.NewMonitor(guard.MonitorOptions{Strict: o.strict})
	o.eng.Monitor = monitor
	e, err := engine.Open(ctx, o.model, o.eng)
	if err != nil {
		return err
	}
	defer e.Close()

	var tok *tokenizer.Tokenizer
	if t, err := tokenizer.Load(e.Dir()); err == nil {
		tok = t
	} else if o.prompt != "" || !o.json {
		return fmt.Errorf("tokenizer: %w (give --ids and --json to run without one)", err)
	}
	var promptIDs []int
	if o.ids != "" {
		if promptIDs, err = parseIDs(o.ids); err != nil {
			return usageErrorf("--ids: %v", err)
		}
	} else {
		if promptIDs, err = encodePrompt(tok, o.prompt, o.chat); err != nil {
			return err
		}
	}

	req := engine.Request{PromptIDs: promptIDs, MaxNewTokens: o.maxNew, Sampling: samplingFor(o, e)}
	var dec *tokenizer.StreamDecoder
	if tok != nil {
		dec = tok.NewStreamDecoder(true)
		dec.Prime(promptIDs) // the first generated word keeps its leading space
	}
	onToken := func(t engine.Token) error {
		text := ""
		if dec != nil {
			text = dec.Next(t.ID)
		}
		if !o.json {
			if _, err := io.WriteString(stdout, text); err != nil {
				return err
			}
		}
		return monitor.ObserveToken(t.ID, text)
	}
	if !o.json {
		if _, err := io.WriteString(stdout, o.prompt); err != nil {
			return err
		}
	}
	res, err := e.Generate(ctx, req, onToken)
	if err != nil {
		if !o.json {
			io.WriteString(stdout, "\n") // end the partial text so the error starts on a line of its own
		}
		return err
	}
	if !o.json {
		tail := ""
		if dec != nil {
			tail = dec.Flush()
		}
		_, err := io.WriteString(stdout, tail+"\n")
		return err
	}
	out := generateJSON{PromptIDs: res.PromptIDs, GeneratedIDs: res.GeneratedIDs, StopReason: res.StopReason,
		Timings: timingsJSON{
			TTFTSeconds:         res.Timings.TTFT.Seconds(),
			PrefillTokensPerSec: res.Timings.PrefillTokensPerSec,
			DecodeTokensPerSec:  res.Timings.DecodeTokensPerSec,
			TotalSeconds:        res.Timings.Total.Seconds(),
		}}
	if tok != nil {
		out.Text = tok.Decode(res.GeneratedIDs, true)
	}
	return json.NewEncoder(stdout).Encode(out)
}

// samplingFor combines the flags with generation_config.json: a flag left at -1 takes the model's value, and
// the model's sampling settings apply only when it sets do_sample.
func samplingFor(o generateOptions, e *engine.Engine) engine.Sampling {
	g := e.Generation()
	s := engine.Sampling{Seed: o.seed, Temperature: o.temperature, TopK: o.topK, TopP: o.topP, RepetitionPenalty: o.repetitionPenalty}
	if s.Temperature < 0 {
		s.Temperature = 0
		if g.DoSample {
			s.Temperature = 1
			if g.Temperature != nil {
				s.Temperature = *g.Temperature
			}
		}
	}
	if s.TopK < 0 {
		s.TopK = 0
		if g.DoSample && g.TopK != nil {
			s.TopK = *g.TopK
		}
	}
	if s.TopP < 0 {
		s.TopP = 0
		if g.DoSample && g.TopP != nil {
			s.TopP = *g.TopP
		}
	}
	if s.RepetitionPenalty < 0 {
		s.RepetitionPenalty = 0
		if g.RepetitionPenalty != nil {
			s.RepetitionPenalty = *g.RepetitionPenalty
		}
	}
	return s
}
