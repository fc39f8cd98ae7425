package gguf

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
)

// archInfo is what layerstream knows of a GGUF architecture. Each architecture registers itself from its own
// file (arch_<name>.go) with register.
type archInfo struct {
	hf string // the Hugging Face architectures entry (and the family layerstream computes it with)
	// nextn: the blocks past block_count - nextn_predict_layers are multi-token-prediction layers, which llama.cpp
	// computes only for its speculative drafts (GLM-4.5, Qwen3.5) and transformers not at all: their tensors are
	// left out; nextnKey, when set, is the config key that records how many there were. Elsewhere the key is
	// refused.
	nextn    bool
	nextnKey string
	// interleavedRotary: llama.cpp's converter reorders the rows of q/k so rotary pairs are adjacent (the
	// "normal" rope layout); layerstream undoes it to get Hugging Face's rotate-half layout back.
	interleavedRotary bool
	// normsPlusOne: llama.cpp's converter stores the weights w of norms Hugging Face applies as x·(1 + w) (Gemma's)
	// as 1 + w; layerstream subtracts 1 back on reading (checkpoint.TensorInfo.Shift).
	normsPlusOne bool
	// partialRotary: rope.dimension_count below the head dimension rotates the first dimensions of each head
	// (in Hugging Face's rotate-half order), written as partial_rotary_factor; elsewhere it is refused.
	partialRotary bool
	// names maps this architecture's own per-layer tensors (blk.N.<name>) to Hugging Face's (model.layers.N.
	// <name>), besides the Llama ones every architecture shares (layerNames); an entry here overrides a shared
	// one, and "" refuses it (a shared name the architecture does not have, e.g. OLMo 2's pre-norms).
	names map[string]string
	// qkNormWhole: the q/k norms (attn_q_norm, attn_k_norm) span the whole projection ([heads·head_dim], OLMo 2)
	// rather than one head ([head_dim], Qwen3).
	qkNormWhole bool
	// keys are this architecture's own "<arch>." metadata keys (besides knownArchKeys), each read by config
	// or not changing the math.
	keys []string
	// configTensors are global tensors that carry configuration, not weights (llama's rope_freqs.weight, phi3's
	// longrope factors): config reads them, and they are not streamed.
	configTensors []string
	// config, when set, reads the architecture's own metadata into config.json (Hugging Face's spelling), after
	// the shared keys are in cfg. It refuses, by name, what layerstream does not implement.
	config func(m archMeta, cfg map[string]any) error
	// moe, for an architecture with routed experts, names them (moe.go); nil refuses expert_count.
	moe *moeInfo
	// globals maps this architecture's own global tensors to Hugging Face's names, besides globalNames.
	globals map[string]string
	// layerArrays: feed_forward_length and attention.head_count_kv may give one value per layer; the shared code
	// reads layer 0's, and config the others.
	layerArrays bool
	// layerShapes: the layers' shapes differ by layer (Gemma 4's full layers), so the tensors are checked
	// against the engine's plan (weightStore.checkTensors) rather than against the config here.
	layerShapes bool
	// latent: multi-head latent attention (deepseek2): attention.key_length, value_length and
	// rope.dimension_count describe the latent rather than a head, and config reads them.
	latent bool
	// plainNorms are the Hugging Face name suffixes of norms normsPlusOne leaves as stored (Qwen3.5's gated
	// ssm_norm, which Hugging Face applies as x·w).
	plainNorms []string
	// tensor, when set, adjusts a mapped tensor (its Hugging Face name set) to the architecture's storage: a
	// transform on reading, a shape.
	tensor func(ct *checkpoint.TensorInfo) error
}

// archMeta reads one architecture's metadata: key("x") is "<arch>.x".
type archMeta struct {
	*File
	arch string
}

func (m archMeta) key(k string) string { return m.arch + "." + k }

var archs = map[string]archInfo{}

// register adds a GGUF architecture; the arch_*.go files call it from init.
func register(name string, a archInfo) {
	if _, dup := archs[name]; dup {
		panic("gguf: architecture " + name + " registered twice")
	}
	archs[name] = a
}

