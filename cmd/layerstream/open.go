package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/layerstream/layerstream/engine"
	"github.com/layerstream/layerstream/gguf"
	"github.com/layerstream/layerstream/hub"
	"github.com/layerstream/layerstream/internal/progress"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/tokenizer"
)

// modelFlagHelp is the --model flag's help for the commands that open an engine.
const modelFlagHelp = "model: a checkpoint folder or a GGUF file (split into shards on first use), a shard folder, or a " +
	"Hugging Face repo id (org/name, or org/name/file.gguf for one GGUF file of a repo) (required)"

// openEngine opens model for a command: a Hub repo id is downloaded first, and a checkpoint split on first use,
// each with a progress bar on standard error (unless -q). When tokenizerHint is not empty the model must have a
// tokenizer, checked before any split starts (the error ends with the hint).
func openEngine(ctx context.Context, model string, opts engine.Options, tokenizerHint string) (*engine.Engine, error) {
	if err := opts.Check(); err != nil {
		return nil, err
	}
	if opts.Hub.Progress == nil {
		opts.Hub.Progress = progressOut()
	}
	dir, err := hub.Resolve(ctx, model, opts.Hub)
	if err != nil {
		return nil, err
	}
	if tokenizerHint != "" {
		if ok, err := hasTokenizer(dir); err != nil {
			return nil, err
		} else if !ok {
			return nil, fmt.Errorf("%s has no tokenizer (no tokenizer.json, or in a GGUF file no tokenizer.ggml.* metadata): %s", dir, tokenizerHint)
		}
	}
	var bar *progress.Bar
	if opts.SplitProgress == nil {
		opts.SplitProgress = func(done, total int64) {
			if bar == nil {
				bar = progress.New(progressOut(), "split (first use)", 0)
			}
			bar.Update(done, total)
		}
	}
	e, err := engine.Open(ctx, dir, opts)
	if bar != nil {
		bar.Finish()
	}
	return e, err
}

// hasTokenizer reports whether the model at dir has a tokenizer, before anything is split: a GGUF file always has
// one (engine.Open refuses one without tokenizer.ggml.* metadata before it splits, and converting the file here
// too would do that work twice); a folder that is neither a shard folder nor a checkpoint gets the error that
// names what it lacks.
func hasTokenizer(dir string) (bool, error) {
	if gguf.IsGGUF(dir) {
		return true, nil
	}
	if !shards.IsSet(dir) {
		if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
			_, err = engine.OpenCheckpoint(dir)
			return false, err
		}
	}
	_, err := os.Stat(filepath.Join(dir, "tokenizer.json"))
	return err == nil, nil
}

// loadTokenizer loads the tokenizer of the model at dir: tokenizer.json and tokenizer_config.json in a folder,
// or those a GGUF file's tokenizer.ggml.* metadata makes.
func loadTokenizer(dir string) (*tokenizer.Tokenizer, error) {
	if !gguf.IsGGUF(dir) {
		return tokenizer.Load(dir)
	}
	ck, err := gguf.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	files, err := ck.Files()
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.Parse(files["tokenizer.json"], files["tokenizer_config.json"])
	if err != nil {
		return nil, fmt.Errorf("%s: the tokenizer made from its metadata: %w", dir, err)
	}
	return tok, nil
}

// randomSeed is the seed of a run that names none: random, below 2³² so that it is easy to type again.
func randomSeed() uint64 {
	var b [4]byte
	rand.Read(b[:])
	return uint64(binary.LittleEndian.Uint32(b[:]))
}

// stringsFlag is a flag that may be repeated, collecting its values.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ", ") }

func (s *stringsFlag) Set(v string) error {
	if v == "" {
		return fmt.Errorf("empty value")
	}
	*s = append(*s, v)
	return nil
}

// seedFlag is --seed: unset means a random seed.
type seedFlag struct {
	v   uint64
	set bool
}

func (s *seedFlag) String() string {
	if !s.set {
		return ""
	}
	return fmt.Sprint(s.v)
}

func (s *seedFlag) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return fmt.Errorf("want a non-negative integer, got %q", v)
	}
	s.v, s.set = n, true
	return nil
}

// value returns the seed given, else a random one.
func (s *seedFlag) value() uint64 {
	if !s.set {
		s.v, s.set = randomSeed(), true
	}
	return s.v
}
