package gguf

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/sections"
)

// IsGGUF reports whether path names a GGUF file: a regular file that starts with the GGUF magic.
func IsGGUF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return false
	}
	var m [4]byte
	_, err = io.ReadFull(f, m[:])
	return err == nil && string(m[:]) == Magic
}

// OpenCheckpoint opens a GGUF model file as a checkpoint: Hugging Face tensor names and shapes pointing at the
// file's bytes (quantized blocks kept as they are, q/k rows marked for reordering), a config derived from the
// metadata, and the generated config.json, generation_config.json, tokenizer.json and tokenizer_config.json
// (with the chat template) in Files, made when a split asks for them. Every tensor is mapped or refused by
// name, and so is every metadata key that changes the math; the tokenizer metadata is checked when Files makes
// tokenizer.json, which a split does before it writes anything.
//
// A model split over several files (PREFIX-00001-of-0000N.gguf ...) is opened by its first part, the others read
// from beside it (OpenModel): its tensors point into each part.
func OpenCheckpoint(path string) (*checkpoint.Checkpoint, error) {
	g, err := OpenModel(path)
	if err != nil {
		return nil, fmt.Errorf("%w (see %s)", err, sections.Anchor(sections.GGUF))
	}
	ck, err := g.Checkpoint()
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w (see %s)", path, err, sections.Anchor(sections.GGUF))
	}
	return ck, nil
}

// Checkpoint maps the parsed file to a checkpoint (see OpenCheckpoint).
func (g *File) Checkpoint() (*checkpoint.Checkpoint, error) {
	emb, ok := g.Tensor("token_embd.weight")
	if !ok {
		return nil, fmt.Errorf("no token_embd.weight tensor")
	}
	if len(emb.Dims) != 2 {
		return nil, fmt.Errorf("tensor token_embd.weight has %d dimensions, want 2", len(emb.Dims))
	}
	_, hasOutput := g.Tensor("output.weight")
	cfgJSON, cfg, err := g.metaConfig(!hasOutput, int(emb.Dims[1]))
	if err != nil {
		return nil, err
	}
	arch, _, _ := g.String("general.architecture")
	info := archs[arch]
	var tensors []checkpoint.TensorInfo
	var unread int
	blocks, _, _ := g.Int(arch + ".block_count")
	for _, t := range g.Tensors {
		if b, _, ok := layerOf(t.Name); ok && b >= cfg.NumHiddenLayers {
			// Blocks past the decoder's that the architecture's config left out (Qwen3.5's and GLM-4.5's
			// multi-token-prediction layers): never read nor split; a block past block_count is refused.
			if b < blocks {
				unread++
				continue
			}
		}
		ts, err := info.tensors(g, t, cfg)
		if err != nil {
			return nil, err
		}
		tensors = append(tensors, ts...)
	}
	if unread > 0 {
		slog.Info("gguf: leaving out the blocks after the decoder's (multi-token prediction), which transformers does not compute either",
			"architecture", arch, "tensors", unread, "layers", cfg.NumHiddenLayers)
	}
	slices.SortStableFunc(tensors, func(a, b checkpoint.TensorInfo) int {
		switch {
		case a.Offset < b.Offset:
			return -1
		case a.Offset > b.Offset:
			return 1
		}
		return 0
	})
	gen, genJSON, err := g.generationConfig()
	if err != nil {
		return nil, err
	}
	files := func() (map[string][]byte, error) {
		tok, tokCfg, tmpl, err := g.TokenizerFiles()
		if err != nil {
			return nil, fmt.Errorf("gguf %s: %w (see %s)", g.Path, err, sections.Anchor(sections.GGUF))
		}
		files := map[string][]byte{"config.json": cfgJSON, "generation_config.json": genJSON,
			"tokenizer.json": tok, "tokenizer_config.json": tokCfg}
		if tmpl != "" {
			files["chat_template.jinja"] = []byte(tmpl)
		}
		return files, nil
	}
	return checkpoint.New(g.Path, cfg, gen, tensors, files)
}

// tensors maps the file g's tensor t to the checkpoint's: none for a tensor that carries configuration
// (configTensors), one per expert for fused experts, else t
// under its Hugging Face name, its shape checked against cfg, marked for reordering where llama.cpp's converter
// changed its rows or values.
func (info archInfo) tensors(g *File, t TensorInfo, cfg *checkpoint.Config) ([]checkpoint.TensorInfo, error) {
	if slices.Contains(info.configTensors, t.Name) {
		return nil, nil
	}
	ct := checkpoint.TensorInfo{DType: checkpoint.DTypeOf(t.Type), Shape: t.Shape(), File: t.Path,
		Offset: t.Offset, Length: t.Size}
	if n, part, ok := layerOf(t.Name); ok {
		experts, fused, err := info.moeTensors(g, t, ct, fmt.Sprintf("model.layers.%d.", n), part)
		if err != nil || fused {
			for _, e := range experts {
				if err := info.checkShape(e.Name, e.Shape, cfg); err != nil && !info.layerShapes {
					return nil, fmt.Errorf("tensor %q (%s): %w", t.Name, e.Name, err)
				}
			}
			return experts, err
		}
	}
	hf, err := info.hfName(t.Name)
	if err != nil {
		return nil, err
	}
	ct.Name = hf
	if strings.HasSuffix(hf, ".shared_expert_gate.weight") && len(ct.Shape) == 1 {
		ct.Shape = []int64{1, ct.Shape[0]} // llama.cpp's ffn_gate_inp_shexp is a vector: one output row
	}
	if err := info.checkShape(hf, ct.Shape, cfg); err != nil && !info.layerShapes {
		return nil, fmt.Errorf("tensor %q (%s): %w", t.Name, hf, err)
	}
	if info.interleavedRotary {
		ct.InterleavedRotaryHeads = isRotaryRows(hf, cfg.NumAttentionHeads, cfg.NumKeyValueHeads)
	}
	if info.tensor != nil {
		if err := info.tensor(&ct); err != nil {
			return nil, fmt.Errorf("tensor %q (%s): %w", t.Name, hf, err)
		}
	}
	plain := slices.ContainsFunc(info.plainNorms, func(s string) bool { return strings.HasSuffix(hf, s) })
	if info.normsPlusOne && strings.HasSuffix(hf, "norm.weight") && !plain {
		if ct.DType != checkpoint.F32 && ct.DType != checkpoint.BF16 && ct.DType != checkpoint.F16 {
			return nil, fmt.Errorf("tensor %q is %s: llama.cpp's converter stores this norm's weights plus 1, which layerstream subtracts back from float32, bfloat16 or float16 values only", t.Name, ct.DType)
		}
		ct.Shift = -1
	}
	return []checkpoint.TensorInfo{ct}, nil
}

