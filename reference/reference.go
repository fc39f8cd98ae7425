// Package reference is a float64 forward pass of Llama-family decoders (Llama, Mistral, Qwen2) in plain Go,
// written from the math rather than from the engine, so that `layerstream verify` has an independent answer to
// compare against. It is simple and slow on purpose: one layer's weights in memory at a time, every sum in float64.
//
// Weights are read with checkpoint.ReadF32: bf16, f16 and f32 values are all exact in float32, and every product
// and sum is formed in float64, so the result is the float64 forward pass of the stored weights.
package reference

import (
	"context"
	"encoding/json"
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
	if err := supported(cfg, len(ids)); err != nil {
		return nil, fmt.Errorf("reference %s: %w", ck.Dir, err)
	}
	for i, id := range ids {
		if id < 0 || id >= cfg.VocabSize {
			return nil, fmt.Errorf("reference: token id %d at position %d is outside the vocabulary (vocab_size %d)", id, i, cfg.VocabSize)
		}
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
		for i, v := range emb.row(id) {
			x[p][i] = float64(v)
		}
	}
	out := &Output{Hidden: make([][][]float64, cfg.NumHiddenLayers)}
	for l := range cfg.NumHiddenLayers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		w, err := loadLayer(ck, l)
		if err != nil {
			return nil, err
		}
		decoderLayer(cfg, w, x)
		out.Hidden[l] = make([][]float64, len(x))
		for p := range x {
			out.Hidden[l][p] = append([]float64(nil), x[p]...)
		}
	}

	if out.Logits, err = headLogits(ck, emb, x); err != nil {
		return nil, err
	}
	return out, nil
}

// HeadLogits applies the final norm and the output projection to hidden states (one row per position): the
// logits a model truncated after some layer would produce, given that layer's Output.Hidden ("logit lens").
func HeadLogits(ck *checkpoint.Checkpoint, hidden [][]float64) ([][]float64, error) {
	emb, err := load(ck, "model.embed_tokens.weight", ck.Config.VocabSize, ck.Config.HiddenSize)
	if err != nil {
		return nil, err
	}
	return headLogits(ck, emb, hidden)
}

// headLogits computes lm_head(rmsnorm(x)) at every position; emb is the output projection of tied models.
func headLogits(ck *checkpoint.Checkpoint, emb matrix, x [][]float64) ([][]float64, error) {
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
		head.apply(logits[p], rmsNorm(x[p], norm.data, cfg.RMSNormEps))
	})
	return logits, nil
}

