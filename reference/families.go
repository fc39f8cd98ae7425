package reference

import (
	"fmt"
	"math"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
)

// model is what the reference makes of a config: the family's features and the per-layer attention.
type model struct {
	cfg                     *checkpoint.Config
	qkvBias, oBias, mlpBias bool
	// qkNorm: "" none, "head" over each head (Qwen3), "whole" over the whole projection (OLMo 2).
	qkNorm string
	// postNorm: OLMo 2 normalises each branch's output instead of its input.
	postNorm bool
	// Granite's multipliers (1 elsewhere; attnScale is 1/√head_dim elsewhere).
	embedScale, attnScale, residual, logitsScaling float64
	// window[l]: layer l's sliding window (0: none); rope[l]: whether layer l rotates q and k.
	window []int
	rope   []bool
	// invFreq are the rotary frequencies (for a pass over n positions), ropeScale multiplies cos and sin.
	invFreq   []float64
	ropeScale float64
}

// newModel reads cfg for a forward pass over n positions, refusing what the reference does not implement.
func newModel(cfg *checkpoint.Config, n int) (*model, error) {
	L := cfg.NumHiddenLayers
	m := &model{cfg: cfg, qkvBias: cfg.AttentionBias, oBias: cfg.AttentionBias, mlpBias: cfg.MLPBias,
		embedScale: 1, attnScale: 1 / math.Sqrt(float64(cfg.HeadDim)), residual: 1, logitsScaling: 1,
		window: make([]int, L), rope: make([]bool, L)}
	for l := range m.rope {
		m.rope[l] = true
	}
	if cfg.HiddenAct != "silu" && cfg.HiddenAct != "swish" {
		return nil, fmt.Errorf("config.json hidden_act %q is not implemented by the reference (silu only)", cfg.HiddenAct)
	}
	// sliding says which layers the config's layer_types (or the family's rule, when absent) make sliding.
	sliding := func(rule func(l int) bool) error {
		for l := range L {
			s := rule(l)
			if cfg.LayerTypes != nil {
				s = cfg.LayerTypes[l] == "sliding_attention"
				if !s && cfg.LayerTypes[l] != "full_attention" {
					return fmt.Errorf("config.json layer_types[%d] %q is not implemented by the reference", l, cfg.LayerTypes[l])
				}
			}
			if s {
				if cfg.SlidingWindow == nil || (cfg.ModelType != "mistral" && !cfg.UseSlidingWindow) {
					return fmt.Errorf("layer %d slides but sliding_window is null or use_sliding_window false", l)
				}
				m.window[l] = *cfg.SlidingWindow
			}
		}
		return nil
	}
	var err error
	switch cfg.ModelType {
	case "llama":
	case "mistral":
		err = sliding(func(int) bool { return cfg.SlidingWindow != nil })
	case "qwen2", "qwen3":
		if cfg.ModelType == "qwen2" {
			m.qkvBias, m.oBias = true, false
		} else {
			m.qkNorm = "head"
		}
		err = sliding(func(l int) bool { return cfg.UseSlidingWindow && cfg.SlidingWindow != nil && l >= cfg.MaxWindowLayers })
	case "olmo2":
		m.qkNorm, m.postNorm = "whole", true
	case "granite":
		m.embedScale, m.attnScale, m.residual, m.logitsScaling = cfg.EmbeddingMultiplier, cfg.AttentionMultiplier, cfg.ResidualMultiplier, cfg.LogitsScaling
	case "smollm3":
		for l := range L {
			if cfg.NoRopeLayers != nil {
				m.rope[l] = cfg.NoRopeLayers[l] == 1
			} else {
				m.rope[l] = (l+1)%cfg.NoRopeLayerInterval != 0
			}
		}
		err = sliding(func(l int) bool { return cfg.UseSlidingWindow && cfg.SlidingWindow != nil && !m.rope[l] })
	default:
		return nil, fmt.Errorf("model_type %q is not implemented by the reference", cfg.ModelType)
	}
	if err != nil {
		return nil, err
	}
	if m.invFreq, m.ropeScale, err = ropeFrequencies(cfg, n); err != nil {
		return nil, err
	}
	return m, nil
}

