package main

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
)

// The peer: llama.cpp (through llama-cpp-python) running the same synthetic model, converted to GGUF, beside
// layerstream, its runs alternated with the engine's (targets 6, 7 and 9). It is optional: without it those
// targets are NOT MEASURABLE HERE, and CI never needs Python.

//go:embed peer.py
var peerScript []byte

// peerConfig says how to run llama.cpp (flags, defaulting to the environment variables named in main.go).
type peerConfig struct {
	Python        string // an interpreter that imports llama_cpp (llama-cpp-python)
	Convert       string // llama.cpp's convert_hf_to_gguf.py (in llama-cpp-python's sdist: vendor/llama.cpp)
	ConvertPython string // an interpreter with what Convert imports (torch, transformers); default Python
	Tokenizer     string // a tokenizer.json with the shape's vocabulary: the converter needs one
}

func (c peerConfig) enabled() bool { return c.Python != "" }

// missing names what the configuration lacks to convert a model, or "" when it is complete.
func (c peerConfig) missing() string {
	var m []string
	if c.Convert == "" {
		m = append(m, "--peer-convert")
	}
	if c.Tokenizer == "" {
		m = append(m, "--peer-tokenizer")
	}
	return strings.Join(m, " and ")
}

// ggufPath is where the GGUF of the synthetic model in dir is kept.
func ggufPath(dir string, weights checkpoint.DType) string {
	return filepath.Join(dir, fmt.Sprintf("model-%s.gguf", strings.ToLower(string(weights))))
}

// convertGGUF converts the checkpoint in ckpt to a GGUF at out (written under a temporary name, then renamed),
// keeping the weights' dtype.
func convertGGUF(ctx context.Context, c peerConfig, ckpt, out string, weights checkpoint.DType, log io.Writer) error {
	py := c.ConvertPython
	if py == "" {
		py = c.Python
	}
	tmp := out + ".tmp"
	cmd := exec.CommandContext(ctx, py, c.Convert, ckpt, "--outtype", strings.ToLower(string(weights)), "--outfile", tmp)
	// The converter imports the gguf package next to it (vendor/llama.cpp/gguf-py), newer than gguf on PyPI.
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(filepath.Dir(c.Convert), "gguf-py"))
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	fmt.Fprintf(log, "speed: converting the checkpoint to GGUF for llama.cpp: %s\n", out)
	start := time.Now()
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("%s %s: %w\n%s", py, c.Convert, err, tail(stderr.String(), 2000))
	}
	fmt.Fprintf(log, "speed: converted in %.1f s\n", time.Since(start).Seconds())
	return os.Rename(tmp, out)
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// peer is a running llama.cpp: peer.py answering one JSON line per command.
type peer struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *strings.Builder
	script string // the temporary copy of peer.py
	System string // llama.cpp's system info line (its build's CPU features)
}

// peerCommand builds the peer's process; tests replace it with a stand-in speaking the same protocol.
var peerCommand = func(ctx context.Context, python, script string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, python, append([]string{script}, args...)...)
}

// startPeer starts llama.cpp on gguf with threads threads and a KV cache of nCtx positions shared by up to nSeq
// sequences, and waits until the model is loaded.
func startPeer(ctx context.Context, c peerConfig, gguf string, threads, nCtx, nSeq int) (*peer, error) {
	f, err := os.CreateTemp("", "layerstream-peer-*.py")
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(peerScript); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	f.Close()
	p := &peer{script: f.Name(), stderr: &strings.Builder{}}
	p.cmd = peerCommand(ctx, c.Python, p.script, gguf, fmt.Sprint(threads), fmt.Sprint(nCtx), fmt.Sprint(nSeq))
	p.cmd.Stderr = p.stderr
	if p.in, err = p.cmd.StdinPipe(); err != nil {
		os.Remove(p.script)
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		os.Remove(p.script)
		return nil, err
	}
	p.out = bufio.NewReader(stdout)
	if err := p.cmd.Start(); err != nil {
		os.Remove(p.script)
		return nil, fmt.Errorf("llama.cpp peer (%s): %w", c.Python, err)
	}
	var ready struct {
		Ready  bool   `json:"ready"`
		System string `json:"system"`
	}
	if err := p.read(&ready); err != nil {
		p.close()
		return nil, err
	}
	p.System = strings.TrimSpace(ready.System)
	return p, nil
}

// call sends one command and decodes its answer into out.
func (p *peer) call(cmd map[string]any, out any) error {
	b, err := json.Marshal(cmd)
	if err != nil {
		return err
	}
	if _, err := p.in.Write(append(b, '\n')); err != nil {
		return p.failed(err)
	}
	return p.read(out)
}

func (p *peer) read(out any) error {
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		return p.failed(err)
	}
	if err := json.Unmarshal(line, out); err != nil {
		return fmt.Errorf("llama.cpp peer: %q: %w", tail(string(line), 200), err)
	}
	return nil
}

// failed wraps err with what the peer wrote on stderr.
func (p *peer) failed(err error) error {
	if errors.Is(err, io.EOF) {
		err = errors.New("it exited")
	}
	return fmt.Errorf("llama.cpp peer: %w\n%s", err, tail(p.stderr.String(), 2000))
}

// prefill runs a prompt as one batch and returns the seconds it took.
func (p *peer) prefill(ids []int) (float64, error) {
	var r struct {
		Secs float64 `json:"secs"`
	}
	err := p.call(map[string]any{"op": "prefill", "ids": ids}, &r)
	return r.Secs, err
}

// decode runs a prompt and n greedy tokens, and returns the decode rate ((n−1) ÷ time from the first token to
// the last) and the tokens.
func (p *peer) decode(ids []int, n int) (float64, []int, error) {
	var r struct {
		TokS float64 `json:"tok_s"`
		IDs  []int   `json:"ids"`
	}
	err := p.call(map[string]any{"op": "decode", "ids": ids, "n": n}, &r)
	return r.TokS, r.IDs, err
}

// batch runs every prompt as a sequence of one batch for n greedy tokens each, and returns the aggregate rate
// (every token ÷ wall time, prompts included).
func (p *peer) batch(prompts [][]int, n int) (float64, error) {
	var r struct {
		TokS float64 `json:"tok_s"`
	}
	err := p.call(map[string]any{"op": "batch", "prompts": prompts, "n": n}, &r)
	return r.TokS, err
}

// close ends the peer (closing its input ends peer.py's loop) and removes its script.
func (p *peer) close() error {
	p.in.Close()
	err := p.cmd.Wait()
	os.Remove(p.script)
	return err
}
