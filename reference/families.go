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
	// qkNorm: "" none, "head" over each head (Qwen3, Gemma 3), "whole" over the whole projection (OLMo 2),
	// "rotated" over each head without weight after rotation, on the rotated layers only (Llama 4).
	qkNorm string
	// mlp is the dense MLP's module ("mlp"; Llama 4: "feed_forward"), of width denseInter.
	mlp        string
	denseInter int
	// norms: "pre" normalises each branch's input (Llama), "post" its output (OLMo 2), "both" both (Gemma, with
	// pre_feedforward_layernorm before the MLP and post_attention_layernorm after attention).
	norms string
	// normOffset is added to every norm weight: Gemma's RMSNorm multiplies by (1 + w).
	normOffset float64
	// fused: Phi-3's qkv_proj and gate_up_proj instead of q/k/v_proj and gate/up_proj.
	fused bool
	// act is the MLP's activation: "silu", "gelu_tanh" or "gelu".
	act string
	// Granite's multipliers (1 elsewhere; attnScale is 1/√head_dim elsewhere, Gemma's query_pre_attn_scalar^-½);
	// the soft-caps (0: none) cap the attention scores and the logits as c·tanh(x/c) (Gemma 2).
	embedScale, attnScale, residual, logitsScaling float64
	attnSoftCap, logitSoftCap                      float64
	// window[l]: layer l's sliding window (0: none); rope[l]: the index in ropes of layer l's rotation, or -1
	// for a layer without rotary embeddings.
	window []int
	rope   []int
	ropes  []rotation
	// qScale, when set, multiplies layer l's queries at position p after rotation (Ministral 3, Llama 4).
	qScale func(l, p int) float64
	// chunk[l]: layer l's queries see only the positions of their own chunk of chunk[l] (0: none; Llama 4).
	chunk []int
	// experts, when set, replaces the MLP of its sparse layers (moe.go).
	experts *experts
	// sinks: each attention head has a learned logit (self_attn.sinks) in its softmax's denominator (gpt-oss).
	sinks bool
	// linear, for the Gated DeltaNet hybrids (deltanet.go), says which layers are linear attention; nil otherwise.
	linear []bool
	// g4 is Gemma 4's layers (gemma4.go); nil for the other families.
	g4 *gemma4
	// latent, for DeepSeek-V3 (latent.go), is its multi-head latent attention; nil otherwise.
	latent *latent
}

// rotation is one rotary embedding for a pass: the frequencies of the rotated pairs (the first 2·len(invFreq)
// dimensions of each head turn; the others pass) and the factor on cos and sin.
type rotation struct {
	invFreq []float64
	scale   float64
}

// rotaries are the rotary embeddings a family asks for: global for every layer, local (when set) for its sliding
// layers; partial rotates part of each head, longrope allows Phi-3's longrope scaling.
type rotaries struct {
	global            checkpoint.Rope
	local             *checkpoint.Rope
	partial, longrope bool
}

// newModel reads cfg for a forward pass over n positions, refusing what the reference does not implement.
func newModel(cfg *checkpoint.Config, n int) (*model, error) {
	if cfg.ModelType == "deepseek_v3" { // DeepseekV3Config: head_dim is qk_rope_head_dim, the rotary dimensions
		c := *cfg
		c.HeadDim = cfg.QKRopeHeadDim
		cfg = &c
	}
	L := cfg.NumHiddenLayers
	m := &model{cfg: cfg, qkvBias: cfg.AttentionBias, oBias: cfg.AttentionBias, mlpBias: cfg.MLPBias, norms: "pre",
		embedScale: 1, attnScale: 1 / math.Sqrt(float64(cfg.HeadDim)), residual: 1, logitsScaling: 1,
		window: make([]int, L), rope: make([]int, L), chunk: make([]int, L), mlp: "mlp", denseInter: cfg.IntermediateSize}
	if cfg.ModelType == "gemma4_text" { // its own layers, rotations and activation (gemma4.go)
		if err := m.gemma4Model(); err != nil {
			return nil, err
		}
		return m, nil
	}
	r := rotaries{global: cfg.Rope}
	act := cfg.HiddenAct
	if err := m.family(&r, &act); err != nil {
		return nil, err
	}
	if err := m.activation(act); err != nil {
		return nil, err
	}
	if err := m.rotations(r, n); err != nil {
		return nil, err
	}
	return m, nil
}