// ropeFrequencies returns the rotary inverse frequencies of a pass over n positions, and the factor on cos and
// sin, for the rope types of transformers' modeling_rope_utils (default, linear, dynamic, yarn, llama3).
func ropeFrequencies(cfg *checkpoint.Config, n int) ([]float64, float64, error) {
	r := cfg.Rope
	if cfg.RopeByLayerType != nil {
		return nil, 0, fmt.Errorf("rope_parameters nested by layer type are not implemented by the reference")
	}
	if r.PartialRotaryFactor != 0 && r.PartialRotaryFactor != 1 {
		return nil, 0, fmt.Errorf("partial_rotary_factor %g is not implemented by the reference", r.PartialRotaryFactor)
	}
	d := float64(cfg.HeadDim)
	theta := r.Theta
	if r.Type == "dynamic" { // NTK: the base grows with the sequence past max_position_embeddings
		maxPos := float64(cfg.MaxPositionEmbeddings)
		seq := math.Max(float64(n), maxPos)
		theta *= math.Pow(r.Factor*seq/maxPos-(r.Factor-1), d/(d-2))
	}
	inv := make([]float64, cfg.HeadDim/2)
	for i := range inv {
		inv[i] = math.Pow(theta, -2*float64(i)/d)
	}
	scale := 1.0
	switch r.Type {
	case "default", "dynamic":
	case "linear": // positions divided by factor
		for i := range inv {
			inv[i] /= r.Factor
		}
	case "llama3":
		orig := float64(r.OriginalMaxPositionEmbeddings)
		for i, f := range inv {
			// The fraction of the pre-training context one turn of this pair spans decides its scaling:
			// under orig/high_freq_factor kept, over orig/low_freq_factor divided by factor, smoothed between.
			turns := orig * f / (2 * math.Pi)
			smooth := math.Min(math.Max((turns-r.LowFreqFactor)/(r.HighFreqFactor-r.LowFreqFactor), 0), 1)
			inv[i] = f * (smooth + (1-smooth)/r.Factor)
		}
	case "yarn":
		factor := r.Factor
		orig := float64(r.OriginalMaxPositionEmbeddings)
		if factor == 0 {
			factor = float64(cfg.MaxPositionEmbeddings) / orig
		}
		// The pair index at which a dimension turns `rotations` times over the pre-training context.
		dimAt := func(rotations float64) float64 {
			return d * math.Log(orig/(rotations*2*math.Pi)) / (2 * math.Log(r.Theta))
		}
		fast, slow := r.BetaFast, r.BetaSlow
		if fast == 0 {
			fast = 32
		}
		if slow == 0 {
			slow = 1
		}
		lo, hi := dimAt(fast), dimAt(slow)
		if r.Truncate == nil || *r.Truncate {
			lo, hi = math.Floor(lo), math.Ceil(hi)
		}
		lo, hi = math.Max(lo, 0), math.Min(hi, d-1)
		if lo == hi {
			hi += 0.001
		}
		for i, f := range inv {
			interp := math.Min(math.Max((float64(i)-lo)/(hi-lo), 0), 1) // 0: keep f, 1: f/factor
			inv[i] = f * (1 - interp + interp/factor)
		}
		mscale := func(m float64) float64 { return 0.1*m*math.Log(factor) + 1 }
		switch {
		case r.AttentionFactor != nil:
			scale = *r.AttentionFactor
		case factor <= 1:
		case r.Mscale != 0 && r.MscaleAllDim != 0:
			scale = mscale(r.Mscale) / mscale(r.MscaleAllDim)
		default:
			scale = mscale(1)
		}
	default:
		return nil, 0, fmt.Errorf("rope type %q is not implemented by the reference", r.Type)
	}
	return inv, scale, nil
}