// knownArchKeys are the "<arch>." metadata keys every architecture shares, which layerstream implements or that
// do not change the math; any other key under the architecture's prefix, unless the architecture lists it in
// its keys, is refused by name.
var knownArchKeys = map[string]bool{
	"vocab_size": true, "context_length": true, "embedding_length": true, "block_count": true,
	"feed_forward_length": true, "attention.head_count": true, "attention.head_count_kv": true,
	"attention.layer_norm_rms_epsilon": true, "attention.key_length": true, "attention.value_length": true,
	"rope.dimension_count": true, "rope.freq_base": true, "rope.scaling.type": true, "rope.scaling.factor": true,
	"rope.scaling.original_context_length": true, "rope.scaling.finetuned": true, "rope.scale_linear": true,
	"expert_count": true, "expert_used_count": true, "expert_group_count": true, "expert_group_used_count": true,
	"nextn_predict_layers": true, "attention.causal": true, "attention.sliding_window": true,
	"pooling_type": true, "rope.scaling.yarn_beta_fast": true, "rope.scaling.yarn_beta_slow": true,
	"rope.scaling.attn_factor": true,
}

// knownPrefixes are metadata namespaces that do not change the forward pass.
var knownPrefixes = []string{"general.", "tokenizer.", "quantize.", "split."}

// metaConfig builds config.json (Hugging Face spelling) from the metadata, refusing by name every key that
// changes the math and is not implemented. It returns the JSON and the parsed, validated config.
func (g *File) metaConfig(tied bool, vocabFromTensors int) ([]byte, *checkpoint.Config, error) {
	arch, info, err := g.architecture()
	if err != nil {
		return nil, nil, err
	}
	cfg := map[string]any{"architectures": []string{info.hf}, "model_type": arch, "hidden_act": "silu",
		"tie_word_embeddings": tied}
	for _, step := range []func() error{
		func() error { return g.sizes(arch, info, vocabFromTensors, cfg) },
		func() error { return g.normAndRope(arch, cfg) },
		func() error { return g.moeConfig(arch, info, cfg) },
		func() error { return g.attentionKind(arch, cfg) },
		func() error { return g.tokenIDs(cfg) },
	} {
		if err := step(); err != nil {
			return nil, nil, err
		}
	}
	if info.config != nil {
		if err := info.config(archMeta{g, arch}, cfg); err != nil {
			return nil, nil, err
		}
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, nil, fmt.Errorf("derived config.json: %w", err)
	}
	c, err := checkpoint.ParseConfig(b)
	if err != nil {
		return nil, nil, fmt.Errorf("derived config.json: %w", err)
	}
	return append(b, '\n'), c, nil
}

// architecture is the file's general.architecture and what layerstream knows of it, once the file is found to be
// a whole model whose every metadata key is implemented or does not change the math.
func (g *File) architecture() (string, archInfo, error) {
	arch, _, err := g.String("general.architecture")
	if err != nil {
		return "", archInfo{}, err
	}
	if arch == "" {
		return "", archInfo{}, fmt.Errorf("no general.architecture")
	}
	info, ok := archs[arch]
	if !ok {
		names := slices.Sorted(maps.Keys(archs))
		return "", archInfo{}, fmt.Errorf("general.architecture %q is not supported (supported: %s)", arch, strings.Join(names, ", "))
	}
	if t, ok, err := g.String("general.type"); err != nil {
		return "", archInfo{}, err
	} else if ok && t != "model" {
		return "", archInfo{}, fmt.Errorf("general.type is %q: only model files are supported (not adapters or projectors)", t)
	}
	if n, ok, err := g.Uint("split.count"); err != nil {
		return "", archInfo{}, err
	} else if ok && n > 1 && len(g.Parts) != int(n) {
		return "", archInfo{}, fmt.Errorf("split.count is %d: a part of a model split over several GGUF files, read alone (OpenModel reads them all)", n)
	}
	for _, kv := range g.KVs {
		if rest, ok := strings.CutPrefix(kv.Key, arch+"."); ok {
			if !knownArchKeys[rest] && !slices.Contains(info.keys, rest) {
				return "", archInfo{}, fmt.Errorf("metadata %s is not supported (it changes the model's math in llama.cpp; layerstream does not implement it)", kv.Key)
			}
			continue
		}
		if !slices.ContainsFunc(knownPrefixes, func(p string) bool { return strings.HasPrefix(kv.Key, p) }) {
			return "", archInfo{}, fmt.Errorf("metadata %s is not supported (unknown key outside the %s. namespace)", kv.Key, arch)
		}
	}
	return arch, info, nil
}

