package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/layerstream/layerstream/hub"
	"github.com/layerstream/layerstream/tokenizer"
)

func init() {
	register(command{
		name:    "tokenize",
		summary: "encode text with a model's tokenizer.json: one JSON string per stdin line in, one JSON array of ids out (a line that fails prints null, its error goes to stderr, and the exit status is 1)",
		usage:   "--model DIR < lines",
		setup: func(fs *flag.FlagSet) func(ctx context.Context, args []string) error {
			model := fs.String("model", "", "folder holding tokenizer.json and tokenizer_config.json (a checkpoint, a shard folder, or a Hub repo id already downloaded), or a GGUF file (required)")
			decode := fs.Bool("decode", false, "decode instead: one JSON array of ids per line in, one JSON string out")
			noSpecial := fs.Bool("no-special", false, "encoding: do not add the special tokens the tokenizer adds (BOS…); decoding: leave special tokens out of the text")
			return func(ctx context.Context, args []string) error {
				if *model == "" {
					return usageErrorf("--model is required")
				}
				if len(args) > 0 {
					return usageErrorf("unexpected arguments %q: text comes on standard input", args)
				}
				opts := hub.OptionsFromEnv()
				opts.Offline = true // tokenizing never downloads a model's weights
				dir, err := hub.Resolve(ctx, *model, opts)
				if err != nil {
					return fmt.Errorf("--model: %w (download a Hub model first with 'layerstream download')", err)
				}
				tok, err := loadTokenizer(dir)
				if err != nil {
					return err
				}
				return tokenizeLines(ctx, tok, os.Stdin, os.Stdout, os.Stderr, *decode, !*noSpecial)
			}
		},
	})
}

// tokenizeLines reads JSON strings (or, when decode, JSON arrays of ids) line by line from r and writes one JSON
// array of ids (or JSON string) per line to w. Blank lines are skipped. A line that cannot be tokenized gets
// null in w and its error in errw, and the lines after it are still read; the error returned then counts them.
func tokenizeLines(ctx context.Context, tok *tokenizer.Tokenizer, r io.Reader, w, errw io.Writer, decode, special bool) error {
	in := bufio.NewReader(r)
	out := bufio.NewWriter(w)
	var bad, lines, first int
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		line, err := in.ReadBytes('\n')
		if len(line) > 0 && !isBlank(line) {
			lines++
			if lerr := tokenizeLine(tok, line, out, decode, special); lerr != nil {
				if bad++; bad == 1 {
					first = n
				}
				fmt.Fprintf(errw, "layerstream tokenize: stdin line %d: %v\n", n, lerr)
				if _, werr := io.WriteString(out, "null\n"); werr != nil {
					return werr
				}
			}
			if ferr := out.Flush(); ferr != nil {
				return ferr
			}
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("stdin: %w", err)
		}
		if err != nil {
			break
		}
	}
	if bad > 0 {
		what := "tokenized"
		if decode {
			what = "decoded"
		}
		return fmt.Errorf("%d of %d lines could not be %s (printed as null), the first at stdin line %d", bad, lines, what, first)
	}
	return nil
}

func tokenizeLine(tok *tokenizer.Tokenizer, line []byte, out io.Writer, decode, special bool) error {
	var result any
	if decode {
		var ids []int
		if err := json.Unmarshal(line, &ids); err != nil {
			return fmt.Errorf("want a JSON array of token ids: %w", err)
		}
		for _, id := range ids {
			if tok.IDToken(id) == "" {
				return fmt.Errorf("id %d is not in the vocabulary (size %d)", id, tok.VocabSize())
			}
		}
		result = tok.Decode(ids, !special)
	} else {
		var text string
		if err := json.Unmarshal(line, &text); err != nil {
			return fmt.Errorf("want a JSON string: %w", err)
		}
		ids, err := tok.Encode(text, special)
		if err != nil {
			return err
		}
		if ids == nil {
			ids = []int{}
		}
		result = ids
	}
	enc := json.NewEncoder(out) // one value and a newline; "<s>" stays readable (no HTML escaping)
	enc.SetEscapeHTML(false)
	return enc.Encode(result)
}

func isBlank(line []byte) bool {
	for _, c := range line {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}
