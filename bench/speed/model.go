package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/synth"
)

// modelDir is the cache folder of one synthetic model: the shape, layer count, weights (their dtype, or the
// quantization of a model written as quantized shards) and seed name it, so a folder is only ever reused for
// the same model.
func modelDir(cache, shapeName string, layers int, weights string, seed uint64) string {
	return filepath.Join(cache, fmt.Sprintf("%s-%dL-%s-seed%d", shapeName, layers, strings.ToLower(weights), seed))
}

// prepareModel returns the shard folder of the synthetic model in dir, creating it when missing: synth.Write
// into dir/checkpoint, shards.Split into dir/shards, then the checkpoint is removed (the shards are all the
// harness reads; removing it halves the disk used). A split interrupted halfway resumes on the next run. With
// a peer able to convert (peerConfig), the checkpoint is also converted to a GGUF kept beside the shards
// (ggufPath), written again first if it was removed (it is seeded: the same weights).
func prepareModel(ctx context.Context, dir string, shape synth.Shape, weights checkpoint.DType, seed uint64, pc peerConfig, log io.Writer) (string, error) {
	out := filepath.Join(dir, "shards")
	gguf := ggufPath(dir, weights)
	convert := pc.enabled() && pc.missing() == ""
	if _, err := os.Stat(gguf); err == nil {
		convert = false
	}
	if shards.IsSet(out) && !convert && !splitsMissing(dir) {
		return out, nil
	}
	ckpt := filepath.Join(dir, "checkpoint")
	if _, err := os.Stat(filepath.Join(ckpt, "config.json")); err != nil { // config.json is written last
		if err := os.RemoveAll(ckpt); err != nil {
			return "", fmt.Errorf("synthetic checkpoint %s: %w", ckpt, err)
		}
		fmt.Fprintf(log, "speed: writing the synthetic checkpoint %s (%d layers, %s)\n", ckpt, shape.NumLayers, weights)
		start := time.Now()
		opts := synth.Options{Shape: shape, DType: weights, Seed: seed}
		if convert {
			opts.Tokenizer = pc.Tokenizer
		}
		if err := synth.Write(ckpt, opts); err != nil {
			return "", err
		}
		fmt.Fprintf(log, "speed: checkpoint written in %.1f s\n", time.Since(start).Seconds())
	}
	if tok := filepath.Join(ckpt, "tokenizer.json"); convert {
		if _, err := os.Stat(tok); err != nil { // a checkpoint written earlier without one
			b, err := os.ReadFile(pc.Tokenizer)
			if err != nil {
				return "", fmt.Errorf("--peer-tokenizer: %w", err)
			}
			if err := os.WriteFile(tok, b, 0o644); err != nil {
				return "", err
			}
		}
	}
	if !shards.IsSet(out) {
		ck, err := checkpoint.Open(ckpt)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(log, "speed: splitting into %s\n", out)
		start := time.Now()
		if _, err := shards.Split(ctx, ck, shards.SplitOptions{Out: out}); err != nil {
			return "", err
		}
		fmt.Fprintf(log, "speed: split in %.1f s\n", time.Since(start).Seconds())
	}
	if convert {
		if err := convertGGUF(ctx, pc, ckpt, gguf, weights, log); err != nil {
			return "", err
		}
	}
	if err := splitOthers(ctx, ckpt, dir, log); err != nil {
		return "", err
	}
	if err := os.RemoveAll(ckpt); err != nil {
		return "", fmt.Errorf("removing the split checkpoint %s: %w", ckpt, err)
	}
	return out, nil
}

// prepareQuantized returns the q8 or q4 shard folder of the synthetic model in dir, writing it when missing
// straight from synth.Quantized (the quantized blocks generated as the split reads them, no float checkpoint
// on disk); an interrupted split resumes on the next run.
func prepareQuantized(ctx context.Context, dir string, shape synth.Shape, weights checkpoint.DType, seed uint64, q shards.Quantization, log io.Writer) (string, error) {
	out := filepath.Join(dir, "shards")
	if shards.IsSet(out) {
		return out, nil
	}
	ck, err := synth.Quantized(out, synth.Options{Shape: shape, DType: weights, Seed: seed}, q.Target)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(log, "speed: writing %s shards of the synthetic model into %s (%d layers)\n", q, out, shape.NumLayers)
	start := time.Now()
	if _, err := shards.Split(ctx, ck, shards.SplitOptions{Out: out}); err != nil {
		return "", err
	}
	fmt.Fprintf(log, "speed: written in %.1f s\n", time.Since(start).Seconds())
	return out, nil
}