// family sets what cfg's model_type changes from a Llama's: features, sliding layers, rotations (r) and the
// activation's config key (act).
func (m *model) family(r *rotaries, act *string) error {
	cfg := m.cfg
	switch cfg.ModelType {
	case "llama":
	case "mistral":
		return m.sliding(func(int) bool { return cfg.SlidingWindow != nil })
	case "ministral3":
		// Ministral3Attention: queries × 1 + β·log(1 + floor(p / original_max_position_embeddings)) after rope.
		beta, orig := cfg.Rope.Llama4ScalingBeta, float64(cfg.Rope.OriginalMaxPositionEmbeddings)
		if beta == nil || orig <= 0 {
			return fmt.Errorf("ministral3 without llama_4_scaling_beta and original_max_position_embeddings is not implemented by the reference")
		}
		m.qScale = func(_, p int) float64 { return 1 + *beta*math.Log(1+math.Floor(float64(p)/orig)) }
		return m.sliding(func(int) bool { return cfg.SlidingWindow != nil })
	case "qwen2", "qwen3":
		if cfg.ModelType == "qwen2" {
			m.qkvBias, m.oBias = true, false
		} else {
			m.qkNorm = "head"
		}
		return m.sliding(func(l int) bool { return cfg.UseSlidingWindow && cfg.SlidingWindow != nil && l >= cfg.MaxWindowLayers })
	case "olmo2":
		m.qkNorm, m.norms = "whole", "post"
	case "olmo3":
		return m.olmo3(r)
	case "granite":
		m.embedScale, m.attnScale, m.residual, m.logitsScaling = cfg.EmbeddingMultiplier, cfg.AttentionMultiplier, cfg.ResidualMultiplier, cfg.LogitsScaling
	case "smollm3":
		for l := range cfg.NumHiddenLayers {
			if (cfg.NoRopeLayers != nil && cfg.NoRopeLayers[l] == 0) || (cfg.NoRopeLayers == nil && (l+1)%cfg.NoRopeLayerInterval == 0) {
				m.rope[l] = -1
			}
		}
		return m.sliding(func(l int) bool { return cfg.UseSlidingWindow && cfg.SlidingWindow != nil && m.rope[l] < 0 })
	case "gemma2", "gemma3_text":
		*act = cfg.HiddenActivation
		return m.gemma(r)
	case "phi3":
		// Phi3Model: fused projections, partial rotary, longrope; every layer within sliding_window when set.
		m.fused, r.partial, r.longrope = true, true, true
		if t := cfg.Rope.Type; t != "default" && t != "longrope" {
			return fmt.Errorf("rope type %q is not implemented by the reference for Phi-3", t)
		}
		return m.sliding(func(int) bool { return cfg.SlidingWindow != nil })
	case "llama4_text":
		return m.llama4()
	case "qwen3_5_text", "qwen3_5_moe_text", "qwen3_next":
		m.normOffset, m.qkNorm, r.partial = 1, "head", true
		return m.deltaNetLayers()
	default:
		known, partial, err := m.moeFamily(m.sliding)
		if !known {
			return fmt.Errorf("model_type %q is not implemented by the reference", cfg.ModelType)
		}
		r.partial = partial
		return err
	}
	return nil
}

// sliding sets the sliding layers: those the config's layer_types says, or when absent those of the family's rule.
func (m *model) sliding(rule func(l int) bool) error {
	cfg := m.cfg
	for l := range cfg.NumHiddenLayers {
		s := rule(l)
		if cfg.LayerTypes != nil {
			s = cfg.LayerTypes[l] == "sliding_attention"
			if !s && cfg.LayerTypes[l] != "full_attention" {
				return fmt.Errorf("config.json layer_types[%d] %q is not implemented by the reference", l, cfg.LayerTypes[l])
			}
		}
		if s {
			if cfg.SlidingWindow == nil || (cfg.ModelType == "qwen2" || cfg.ModelType == "qwen3" || cfg.ModelType == "smollm3" || cfg.ModelType == "qwen2_moe" || cfg.ModelType == "qwen3_moe") && !cfg.UseSlidingWindow {
				return fmt.Errorf("layer %d slides but sliding_window is null or use_sliding_window false", l)
			}
			m.window[l] = *cfg.SlidingWindow
		}
	}
	return nil
}

