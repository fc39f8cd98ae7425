// Package reference is a float64 forward pass of the decoder families layerstream runs (Llama with its rope
// scalings and biases, Mistral and Qwen2 with sliding windows, Qwen3, OLMo 2, Granite, SmolLM3, Gemma 2 and 3,
// Phi-3 with longrope and partial rotary) in plain Go,
// written from the math and transformers' model code rather than from the engine, so that `layerstream verify`
// has an independent answer to compare against. It is simple and slow on purpose: one layer's weights in memory
// at a time, every sum in float64.
//
// Weights are read with checkpoint.ReadF32: bf16, f16 and f32 values are all exact in float32, and every product
// and sum is formed in float64, so the result is the float64 forward pass of the stored weights. Like the
// engine, it refuses a configuration it does not implement and a checkpoint tensor it does not read.
package reference

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/layerstream/layerstream/checkpoint"
)

// Output is the result of a forward pass over a sequence of T token ids.
type Output struct {
	// Hidden[l][p] is the residual stream after decoder layer l at position p (before the final norm).
	Hidden [][][]float64
	// Logits[p] is the next-token logits at position p (vocab_size values).
	Logits [][]float64
}

// Forward runs the whole model over ids (positions 0..len(ids)-1, causal attention) and returns every layer's
// hidden states and the logits at every position.
func Forward(ck *checkpoint.Checkpoint, ids []int) (*Output, error) {
	return ForwardContext(context.Background(), ck, ids)
}

// ForwardContext is Forward, checking ctx between layers.
func ForwardContext(ctx context.Context, ck *checkpoint.Checkpoint, ids []int) (*Output, error) {
	cfg := ck.Config
	if len(ids) == 0 {
		return nil, fmt.Errorf("reference %s: no token ids", ck.Dir)
	}
	m, err := newModel(cfg, len(ids))
	if err != nil {
		return nil, fmt.Errorf("reference %s: %w", ck.Dir, err)
	}
	for i, id := range ids {
		if id < 0 || id >= cfg.VocabSize {
			return nil, fmt.Errorf("reference: token id %d at position %d is outside the vocabulary (vocab_size %d)", id, i, cfg.VocabSize)
		}
	}
	if err := m.checkTensors(ck); err != nil {
		return nil, fmt.Errorf("reference %s: %w", ck.Dir, err)
	}
	if _, ok := ck.Tensor("lm_head.weight"); !ok && !cfg.TieWordEmbeddings {
		return nil, fmt.Errorf("reference %s: no tensor \"lm_head.weight\" and tie_word_embeddings is false in config.json: the output projection is missing", ck.Dir)
	}
	emb, err := load(ck, "model.embed_tokens.weight", cfg.VocabSize, cfg.HiddenSize)
	if err != nil {
		return nil, err
	}
	x := make([][]float64, len(ids))
	for p, id := range ids {
		x[p] = make([]float64, cfg.HiddenSize)
		for i, v := range emb.row(m.embedID(id)) {
			x[p][i] = float64(v) * m.embedScale
		}
	}
	if m.g4 != nil {
		if err := m.gemma4Inputs(ck, ids, x); err != nil {
			return nil, fmt.Errorf("reference %s: %w", ck.Dir, err)
		}
	}
	out := &Output{Hidden: make([][][]float64, cfg.NumHiddenLayers)}
	for l := range cfg.NumHiddenLayers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w, err := m.loadLayer(ck, l)
		if err != nil {
			return nil, err
		}
		m.layer(l, w, x)
		out.Hidden[l] = make([][]float64, len(x))
		for p := range x {
			out.Hidden[l][p] = append([]float64(nil), x[p]...)
		}
	}

	if out.Logits, err = headLogits(ck, m, emb, x); err != nil {
		return nil, err
	}
	return out, nil
}

// HeadLogits applies the final norm and the output projection to hidden states (one row per position): the
// logits a model truncated after some layer would produce, given that layer's Output.Hidden ("logit lens").
func HeadLogits(ck *checkpoint.Checkpoint, hidden [][]float64) ([][]float64, error) {
	m, err := newModel(ck.Config, max(len(hidden), 1))
	if err != nil {
		return nil, fmt.Errorf("reference %s: %w", ck.Dir, err)
	}
	emb, err := load(ck, "model.embed_tokens.weight", ck.Config.VocabSize, ck.Config.HiddenSize)
	if err != nil {
		return nil, err
	}
	return headLogits(ck, m, emb, hidden)
}

