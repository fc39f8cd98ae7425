package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/imatrix"
	"github.com/layerstream/layerstream/internal/progress"
)

func init() {
	register(command{
		name:    "imatrix",
		summary: "collect an importance matrix (each weight matrix's mean squared inputs over a calibration text) for split --imatrix",
		usage:   "--model MODEL --text FILE --out FILE",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			var opts engine.Options
			addEngineFlags(fs, &opts)
			model := fs.String("model", "", modelFlagHelp+"; the unquantized model the matrix is for")
			text := fs.String("text", "", "calibration text, a UTF-8 file: text like what the model will be used on, not the text it is evaluated on (required)")
			out := fs.String("out", "", "the importance matrix file to write, safetensors (required)")
			chunk := fs.Int("chunk", 512, "tokens per pass: the text is cut into pieces of this many tokens (the tokenizer's BOS first, where it adds one), each its own sequence, as llama.cpp's imatrix does")
			chunks := fs.Int("chunks", 0, "at most this many pieces (0: the whole text)")
			return func(ctx context.Context, args []string) error {
				switch {
				case len(args) > 0:
					return usageErrorf("unexpected arguments %q", args)
				case *model == "" || *text == "" || *out == "":
					return usageErrorf("--model, --text and --out are required")
				case *chunk < 2:
					return usageErrorf("--chunk %d: want at least 2 tokens", *chunk)
				case *chunks < 0:
					return usageErrorf("--chunks %d: want 0 (all) or more", *chunks)
				}
				b, err := os.ReadFile(*text)
				if err != nil {
					return fmt.Errorf("--text: %w", err)
				}
				c := imatrix.NewCollector()
				opts.ObserveInputs = c.Observe
				e, err := openEngine(ctx, *model, opts, "imatrix tokenizes the calibration text with it")
				if err != nil {
					return err
				}
				defer e.Close()
				pieces, tokens, err := calibrationPieces(e, string(b), *chunk, *chunks)
				if err != nil {
					return fmt.Errorf("--text %s: %w", *text, err)
				}
				bar := progress.NewCount(progressOut(), "imatrix", "tokens")
				done := 0
				for _, p := range pieces {
					if _, err := e.Logits(ctx, p); err != nil {
						return err
					}
					done += len(p)
					bar.Update(int64(done), int64(tokens))
				}
				bar.Finish()
				m := c.Matrix()
				meta := map[string]string{"format": "layerstream.imatrix", "dataset": filepath.Base(*text),
					"tokens": strconv.Itoa(tokens), "chunks": strconv.Itoa(len(pieces)), "chunk_size": strconv.Itoa(*chunk)}
				if err := m.Write(*out, meta); err != nil {
					return err
				}
				slog.Info("imatrix written", "file", *out, "matrices", len(m.Columns), "tokens", tokens, "pieces", len(pieces), "chunk", *chunk)
				return nil
			}
		},
	})
}

// calibrationPieces cuts text's tokens into pieces of chunk tokens (the tokenizer's leading special tokens
// first, where it adds them), at most max (0: all) of them, the last one shorter where the text ends, and returns
// them with their token count.
func calibrationPieces(e *engine.Engine, text string, chunk, max int) ([][]int, int, error) {
	tok, err := e.Tokenizer()
	if err != nil {
		return nil, 0, err
	}
	ids, err := tok.Encode(text, false)
	if err != nil {
		return nil, 0, err
	}
	prefix, err := tok.Encode("", true) // BOS, where the tokenizer adds it
	if err != nil {
		return nil, 0, err
	}
	body := chunk - len(prefix)
	if body < 1 {
		return nil, 0, fmt.Errorf("--chunk %d leaves no room after the tokenizer's %d leading tokens", chunk, len(prefix))
	}
	if len(ids) == 0 {
		return nil, 0, fmt.Errorf("no tokens")
	}
	var pieces [][]int
	tokens := 0
	for i := 0; i < len(ids) && (max == 0 || len(pieces) < max); i += body {
		p := append(append([]int(nil), prefix...), ids[i:min(i+body, len(ids))]...)
		pieces = append(pieces, p)
		tokens += len(p)
	}
	return pieces, tokens, nil
}