// olmo3 is Olmo3Model: OLMo 2's layers; sliding layers (every fourth full when layer_types is absent) rotate with
// rope_parameters.sliding_attention, the full ones with full_attention (the rope scaling); a missing entry is
// default rope with theta 500000 (Olmo3Config.default_theta).
func (m *model) olmo3(r *rotaries) error {
	cfg := m.cfg
	m.qkNorm, m.norms = "whole", "post"
	if err := m.sliding(func(l int) bool { return (l+1)%4 != 0 }); err != nil {
		return err
	}
	l := checkpoint.Rope{Type: "default", Theta: 500000}
	if cfg.RopeByLayerType == nil {
		if cfg.Rope.Theta != l.Theta { // transformers 4 rotates the sliding layers with rope_theta, 5 with 500000
			return fmt.Errorf("olmo3 rope_theta %g without rope_parameters by layer type is not implemented by the reference", cfg.Rope.Theta)
		}
	} else {
		r.global = l
		if g, ok := cfg.RopeByLayerType["full_attention"]; ok {
			r.global = g
		}
		if s, ok := cfg.RopeByLayerType["sliding_attention"]; ok {
			l = s
		}
	}
	r.local = &l
	return nil
}

// gemma is Gemma2Model and Gemma3TextModel: embeddings × √hidden_size in the model's dtype, (1 + w) norms around
// both branches, hidden_activation, scores × query_pre_attn_scalar^-½, final logits soft-capped.
func (m *model) gemma(r *rotaries) error {
	cfg := m.cfg
	if cfg.UseBidirectionalAttention.True() {
		return fmt.Errorf("use_bidirectional_attention is not implemented by the reference")
	}
	m.norms, m.normOffset = "both", 1
	if !(cfg.QueryPreAttnScalar > 0) {
		return fmt.Errorf("query_pre_attn_scalar %g is not implemented by the reference", cfg.QueryPreAttnScalar)
	}
	m.attnScale = 1 / math.Sqrt(cfg.QueryPreAttnScalar)
	var err error
	if m.embedScale, err = gemmaNormalizer(cfg.HiddenSize, cfg.TorchDType); err != nil {
		return err
	}
	if cfg.FinalLogitSoftcapping != nil {
		if cfg.Arch.Name == "Gemma3ForConditionalGeneration" {
			return fmt.Errorf("final_logit_softcapping is not implemented by the reference for Gemma3ForConditionalGeneration (transformers' never applies it)")
		}
		m.logitSoftCap = *cfg.FinalLogitSoftcapping
	}
	if cfg.ModelType == "gemma2" {
		if cfg.AttnLogitSoftcapping != nil {
			m.attnSoftCap = *cfg.AttnLogitSoftcapping
		}
		return m.sliding(func(l int) bool { return (l+1)%2 != 0 })
	}
	if cfg.AttnLogitSoftcapping != nil {
		return fmt.Errorf("attn_logit_softcapping is not implemented by the reference for Gemma 3 (transformers ignores it)")
	}
	return m.gemma3(r)
}

// gemma3 is what Gemma 3 adds: qk norms, every pattern-th layer global, local layers rotating with their own base
// (rope_local_base_freq, or the nested sliding_attention entry) unscaled, global ones with rope_theta and the
// rope scaling.
func (m *model) gemma3(r *rotaries) error {
	cfg := m.cfg
	m.qkNorm = "head"
	pattern := 6
	if cfg.SlidingWindowPattern != nil {
		pattern = *cfg.SlidingWindowPattern
	}
	if p := cfg.SavedSlidingWindowPattern; cfg.LayerTypes == nil && p != nil && *p != pattern {
		return fmt.Errorf("_sliding_window_pattern %d without layer_types is not implemented by the reference (transformers would use %d)", *p, pattern)
	}
	if err := m.sliding(func(l int) bool { return (l+1)%pattern != 0 }); err != nil {
		return err
	}
	l := checkpoint.Rope{Type: "default", Theta: 10000}
	if cfg.RopeLocalBaseFreq != nil {
		l.Theta = *cfg.RopeLocalBaseFreq
	}
	if cfg.RopeByLayerType != nil {
		r.global = checkpoint.Rope{Type: "default", Theta: 1e6}
		if g, ok := cfg.RopeByLayerType["full_attention"]; ok {
			r.global = g
		}
		if s, ok := cfg.RopeByLayerType["sliding_attention"]; ok {
			if cfg.RopeLocalBaseFreq != nil && *cfg.RopeLocalBaseFreq != s.Theta {
				return fmt.Errorf("rope_local_base_freq and rope_parameters.sliding_attention disagree")
			}
			l = s
		}
	}
	r.local = &l
	return nil
}