// headLogits computes lm_head(rmsnorm(x)) (scaled as the family does) at every position; emb is the output
// projection of tied models.
func headLogits(ck *checkpoint.Checkpoint, m *model, emb matrix, x [][]float64) ([][]float64, error) {
	cfg := ck.Config
	norm, err := load(ck, "model.norm.weight", cfg.HiddenSize)
	if err != nil {
		return nil, err
	}
	head := emb
	if _, ok := ck.Tensor("lm_head.weight"); ok {
		if head, err = load(ck, "lm_head.weight", cfg.VocabSize, cfg.HiddenSize); err != nil {
			return nil, err
		}
	} else if !cfg.TieWordEmbeddings {
		return nil, fmt.Errorf("reference %s: no tensor \"lm_head.weight\" and tie_word_embeddings is false in config.json: the output projection is missing", ck.Dir)
	}
	logits := make([][]float64, len(x))
	parallel(len(x), func(p int) {
		logits[p] = make([]float64, cfg.VocabSize)
		head.apply(logits[p], m.norm(x[p], norm.data))
		for i := range logits[p] {
			logits[p][i] = capped(logits[p][i]/m.logitsScaling, m.logitSoftCap)
		}
	})
	return logits, nil
}

// matrix is a row-major [rows, cols] weight, like a Hugging Face Linear weight [out_features, in_features].
type matrix struct {
	rows, cols int
	data       []float32
}

func (m matrix) row(r int) []float32 { return m.data[r*m.cols : (r+1)*m.cols] }

// apply computes dst = m·x (len(dst) == rows, len(x) == cols) in float64.
func (m matrix) apply(dst, x []float64) {
	for r := range dst {
		var s float64
		for c, w := range m.row(r) {
			s += float64(w) * x[c]
		}
		dst[r] = s
	}
}

// load reads a tensor and checks its shape: [rows, cols] for a matrix, [n] for a vector (cols 1).
func load(ck *checkpoint.Checkpoint, name string, shape ...int) (matrix, error) {
	t, ok := ck.Tensor(name)
	if !ok {
		return matrix{}, fmt.Errorf("reference %s: no tensor %q", ck.Dir, name)
	}
	if len(t.Shape) != len(shape) {
		return matrix{}, fmt.Errorf("reference: tensor %q has shape %v, config.json implies %v", name, t.Shape, shape)
	}
	for i, d := range shape {
		if t.Shape[i] != int64(d) {
			return matrix{}, fmt.Errorf("reference: tensor %q has shape %v, config.json implies %v", name, t.Shape, shape)
		}
	}
	data, err := ck.ReadF32(name)
	if err != nil {
		return matrix{}, fmt.Errorf("reference: %w", err)
	}
	m := matrix{rows: shape[0], cols: 1, data: data}
	if len(shape) == 2 {
		m.cols = shape[1]
	}
	return m, nil
}

// linear computes dst = m·x + b (b may be nil).
func linear(dst []float64, m matrix, b []float32, x []float64) {
	m.apply(dst, x)
	for i, v := range b {
		dst[i] += float64(v)
	}
}

// rmsNorm returns (offset + w) ⊙ x / sqrt(mean(x²) + eps), or without weight (w nil) x / sqrt(mean(x²) + eps).
func rmsNorm(x []float64, w []float32, eps, offset float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	scale := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		if w == nil {
			out[i] = v * scale
			continue
		}
		out[i] = (offset + float64(w[i])) * v * scale
	}
	return out
}

// softmax turns scores s into e^(s_i − max s) / Σ_j e^(s_j − max s), in place.
func softmax(s []float64) {
	top := math.Inf(-1)
	for _, v := range s {
		top = max(top, v)
	}
	var sum float64
	for i, v := range s {
		s[i] = math.Exp(v - top)
		sum += s[i]
	}
	for i := range s {
		s[i] /= sum
	}
}

// parallel runs f(0..n-1) on up to GOMAXPROCS goroutines. Each f writes only its own position's outputs.
func parallel(n int, f func(i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				f(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