// layerTensors lists the tensors of decoder layer l (full names) with their shapes.
func (m *model) layerTensors(l int) map[string][]int {
	c := m.cfg
	h, hd, nq, nkv, ff := c.HiddenSize, c.HeadDim, c.NumAttentionHeads, c.NumKeyValueHeads, c.IntermediateSize
	p := fmt.Sprintf("model.layers.%d.", l)
	t := map[string][]int{
		p + "self_attn.q_proj.weight": {nq * hd, h}, p + "self_attn.k_proj.weight": {nkv * hd, h},
		p + "self_attn.v_proj.weight": {nkv * hd, h}, p + "self_attn.o_proj.weight": {h, nq * hd},
		p + "mlp.gate_proj.weight": {ff, h}, p + "mlp.up_proj.weight": {ff, h}, p + "mlp.down_proj.weight": {h, ff},
	}
	if m.postNorm {
		t[p+"post_attention_layernorm.weight"], t[p+"post_feedforward_layernorm.weight"] = []int{h}, []int{h}
	} else {
		t[p+"input_layernorm.weight"], t[p+"post_attention_layernorm.weight"] = []int{h}, []int{h}
	}
	if m.qkvBias {
		t[p+"self_attn.q_proj.bias"], t[p+"self_attn.k_proj.bias"], t[p+"self_attn.v_proj.bias"] = []int{nq * hd}, []int{nkv * hd}, []int{nkv * hd}
	}
	if m.oBias {
		t[p+"self_attn.o_proj.bias"] = []int{h}
	}
	if m.mlpBias {
		t[p+"mlp.gate_proj.bias"], t[p+"mlp.up_proj.bias"], t[p+"mlp.down_proj.bias"] = []int{ff}, []int{ff}, []int{h}
	}
	switch m.qkNorm {
	case "head":
		t[p+"self_attn.q_norm.weight"], t[p+"self_attn.k_norm.weight"] = []int{hd}, []int{hd}
	case "whole":
		t[p+"self_attn.q_norm.weight"], t[p+"self_attn.k_norm.weight"] = []int{nq * hd}, []int{nkv * hd}
	}
	return t
}

// checkTensors refuses a checkpoint tensor the reference would not read: it would compute without it.
func (m *model) checkTensors(ck *checkpoint.Checkpoint) error {
	used := map[string]bool{"model.embed_tokens.weight": true, "model.norm.weight": true, "lm_head.weight": true}
	for l := range m.cfg.NumHiddenLayers {
		for name := range m.layerTensors(l) {
			used[name] = true
		}
	}
	for _, t := range ck.Tensors {
		if !used[t.Name] && !strings.HasSuffix(t.Name, ".self_attn.rotary_emb.inv_freq") {
			return fmt.Errorf("tensor %q is not read by the reference for this config.json (%s)", t.Name, m.cfg.Arch.Name)
		}
	}
	return nil
}

// layerWeights holds one decoder layer's tensors by full name.
type layerWeights struct {
	prefix string
	m      map[string]matrix
}

func (w *layerWeights) get(name string) matrix { return w.m[w.prefix+name] }

// vec is a vector tensor's values, nil when the layer has none of that name (an absent bias).
func (w *layerWeights) vec(name string) []float32 {
	if t, ok := w.m[w.prefix+name]; ok {
		return t.data
	}
	return nil
}

func (m *model) loadLayer(ck *checkpoint.Checkpoint, l int) (*layerWeights, error) {
	w := &layerWeights{prefix: fmt.Sprintf("model.layers.%d.", l), m: map[string]matrix{}}
	for name, shape := range m.layerTensors(l) {
		t, err := load(ck, name, shape...)
		if err != nil {
			return nil, err
		}
		w.m[name] = t
	}
	return w, nil
}

// rope rotates each head of vec (heads × headDim values) by position pos, rotate-half style: dimension i pairs
// with i+headDim/2 and turns by pos·invFreq[i]; cos and sin are scaled by ropeScale.
func (m *model) rotate(vec []float64, heads, pos int) {
	hd := m.cfg.HeadDim
	half := hd / 2
	for i, f := range m.invFreq {
		sin, cos := math.Sincos(float64(pos) * f)
		sin, cos = sin*m.ropeScale, cos*m.ropeScale
		for h := range heads {
			a, b := &vec[h*hd+i], &vec[h*hd+i+half]
			*a, *b = *a*cos-*b*sin, *b*cos+*a*sin
		}
	}
}