// sizes sets the model's dimensions: widths, layers, heads and their sizes, context and vocabulary (the token
// embedding's rows, vocab, which a vocab_size key must agree with).
func (g *File) sizes(arch string, info archInfo, vocab int, cfg map[string]any) error {
	key := func(k string) string { return arch + "." + k }
	for hf, k := range map[string]string{"hidden_size": "embedding_length", "intermediate_size": "feed_forward_length",
		"num_hidden_layers": "block_count", "num_attention_heads": "attention.head_count"} {
		v, ok, err := g.Int(key(k))
		if info.layerArrays && k == "feed_forward_length" {
			v, err = g.layer0(key(k), true) // an array of per-layer widths: required, so present when no error
			ok = true
		}
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("metadata %s is missing", key(k))
		}
		cfg[hf] = v
	}
	heads, hidden := cfg["num_attention_heads"].(int), cfg["hidden_size"].(int)
	kvHeads := heads
	if v, ok, err := g.Int(key("attention.head_count_kv")); err != nil && !info.layerArrays {
		return err
	} else if ok && err == nil {
		kvHeads = v
	} else if ok {
		if kvHeads, err = g.layer0(key("attention.head_count_kv"), false); err != nil {
			return err
		}
	}
	cfg["num_key_value_heads"] = kvHeads
	if heads == 0 {
		return fmt.Errorf("metadata %s is 0", key("attention.head_count"))
	}
	if !info.latent {
		if err := g.headDims(arch, info, hidden/heads, cfg); err != nil {
			return err
		}
	}
	cfg["max_position_embeddings"] = 2048
	if v, ok, err := g.Int(key("context_length")); err != nil {
		return err
	} else if ok {
		cfg["max_position_embeddings"] = v
	}
	if v, ok, err := g.Int(key("vocab_size")); err != nil {
		return err
	} else if ok && v != vocab {
		return fmt.Errorf("metadata %s is %d, token_embd.weight has %d rows", key("vocab_size"), v, vocab)
	}
	cfg["vocab_size"] = vocab
	return nil
}

// normAndRope sets the norms' epsilon (required, as llama.cpp requires it) and the rotary embedding.
func (g *File) normAndRope(arch string, cfg map[string]any) error {
	key := func(k string) string { return arch + "." + k }
	eps, ok, err := g.PositiveFloat(key("attention.layer_norm_rms_epsilon"))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("metadata %s is missing (llama.cpp requires it)", key("attention.layer_norm_rms_epsilon"))
	}
	cfg["rms_norm_eps"] = float32JSON(eps)
	theta := 10000.0
	if v, ok, err := g.PositiveFloat(key("rope.freq_base")); err != nil {
		return err
	} else if ok {
		theta = v
	}
	cfg["rope_theta"] = float32JSON(theta)
	return g.ropeScaling(arch, cfg)
}

// attentionKind refuses what is no causal language model and sets the sliding window.
func (g *File) attentionKind(arch string, cfg map[string]any) error {
	key := func(k string) string { return arch + "." + k }
	// llama.cpp's pooling types: 0 none (a language model), 1 mean, 2 cls, 3 last, 4 rank. A pooled file is an
	// embedding or reranking model (Qwen3-Embedding: causal, but without a language-model head), whose "text"
	// would be the tied embeddings' guess.
	if v, ok, err := g.Int(key("pooling_type")); err != nil {
		return err
	} else if ok && v != 0 {
		return fmt.Errorf("metadata %s is %d: an embedding or reranking model (pooled outputs), not a language model layerstream can generate text with", key("pooling_type"), v)
	}
	if v, ok, err := g.Bool(key("attention.causal")); err != nil {
		return err
	} else if ok && !v {
		return fmt.Errorf("metadata %s is false: non-causal (embedding) models are not supported", key("attention.causal"))
	}
	if v, ok, err := g.Int(key("attention.sliding_window")); err != nil {
		return err
	} else if ok && v > 0 {
		cfg["sliding_window"] = v
	}
	return nil
}

// tokenIDs sets the beginning and end token ids the tokenizer metadata names.
func (g *File) tokenIDs(cfg map[string]any) error {
	for hf, k := range map[string]string{"bos_token_id": "tokenizer.ggml.bos_token_id", "eos_token_id": "tokenizer.ggml.eos_token_id"} {
		if v, ok, err := g.Int(k); err != nil {
			return err
		} else if ok {
			cfg[hf] = v
		}
	}
	return nil
}

// layer0 reads an integer or the first of an array of them (a per-layer value); required: refuse it absent.
func (g *File) layer0(key string, required bool) (int, error) {
	if v, ok, err := g.Int(key); err == nil && (ok || !required) {
		return v, nil
	}
	v, ok, err := g.Ints(key)
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return 0, fmt.Errorf("metadata %s is missing", key)
	case len(v) == 0:
		return 0, fmt.Errorf("metadata %s is an empty array", key)
	}
	return v[0], nil
}