// supported rejects configurations this reference does not implement, rather than computing something else.
func supported(cfg *checkpoint.Config, n int) error {
	if n == 0 {
		return fmt.Errorf("no token ids")
	}
	if len(cfg.RopeScaling) > 0 && string(cfg.RopeScaling) != "null" {
		var rs map[string]any
		if json.Unmarshal(cfg.RopeScaling, &rs) != nil || len(rs) > 0 {
			return fmt.Errorf("config.json rope_scaling %s is not supported by the reference (plain RoPE only)", cfg.RopeScaling)
		}
	}
	// Qwen2 configs carry a sliding_window that only applies with use_sliding_window, which they leave off.
	if cfg.SlidingWindow != nil && *cfg.SlidingWindow > 0 && n > *cfg.SlidingWindow && cfg.ModelType != "qwen2" {
		return fmt.Errorf("%d tokens exceed sliding_window %d, which the reference does not implement", n, *cfg.SlidingWindow)
	}
	return nil
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

// layerWeights holds one decoder layer. Biases are nil when the architecture has none.
type layerWeights struct {
	inNorm, postNorm  matrix
	q, k, v, o        matrix
	qb, kb, vb, ob    []float32
	gate, up, down    matrix
	gateB, upB, downB []float32
}

func loadLayer(ck *checkpoint.Checkpoint, l int) (*layerWeights, error) {
	cfg := ck.Config
	h, hd, nq, nkv, ff := cfg.HiddenSize, cfg.HeadDim, cfg.NumAttentionHeads, cfg.NumKeyValueHeads, cfg.IntermediateSize
	p := fmt.Sprintf("model.layers.%d.", l)
	w := &layerWeights{}
	var err error
	get := func(dst *matrix, name string, shape ...int) {
		if err == nil {
			*dst, err = load(ck, p+name, shape...)
		}
	}
	bias := func(dst *[]float32, want bool, name string, n int) {
		if err == nil && want {
			var m matrix
			m, err = load(ck, p+name, n)
			*dst = m.data
		}
	}
	get(&w.inNorm, "input_layernorm.weight", h)
	get(&w.postNorm, "post_attention_layernorm.weight", h)
	get(&w.q, "self_attn.q_proj.weight", nq*hd, h)
	get(&w.k, "self_attn.k_proj.weight", nkv*hd, h)
	get(&w.v, "self_attn.v_proj.weight", nkv*hd, h)
	get(&w.o, "self_attn.o_proj.weight", h, nq*hd)
	get(&w.gate, "mlp.gate_proj.weight", ff, h)
	get(&w.up, "mlp.up_proj.weight", ff, h)
	get(&w.down, "mlp.down_proj.weight", h, ff)
	qkv := cfg.HasQKVBias()
	bias(&w.qb, qkv, "self_attn.q_proj.bias", nq*hd)
	bias(&w.kb, qkv, "self_attn.k_proj.bias", nkv*hd)
	bias(&w.vb, qkv, "self_attn.v_proj.bias", nkv*hd)
	bias(&w.ob, cfg.AttentionBias, "self_attn.o_proj.bias", h)
	bias(&w.gateB, cfg.MLPBias, "mlp.gate_proj.bias", ff)
	bias(&w.upB, cfg.MLPBias, "mlp.up_proj.bias", ff)
	bias(&w.downB, cfg.MLPBias, "mlp.down_proj.bias", h)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// linear computes dst = m·x + b (b may be nil).
func linear(dst []float64, m matrix, b []float32, x []float64) {
	m.apply(dst, x)
	for i, v := range b {
		dst[i] += float64(v)
	}
}

// rmsNorm returns w ⊙ x / sqrt(mean(x²) + eps).
func rmsNorm(x []float64, w []float32, eps float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	scale := 1 / math.Sqrt(ss/float64(len(x))+eps)
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(w[i]) * v * scale
	}
	return out
}

// rope rotates each head of vec (heads × headDim values) by position pos, rotate-half style: dimension i pairs
// with i+headDim/2 and turns by angle pos·theta^(-2i/headDim).
func rope(vec []float64, heads, headDim, pos int, theta float64) {
	half := headDim / 2
	for i := range half {
		angle := float64(pos) * math.Pow(theta, -2*float64(i)/float64(headDim))
		sin, cos := math.Sincos(angle)
		for h := range heads {
			a, b := &vec[h*headDim+i], &vec[h*headDim+i+half]
			*a, *b = *a*cos-*b*sin, *b*cos+*a*sin
		}
	}
}

// decoderLayer updates the residual stream x (one row per position) in place:
//
//	x += o_proj(attention(rope(q), rope(k), v))  on rmsnorm(x)
//	x += down(silu(gate(h)) ⊙ up(h))              with h = rmsnorm(x)
func decoderLayer(cfg *checkpoint.Config, w *layerWeights, x [][]float64) {
	T, hd, nq, nkv := len(x), cfg.HeadDim, cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
	parallel(T, func(p int) {
		h := rmsNorm(x[p], w.inNorm.data, cfg.RMSNormEps)
		q[p], k[p], v[p] = make([]float64, nq*hd), make([]float64, nkv*hd), make([]float64, nkv*hd)
		linear(q[p], w.q, w.qb, h)
		linear(k[p], w.k, w.kb, h)
		linear(v[p], w.v, w.vb, h)
		rope(q[p], nq, hd, p, cfg.RopeTheta)
		rope(k[p], nkv, hd, p, cfg.RopeTheta)
	})
	group := nq / nkv // query heads per key/value head (grouped-query attention)
	scale := 1 / math.Sqrt(float64(hd))
	parallel(T, func(p int) {
		att := make([]float64, nq*hd)
		scores := make([]float64, p+1)
		for h := range nq {
			kvh := h / group
			qh := q[p][h*hd : (h+1)*hd]
			maxS := math.Inf(-1)
			for t := 0; t <= p; t++ { // causal: position p sees 0..p
				var s float64
				for i, qv := range qh {
					s += qv * k[t][kvh*hd+i]
				}
				scores[t] = s * scale
				maxS = max(maxS, scores[t])
			}
			var sum float64
			for t := range scores {
				scores[t] = math.Exp(scores[t] - maxS)
				sum += scores[t]
			}
			out := att[h*hd : (h+1)*hd]
			for t, a := range scores {
				a /= sum
				for i := range out {
					out[i] += a * v[t][kvh*hd+i]
				}
			}
		}
		o := make([]float64, cfg.HiddenSize)
		linear(o, w.o, w.ob, att)
		for i := range o {
			x[p][i] += o[i]
		}
	})
	parallel(T, func(p int) {
		h := rmsNorm(x[p], w.postNorm.data, cfg.RMSNormEps)
		g, u := make([]float64, cfg.IntermediateSize), make([]float64, cfg.IntermediateSize)
		linear(g, w.gate, w.gateB, h)
		linear(u, w.up, w.upB, h)
		for i := range g {
			g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i] // silu(gate) ⊙ up
		}
		d := make([]float64, cfg.HiddenSize)
		linear(d, w.down, w.downB, g)
		for i := range d {
			x[p][i] += d[i]
		}
	})
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