// layer updates the residual stream x (one row per position) in place with decoder layer l:
//
//	x += r·o_proj(attention(rope(norm(q)), rope(norm(k)), v))  on rmsnorm(x)    (pre-norm)
//	x += r·down(silu(gate(h)) ⊙ up(h))                          with h = rmsnorm(x)
//
// or, post-norm (OLMo 2), x += rmsnorm(branch(x)) for each branch; r is Granite's residual multiplier (else 1).
func (m *model) layer(l int, w *layerWeights, x [][]float64) {
	cfg := m.cfg
	T, hd, nq, nkv := len(x), cfg.HeadDim, cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	eps := cfg.RMSNormEps
	in := func(p int, name string) []float64 {
		if m.postNorm {
			return x[p]
		}
		return rmsNorm(x[p], w.vec(name), eps)
	}
	add := func(p int, y []float64, name string) {
		if m.postNorm {
			y = rmsNorm(y, w.vec(name), eps)
		}
		for i := range y {
			x[p][i] += m.residual * y[i]
		}
	}
	q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
	parallel(T, func(p int) {
		h := in(p, "input_layernorm.weight")
		q[p], k[p], v[p] = make([]float64, nq*hd), make([]float64, nkv*hd), make([]float64, nkv*hd)
		linear(q[p], w.get("self_attn.q_proj.weight"), w.vec("self_attn.q_proj.bias"), h)
		linear(k[p], w.get("self_attn.k_proj.weight"), w.vec("self_attn.k_proj.bias"), h)
		linear(v[p], w.get("self_attn.v_proj.weight"), w.vec("self_attn.v_proj.bias"), h)
		switch m.qkNorm {
		case "whole":
			q[p], k[p] = rmsNorm(q[p], w.vec("self_attn.q_norm.weight"), eps), rmsNorm(k[p], w.vec("self_attn.k_norm.weight"), eps)
		case "head":
			for _, t := range []struct {
				vec   []float64
				heads int
				name  string
			}{{q[p], nq, "self_attn.q_norm.weight"}, {k[p], nkv, "self_attn.k_norm.weight"}} {
				for h := range t.heads {
					copy(t.vec[h*hd:(h+1)*hd], rmsNorm(t.vec[h*hd:(h+1)*hd], w.vec(t.name), eps))
				}
			}
		}
		if m.rope[l] {
			m.rotate(q[p], nq, p)
			m.rotate(k[p], nkv, p)
		}
	})
	group := nq / nkv          // query heads per key/value head (grouped-query attention)
	first := func(p int) int { // the earliest position p attends to
		if m.window[l] > 0 {
			return max(0, p-m.window[l]+1)
		}
		return 0
	}
	parallel(T, func(p int) {
		att := make([]float64, nq*hd)
		scores := make([]float64, p+1)
		for h := range nq {
			kvh := h / group
			qh := q[p][h*hd : (h+1)*hd]
			maxS := math.Inf(-1)
			for t := first(p); t <= p; t++ { // causal, within the window
				var s float64
				for i, qv := range qh {
					s += qv * k[t][kvh*hd+i]
				}
				scores[t] = s * m.attnScale
				maxS = max(maxS, scores[t])
			}
			var sum float64
			for t := first(p); t <= p; t++ {
				scores[t] = math.Exp(scores[t] - maxS)
				sum += scores[t]
			}
			out := att[h*hd : (h+1)*hd]
			for t := first(p); t <= p; t++ {
				a := scores[t] / sum
				for i := range out {
					out[i] += a * v[t][kvh*hd+i]
				}
			}
		}
		o := make([]float64, cfg.HiddenSize)
		linear(o, w.get("self_attn.o_proj.weight"), w.vec("self_attn.o_proj.bias"), att)
		add(p, o, "post_attention_layernorm.weight")
	})
	parallel(T, func(p int) {
		h := in(p, "post_attention_layernorm.weight")
		g, u := make([]float64, cfg.IntermediateSize), make([]float64, cfg.IntermediateSize)
		linear(g, w.get("mlp.gate_proj.weight"), w.vec("mlp.gate_proj.bias"), h)
		linear(u, w.get("mlp.up_proj.weight"), w.vec("mlp.up_proj.bias"), h)
		for i := range g {
			g[i] = g[i] / (1 + math.Exp(-g[i])) * u[i] // silu(gate) ⊙ up
		}
		d := make([]float64, cfg.HiddenSize)
		linear(d, w.get("mlp.down_proj.weight"), w.vec("mlp.down_proj.bias"), g)
		add(p, d, "post_feedforward_layernorm.weight")
	})
}