// checkShape checks a tensor's Hugging Face shape against the config, so a file whose tensors disagree with
// its metadata is refused before any work.
func (a archInfo) checkShape(hf string, shape []int64, c *checkpoint.Config) error {
	h, q, kv, ff := int64(c.HiddenSize), int64(c.NumAttentionHeads*c.HeadDim), int64(c.NumKeyValueHeads*c.HeadDim), int64(c.IntermediateSize)
	want := moeShape(hf, c)
	switch {
	case want != nil:
	case hf == "model.embed_tokens.weight", hf == "lm_head.weight":
		want = []int64{int64(c.VocabSize), h}
	case strings.HasSuffix(hf, ".self_attn.q_norm.weight"), strings.HasSuffix(hf, ".self_attn.k_norm.weight"):
		want = []int64{int64(c.HeadDim)} // one norm over each head (Qwen3, Gemma 3)
		if a.qkNormWhole {
			want = []int64{kv}
			if strings.HasSuffix(hf, "q_norm.weight") {
				want = []int64{q}
			}
		}
	case strings.HasSuffix(hf, "norm.weight"):
		want = []int64{h}
	case strings.HasSuffix(hf, "q_proj.weight"):
		want = []int64{q, h}
	case strings.HasSuffix(hf, ".qkv_proj.weight"):
		want = []int64{q + 2*kv, h}
	case strings.HasSuffix(hf, "k_proj.weight"), strings.HasSuffix(hf, "v_proj.weight"):
		want = []int64{kv, h}
	case strings.HasSuffix(hf, "o_proj.weight"):
		want = []int64{h, q}
	case strings.HasSuffix(hf, "q_proj.bias"):
		want = []int64{q}
	case strings.HasSuffix(hf, "k_proj.bias"), strings.HasSuffix(hf, "v_proj.bias"):
		want = []int64{kv}
	case strings.HasSuffix(hf, "o_proj.bias"), strings.HasSuffix(hf, "down_proj.bias"):
		want = []int64{h}
	case strings.HasSuffix(hf, "gate_proj.bias"), strings.HasSuffix(hf, "up_proj.bias"):
		want = []int64{ff}
	case strings.HasSuffix(hf, ".gate_up_proj.weight"):
		want = []int64{2 * ff, h}
	case strings.HasSuffix(hf, "gate_proj.weight"), strings.HasSuffix(hf, "up_proj.weight"):
		want = []int64{ff, h}
	case strings.HasSuffix(hf, "down_proj.weight"):
		want = []int64{h, ff}
	}
	if !slices.Equal(shape, want) {
		return fmt.Errorf("shape %v, the metadata implies %v", shape, want)
	}
	return nil
}

// eogTexts are the token texts llama.cpp treats as end of generation (llama-vocab.cpp), besides the ids the
// metadata names.
var eogTexts = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
	"<|end_of_text|>", "<EOT>"}

// generationConfig makes generation_config.json: BOS, and as stop tokens llama.cpp's end-of-generation set
// (tokenizer.ggml.eos/eot/eom_token_id and the control tokens whose text llama.cpp recognizes).
func (g *File) generationConfig() (*checkpoint.GenerationConfig, []byte, error) {
	gen := map[string]any{}
	var eog []int
	add := func(id int) {
		if !slices.Contains(eog, id) {
			eog = append(eog, id)
		}
	}
	for _, k := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		if v, ok, err := g.Int(k); err != nil {
			return nil, nil, err
		} else if ok {
			add(v)
		}
	}
	tokens, _, err := g.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return nil, nil, err
	}
	types, _, err := g.Ints("tokenizer.ggml.token_type")
	if err != nil {
		return nil, nil, err
	}
	for id, t := range tokens {
		if id < len(types) && types[id] == tokenControl && slices.Contains(eogTexts, t) {
			add(id)
		}
	}
	if v, ok, err := g.Int("tokenizer.ggml.bos_token_id"); err != nil {
		return nil, nil, err
	} else if ok {
		gen["bos_token_id"] = v
	}
	if len(eog) > 0 {
		gen["eos_token_id"] = eog
	}
	if v, ok, err := g.Int("tokenizer.ggml.padding_token_id"); err != nil {
		return nil, nil, err
	} else if ok {
		gen["pad_token_id"] = v
	}
	b, err := json.MarshalIndent(gen, "", "  ")
	if err != nil {
		return nil, nil, err
	}
	var gc checkpoint.GenerationConfig
	if err := json.Unmarshal(b, &gc); err != nil {
		return nil, nil, err
	}
	return &gc, append(b, '\n'), nil
}