// activation sets the MLP's activation from its config value.
func (m *model) activation(act string) error {
	switch act {
	case "silu", "swish":
		m.act = "silu"
	case "gelu_pytorch_tanh", "gelu_new":
		m.act = "gelu_tanh"
	case "gelu":
		m.act = "gelu"
	default:
		return fmt.Errorf("config.json activation %q is not implemented by the reference", act)
	}
	return nil
}

// rotations computes the rotary embeddings r asks for over n positions; the sliding layers take the local one.
func (m *model) rotations(r rotaries, n int) error {
	cfg := m.cfg
	if cfg.RopeByLayerType != nil && r.local == nil {
		return fmt.Errorf("rope_parameters nested by layer type are not implemented by the reference for %s", cfg.ModelType)
	}
	if r.global.Type == "longrope" && !r.longrope {
		return fmt.Errorf("rope type longrope is not implemented by the reference for %s", cfg.ModelType)
	}
	g, err := ropeFrequencies(r.global, cfg, n, r.partial)
	if err != nil {
		return err
	}
	m.ropes = []rotation{g}
	if r.local == nil {
		return nil
	}
	loc, err := ropeFrequencies(*r.local, cfg, n, false)
	if err != nil {
		return err
	}
	m.ropes = append(m.ropes, loc)
	for l := range cfg.NumHiddenLayers {
		if m.window[l] > 0 {
			m.rope[l] = 1
		}
	}
	return nil
}

// gemmaNormalizer is √hidden as transformers' Gemma multiplies the embeddings by it: a float32 value converted to
// the model's dtype (bf16 turns √3072 = 55.4256 into 55.5).
func gemmaNormalizer(hidden int, dtype string) (float64, error) {
	v := float32(math.Sqrt(float64(hidden)))
	switch dtype {
	case "float32":
		return float64(v), nil
	case "bfloat16": // 8 significant bits, to nearest even
		return roundBits(float64(v), 8), nil
	case "float16": // 11 significant bits
		return roundBits(float64(v), 11), nil
	}
	return 0, fmt.Errorf("Gemma's embedding scale in dtype %q is not implemented by the reference", dtype)
}

// roundBits rounds a positive v to the nearest number of bits significant bits (ties to even).
func roundBits(v float64, bits int) float64 {
	frac, exp := math.Frexp(v) // v = frac·2^exp, frac in [0.5, 1)
	return math.Ldexp(math.RoundToEven(math.Ldexp(frac, bits)), exp-bits)
}