// modelInfo describes the model the ratios were measured on, with the byte and FLOP counts they use.
type modelInfo struct {
	Shape  string `json:"shape"`
	Layers int    `json:"layers"`
	Shards string `json:"shards"`
	// StoredDType is the weights' dtype on disk; ComputeDType the dtype the engine processes weight matrices in,
	// and why.
	StoredDType   string `json:"stored_dtype"`
	ComputeDType  string `json:"compute_dtype"`
	ComputeReason string `json:"compute_dtype_reason"`
	// LayerFileBytes is the size of the decoder-layer shard files: the bytes a streamed decode step reads.
	LayerFileBytes int64 `json:"layer_file_bytes"`
	// LayerWeightBytes and HeadWeightBytes are the tensor bytes as stored of the decoder layers and of the
	// output projection (lm_head, or the embedding when tied).
	LayerWeightBytes int64 `json:"layer_weight_bytes"`
	HeadWeightBytes  int64 `json:"head_weight_bytes"`
	// LayerMatrixParams is the number of weight-matrix elements of all decoder layers; HeadParams of the output
	// projection. A token costs 2 FLOPs per matrix element.
	LayerMatrixParams int64 `json:"layer_matrix_params"`
	HeadParams        int64 `json:"head_params"`
	HiddenSize        int   `json:"hidden_size"`
}

// describeModel counts the bytes and parameters of set's units.
func describeModel(set *shards.Set) (modelInfo, []shards.UnitInfo, error) {
	m := modelInfo{Shards: set.Dir, Layers: set.Config.NumHiddenLayers, HiddenSize: set.Config.HiddenSize,
		StoredDType: set.Config.TorchDType}
	var layers []shards.UnitInfo
	head := "lm_head"
	if _, ok := set.Unit(head); !ok {
		head = "embed"
	}
	for _, u := range set.Units() {
		switch {
		case u.Layer >= 0:
			layers = append(layers, u)
			m.LayerFileBytes += u.FileSize
			m.LayerWeightBytes += u.Bytes()
			m.LayerMatrixParams += matrixParams(u)
		case u.Name == head:
			m.HeadWeightBytes = u.Bytes()
			m.HeadParams = matrixParams(u)
		}
	}
	if len(layers) == 0 {
		return m, nil, fmt.Errorf("shards %s: no decoder-layer units", set.Dir)
	}
	var quantized []string // the block types of the layers' matrices (quantized shards)
	for _, t := range layers[0].Tensors {
		if name := string(t.DType); t.DType.Quantized() && !slices.Contains(quantized, name) {
			quantized = append(quantized, name)
		}
	}
	if len(quantized) > 0 {
		m.StoredDType += ", layer matrices in " + strings.Join(quantized, "/") + " blocks"
	}
	return m, layers, nil
}

// matrixParams counts the elements of u's two-dimensional tensors (the weight matrices; norms are vectors).
func matrixParams(u shards.UnitInfo) int64 {
	var n int64
	for _, t := range u.Tensors {
		if len(t.Shape) == 2 {
			n += t.Shape[0] * t.Shape[1]
		}
	}
	return n
}

// syntheticPrompt draws n seeded token ids in [3, vocab), avoiding the end-of-sequence ids, so the prompt looks
// like ordinary text to the engine.
func syntheticPrompt(vocab int, eos []int, n int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 0x7370656564)) // "speed"
	ids := make([]int, 0, n)
	for len(ids) < n {
		if id := 3 + rng.IntN(vocab-3); !slices.Contains(eos, id) {
			ids = append(ids, id)
		}
	}
	return ids
}