// ropeScaling reads the rope.scaling.* keys (and the older rope.scale_linear) into config.json's rope_scaling,
// in Hugging Face's spelling, so the engine implements or refuses it like any checkpoint's.
func (g *File) ropeScaling(arch string, cfg map[string]any) error {
	key := func(k string) string { return arch + "." + k }
	typ, _, err := g.String(key("rope.scaling.type"))
	if err != nil {
		return err
	}
	factor, hasFactor, err := g.Float(key("rope.scaling.factor"))
	if err != nil {
		return err
	}
	if lin, ok, err := g.Float(key("rope.scale_linear")); err != nil {
		return err
	} else if ok && lin != 1 {
		if typ != "" && typ != "linear" {
			return fmt.Errorf("metadata %s and %s=%q disagree", key("rope.scale_linear"), key("rope.scaling.type"), typ)
		}
		typ, factor, hasFactor = "linear", lin, true
	}
	// The yarn ramp bounds: llama.cpp uses 32 and 1 for every architecture layerstream reads, whatever the file
	// says (only its Grok and DeepSeek loaders read these keys), so a file saying otherwise is refused rather than
	// guessed. attn_factor: llama.cpp reads it for every architecture and multiplies cos and sin by it, which only
	// phi3's mapping implements (an architecture listing a key in its keys reads it itself).
	for _, c := range []struct {
		key, why string
		def      float64
	}{
		{"rope.scaling.yarn_beta_fast", "llama.cpp uses 32 for this architecture whatever the file says", 32},
		{"rope.scaling.yarn_beta_slow", "llama.cpp uses 1 for this architecture whatever the file says", 1},
		{"rope.scaling.attn_factor", "llama.cpp multiplies cos and sin by it, which layerstream implements for phi3 files only", 1},
	} {
		if slices.Contains(archs[arch].keys, c.key) {
			continue
		}
		if v, ok, err := g.Float(key(c.key)); err != nil {
			return err
		} else if ok && v != c.def {
			return fmt.Errorf("metadata %s is %g: only %g is supported (%s)", key(c.key), v, c.def, c.why)
		}
	}
	// llama.cpp reads a missing type as linear, and a factor of 0 (or none) as no scaling.
	if typ == "" && hasFactor && factor != 0 {
		typ = "linear"
	}
	if typ == "linear" && hasFactor && factor == 0 {
		typ = "none"
	}
	switch typ {
	case "", "none":
		return nil
	case "linear", "yarn":
		if !hasFactor {
			return fmt.Errorf("metadata %s is %q but %s is missing", key("rope.scaling.type"), typ, key("rope.scaling.factor"))
		}
		rs := map[string]any{"rope_type": typ, "factor": factor}
		if v, ok, err := g.Int(key("rope.scaling.original_context_length")); err != nil {
			return err
		} else if ok {
			rs["original_max_position_embeddings"] = v
		}
		cfg["rope_scaling"] = rs
		return nil
	}
	return fmt.Errorf("metadata %s %q is not supported (supported: none, linear, yarn)", key("rope.scaling.type"), typ)
}

// float32JSON spells a metadata float (a float32) as the shortest decimal that reads back as it.
func float32JSON(v float64) json.Number {
	return json.Number(strconv.FormatFloat(v, 'g', -1, 32))
}

// headDims reads the head dimension (attention.key_length, default hidden / heads), refuses a value_length that
// differs from it, and reads rope.dimension_count (partial rotary where the architecture has it).
func (g *File) headDims(arch string, info archInfo, headDim int, cfg map[string]any) error {
	key := func(k string) string { return arch + "." + k }
	if v, ok, err := g.Int(key("attention.key_length")); err != nil {
		return err
	} else if ok {
		headDim = v
	}
	if v, ok, err := g.Int(key("attention.value_length")); err != nil {
		return err
	} else if ok && v != headDim {
		return fmt.Errorf("metadata %s (%d) differs from the key length (%d): not supported", key("attention.value_length"), v, headDim)
	}
	cfg["head_dim"] = headDim
	if v, ok, err := g.Int(key("rope.dimension_count")); err != nil {
		return err
	} else if ok && v != headDim {
		// The factor must give v back as Hugging Face computes the rotated dimensions: int(head_dim * factor).
		f := float64(v) / float64(headDim)
		if !info.partialRotary || v <= 0 || v > headDim || v%2 != 0 || int(float64(headDim)*f) != v {
			return fmt.Errorf("metadata %s is %d, the head dimension %d: partial rotary embeddings are not supported", key("rope.dimension_count"), v, headDim)
		}
		cfg["partial_rotary_factor"] = f
	}
	return nil
}