// ropeFrequencies returns the rotation of a pass over n positions for the rope parameters r, for the rope types
// of transformers' modeling_rope_utils (default, linear, dynamic, yarn, llama3, longrope); partial says whether
// the family rotates part of each head (partial_rotary_factor).
func ropeFrequencies(r checkpoint.Rope, cfg *checkpoint.Config, n int, partial bool) (rotation, error) {
	d := float64(cfg.HeadDim)
	if f := r.PartialRotaryFactor; f != 0 && f != 1 {
		if !partial {
			return rotation{}, fmt.Errorf("partial_rotary_factor %g is not implemented by the reference for %s", f, cfg.ModelType)
		}
		d = float64(int(d * f))
	}
	theta := r.Theta
	if r.Type == "dynamic" { // NTK: the base grows with the sequence past max_position_embeddings
		maxPos := float64(cfg.MaxPositionEmbeddings)
		seq := math.Max(float64(n), maxPos)
		theta *= math.Pow(r.Factor*seq/maxPos-(r.Factor-1), d/(d-2))
	}
	inv := make([]float64, int(d)/2)
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
	case "longrope":
		// LongRoPE: each pair's wavelength stretched by its factor, the long ones for a pass past the
		// pre-training context; cos and sin scaled by √(1 + ln s / ln orig), s the context's growth.
		orig := r.OriginalMaxPositionEmbeddings
		ext := r.ShortFactor
		if n > orig {
			ext = r.LongFactor
		}
		if len(ext) != len(inv) {
			return rotation{}, fmt.Errorf("longrope factors: %d for %d rotated pairs", len(ext), len(inv))
		}
		for i := range inv {
			inv[i] /= ext[i]
		}
		s := float64(cfg.MaxPositionEmbeddings) / float64(orig)
		if r.Factor != 0 && r.Factor != s { // transformers 4 uses s, transformers 5 the factor
			return rotation{}, fmt.Errorf("longrope factor %g other than max_position_embeddings / original_max_position_embeddings is not implemented by the reference", r.Factor)
		}
		switch {
		case r.AttentionFactor != nil:
			scale = *r.AttentionFactor
		case s > 1:
			scale = math.Sqrt(1 + math.Log(s)/math.Log(float64(orig)))
		}
	default:
		return rotation{}, fmt.Errorf("rope type %q is not implemented by the reference", r.Type)
	}
	return rotation{invFreq: inv, scale: scale}, nil
}

// layerTensors lists the tensors of decoder layer l (full names) with their shapes.
func (m *model) layerTensors(l int) map[string][]int {
	if m.linear != nil {
		return m.hybridTensors(l)
	}
	if m.g4 != nil {
		return m.gemma4Tensors(l)
	}
	if m.latent != nil {
		return m.latentTensors(l)
	}
	c := m.cfg
	h, hd, nq, nkv, ff := c.HiddenSize, c.HeadDim, c.NumAttentionHeads, c.NumKeyValueHeads, m.denseInter
	p := fmt.Sprintf("model.layers.%d.", l)
	mlp := p + m.mlp + "."
	t := map[string][]int{p + "self_attn.o_proj.weight": {h, nq * hd}, mlp + "down_proj.weight": {h, ff}}
	if m.experts != nil {
		moe := map[string][]int{}
		if m.experts.tensors(l, h, moe) {
			delete(t, mlp+"down_proj.weight")
			for name, shape := range moe {
				t[p+name] = shape
			}
		}
	}
	sparse := m.experts != nil && m.experts.sparse[l]
	if m.fused {
		t[p+"self_attn.qkv_proj.weight"], t[p+"mlp.gate_up_proj.weight"] = []int{(nq + 2*nkv) * hd, h}, []int{2 * ff, h}
	} else {
		t[p+"self_attn.q_proj.weight"], t[p+"self_attn.k_proj.weight"], t[p+"self_attn.v_proj.weight"] = []int{nq * hd, h}, []int{nkv * hd, h}, []int{nkv * hd, h}
		if !sparse {
			t[mlp+"gate_proj.weight"], t[mlp+"up_proj.weight"] = []int{ff, h}, []int{ff, h}
		}
	}
	switch m.norms {
	case "pre":
		t[p+"input_layernorm.weight"], t[p+"post_attention_layernorm.weight"] = []int{h}, []int{h}
	case "post":
		t[p+"post_attention_layernorm.weight"], t[p+"post_feedforward_layernorm.weight"] = []int{h}, []int{h}
	case "both":
		t[p+"input_layernorm.weight"], t[p+"post_attention_layernorm.weight"] = []int{h}, []int{h}
		t[p+"pre_feedforward_layernorm.weight"], t[p+"post_feedforward_layernorm.weight"] = []int{h}, []int{h}
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
	if m.sinks {
		t[p+"self_attn.sinks"] = []int{nq}
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
	if m.g4 != nil {
		for name := range m.gemma4ModelTensors() {
			used[name] = true
		}
	}
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

// rotate turns each head of vec (heads × headDim values) by position pos with rotation r, rotate-half style:
// dimension i < k (k = len(r.invFreq)) pairs with i+k and turns by pos·invFreq[i]; cos and sin are scaled by
// r.scale; dimensions from 2k on pass unchanged (partial rotary).
func (m *model) rotate(vec []float64, heads, pos int, r rotation) {
	hd := m.cfg.HeadDim
	k := len(r.invFreq)
	for i, f := range r.invFreq {
		sin, cos := math.Sincos(float64(pos) * f)
		sin, cos = sin*r.scale, cos*r.scale
		for h := range heads {
			a, b := &vec[h*hd+i], &vec[h*hd+i+k]
			*a, *b = *a*cos-*b*sin, *b*cos+*a*sin
		}
	}
}

// norm is rmsNorm with the family's weight offset.
func (m *model) norm(x []float64, w []float32) []float64 {
	return rmsNorm(x, w, m.cfg.RMSNormEps, m.normOffset)
}

// capped is c·tanh(x/c), or x when c is 0.
func capped(x, c float64) float64 {
	if c == 0 {
		return x
	}
	return c * math.Tanh(x/c)
}

// activate applies the MLP's activation to the gate.
func (m *model) activate(g float64) float64 {
	switch m.act {
	case "gelu_tanh":
		return 0.5 * g * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(g+0.044715*g*g*g)))
	case "gelu":
		return 0.5 * g * (1 + math.Erf(g/math.Sqrt2))
	}
	return g / (1 + math.Exp(-g)) // silu
}

// layer updates the residual stream x (one row per position) in place with decoder layer l:
//
//	x += r·o_proj(attention(rope(norm(q)), rope(norm(k)), v))  on rmsnorm(x)    (pre-norm)
//	x += r·down(act(gate(h)) ⊙ up(h))                           with h = rmsnorm(x)
//
// or, post-norm (OLMo 2), x += rmsnorm(branch(x)) for each branch, or both (Gemma), x += rmsnorm(branch(rmsnorm(x)));
// r is Granite's residual multiplier (else 1). Attention scores are scaled, soft-capped (Gemma 2), then masked.
func (m *model) layer(l int, w *layerWeights, x [][]float64) {
	if m.linear != nil {
		m.hybridLayer(l, w, x)
		return
	}
	if m.g4 != nil {
		m.gemma4Layer(l, w, x)
		return
	}
	if m.latent != nil {
		m.latentLayer(l, w, x)
		return
	}
	cfg := m.cfg
	T, hd, nq, nkv := len(x), cfg.HeadDim, cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	in, add := m.branches(w, x)
	q, k, v := make([][]float64, T), make([][]float64, T), make([][]float64, T)
	parallel(T, func(p int) {
		q[p], k[p], v[p] = m.attentionInputs(l, p, w, in(p, "input_layernorm.weight"))
	})
	group := nq / nkv          // query heads per key/value head (grouped-query attention)
	first := func(p int) int { // the earliest position p attends to
		switch {
		case m.window[l] > 0:
			return max(0, p-m.window[l]+1)
		case m.chunk[l] > 0: // its chunk's first
			return p / m.chunk[l] * m.chunk[l]
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
				scores[t] = capped(s*m.attnScale, m.attnSoftCap)
				maxS = max(maxS, scores[t])
			}
			var sink float64
			if m.sinks { // one more score in the softmax, its weight dropped
				sink = float64(w.vec("self_attn.sinks")[h])
				maxS = max(maxS, sink)
			}
			var sum float64
			for t := first(p); t <= p; t++ {
				scores[t] = math.Exp(scores[t] - maxS)
				sum += scores[t]
			}
			if m.sinks {
				sum += math.Exp(sink - maxS)
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
	m.mlpBranch(l, w, x)
}

// attentionInputs is position p's queries, keys and values in layer l from its normalized input h: the
// projections (fused qkv_proj or not, with their biases), the q/k norms, rope and the query scale.
func (m *model) attentionInputs(l, p int, w *layerWeights, h []float64) (q, k, v []float64) {
	cfg := m.cfg
	hd, nq, nkv := cfg.HeadDim, cfg.NumAttentionHeads, cfg.NumKeyValueHeads
	q, k, v = make([]float64, nq*hd), make([]float64, nkv*hd), make([]float64, nkv*hd)
	if m.fused { // qkv_proj's rows: q, then k, then v
		qkv := make([]float64, (nq+2*nkv)*hd)
		linear(qkv, w.get("self_attn.qkv_proj.weight"), nil, h)
		copy(q, qkv[:nq*hd])
		copy(k, qkv[nq*hd:(nq+nkv)*hd])
		copy(v, qkv[(nq+nkv)*hd:])
	} else {
		linear(q, w.get("self_attn.q_proj.weight"), w.vec("self_attn.q_proj.bias"), h)
		linear(k, w.get("self_attn.k_proj.weight"), w.vec("self_attn.k_proj.bias"), h)
		linear(v, w.get("self_attn.v_proj.weight"), w.vec("self_attn.v_proj.bias"), h)
	}
	switch m.qkNorm {
	case "whole":
		q, k = m.norm(q, w.vec("self_attn.q_norm.weight")), m.norm(k, w.vec("self_attn.k_norm.weight"))
	case "head":
		for _, t := range []struct {
			vec   []float64
			heads int
			name  string
		}{{q, nq, "self_attn.q_norm.weight"}, {k, nkv, "self_attn.k_norm.weight"}} {
			for h := range t.heads {
				copy(t.vec[h*hd:(h+1)*hd], m.norm(t.vec[h*hd:(h+1)*hd], w.vec(t.name)))
			}
		}
	}
	if r := m.rope[l]; r >= 0 {
		m.rotate(q, nq, p, m.ropes[r])
		m.rotate(k, nkv, p, m.ropes[r])
		if m.qkNorm == "rotated" {
			for _, t := range []struct {
				vec   []float64
				heads int
			}{{q, nq}, {k, nkv}} {
				for h := range t.heads {
					copy(t.vec[h*hd:(h+1)*hd], rmsNorm(t.vec[h*hd:(h+1)*hd], nil, cfg.RMSNormEps, 0))
				}
			}
		}
	}
	if m.qScale != nil {
		for i := range q {
			q[i] *= m.qScale(l, p)
		}
	}
	return q, k, v
}

// branches are a layer's residual branches on x: in is a branch's input at position p (x, normalised by the
// named norm unless the family post-norms), add adds a branch's output (normalised by the named norm unless the
// family pre-norms, times the residual multiplier).
func (m *model) branches(w *layerWeights, x [][]float64) (in func(p int, name string) []float64, add func(p int, y []float64, name string)) {
	in = func(p int, name string) []float64 {
		if m.norms == "post" {
			return x[p]
		}
		return m.norm(x[p], w.vec(name))
	}
	add = func(p int, y []float64, name string) {
		if m.norms != "pre" {
			y = m.norm(y, w.vec(name))
		}
		for i := range y {
			x[p][i] += m.residual * y[i]
		}
	}
	return in, add
}

// mlpBranch adds layer l's MLP (dense, or its mixture of experts) to x.
func (m *model) mlpBranch(l int, w *layerWeights, x [][]float64) {
	cfg := m.cfg
	in, add := m.branches(w, x)
	preMLP, postMLP := "post_attention_layernorm.weight", "post_feedforward_layernorm.weight"
	if m.norms == "both" {
		preMLP = "pre_feedforward_layernorm.weight"
	}
	parallel(len(x), func(p int) {
		h := in(p, preMLP)
		if m.experts != nil && m.experts.sparse[l] {
			add(p, m.moe(w, h), postMLP)
			return
		}
		ff := m.denseInter
		g, u := make([]float64, ff), make([]float64, ff)
		if m.fused { // gate_up_proj's rows: gate, then up
			gu := make([]float64, 2*ff)
			linear(gu, w.get("mlp.gate_up_proj.weight"), nil, h)
			copy(g, gu[:ff])
			copy(u, gu[ff:])
		} else {
			linear(g, w.get(m.mlp+".gate_proj.weight"), w.vec(m.mlp+".gate_proj.bias"), h)
			linear(u, w.get(m.mlp+".up_proj.weight"), w.vec(m.mlp+".up_proj.bias"), h)
		}
		for i := range g {
			g[i] = m.activate(g[i]) * u[i]
		}
		d := make([]float64, cfg.HiddenSize)
		linear(d, w.get(m.mlp+".down_proj.weight"), w.vec(m.mlp+".down_proj.bias"), g)
		add(p, d, postMLP)
	})
}
