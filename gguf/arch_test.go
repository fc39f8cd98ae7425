package gguf

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/engine/model"
)

// openFamily parses a family fixture made by llama.cpp's converter (scripts/fixtures/gguf_families.py).
func openFamily(t *testing.T, name string) *File {
	t.Helper()
	return openTestdata(t, "families", name)
}

// openTestdata parses testdata/<dir>/<name>.gguf.
func openTestdata(t *testing.T, dir, name string) *File {
	t.Helper()
	g, err := Open(filepath.Join("testdata", dir, name+".gguf"))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// setKV sets a metadata key (appending it when absent), or removes it when v is nil.
func setKV(g *File, key string, v *Value) {
	if i, ok := g.kv[key]; ok {
		g.KVs = append(g.KVs[:i], g.KVs[i+1:]...)
	}
	if v != nil {
		g.KVs = append(g.KVs, KV{Key: key, Value: *v})
	}
	g.kv = map[string]int{}
	for i, kv := range g.KVs {
		g.kv[kv.Key] = i
	}
}

func f32(v float32) *Value { return &Value{Type: TypeFloat32, V: v} }

// TestQwen3HubMetadata: the keys a Qwen3 GGUF from the Hub carries (Qwen's and unsloth's files: general.*
// bookkeeping, the qwen2 pre-tokenizer, an importance-matrix record, yarn for the 128K variants; key_length
// other than hidden/heads as in Qwen3-0.6B and 4B) are all accepted and give a config the Qwen3 family runs.
func TestQwen3HubMetadata(t *testing.T) {
	g := openFamily(t, "qwen3")
	str := func(s string) *Value { return &Value{Type: TypeString, V: s} }
	u32 := func(v uint32) *Value { return &Value{Type: TypeUint32, V: v} }
	for k, v := range map[string]*Value{
		"general.basename": str("Qwen3"), "general.size_label": str("0.6B"), "general.license": str("apache-2.0"),
		"general.tags":                  {Type: TypeArray, Elem: TypeString, V: []string{"text-generation"}},
		"general.base_model.count":      u32(1),
		"general.base_model.0.repo_url": str("https://huggingface.co/Qwen/Qwen3-0.6B-Base"),
		"general.file_type":             u32(7), "general.quantization_version": u32(2),
		"qwen3.context_length":                       u32(131072),
		"qwen3.rope.freq_base":                       f32(1000000),
		"qwen3.rope.scaling.type":                    str("yarn"),
		"qwen3.rope.scaling.factor":                  f32(4),
		"qwen3.rope.scaling.original_context_length": u32(32768),
		"tokenizer.ggml.pre":                         str("qwen2"),
		"tokenizer.ggml.add_bos_token":               {Type: TypeBool, V: false},
		"tokenizer.ggml.padding_token_id":            u32(0),
		"quantize.imatrix.file":                      str("imatrix.dat"),
		"quantize.imatrix.entries_count":             u32(196),
	} {
		setKV(g, k, v)
	}
	ck, err := g.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Config
	if c.Arch.Name != "Qwen3ForCausalLM" || c.HeadDim != 32 || c.HiddenSize != 64 || c.NumAttentionHeads != 4 ||
		c.NumKeyValueHeads != 2 || c.Rope.Theta != 1000000 || c.Rope.Type != "yarn" || c.Rope.Factor != 4 ||
		c.MaxPositionEmbeddings != 131072 {
		t.Fatalf("config %+v", c)
	}
	if _, err := model.For(c); err != nil {
		t.Fatal(err)
	}
	for _, ti := range ck.Tensors {
		if ti.InterleavedRotaryHeads != 0 {
			t.Fatalf("%s marked as permuted: Qwen3's converter keeps Hugging Face's rotary order", ti.Name)
		}
	}
}

// TestGraniteMultipliers: the multipliers mean what llama.cpp's granite computes from them: absent or zero
// scales scale nothing, except the attention's, which falls back to 1/√head_dim; logit_scale is required.
func TestGraniteMultipliers(t *testing.T) {
	config := func(edit func(g *File)) (*checkpoint.Config, error) {
		g := openFamily(t, "granite")
		edit(g)
		ck, err := g.Checkpoint()
		if err != nil {
			return nil, err
		}
		return ck.Config, nil
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }
	c, err := config(func(*File) {})
	if err != nil {
		t.Fatal(err)
	}
	if !near(c.EmbeddingMultiplier, 6) || !near(c.ResidualMultiplier, 0.3) || !near(c.AttentionMultiplier, 0.15) ||
		!near(c.LogitsScaling, 4) || c.HeadDim != 16 {
		t.Fatalf("config %+v", c)
	}
	for _, v := range []*Value{nil, f32(0)} {
		c, err := config(func(g *File) {
			for _, k := range []string{"embedding_scale", "residual_scale", "attention.scale"} {
				setKV(g, "granite."+k, v)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if c.EmbeddingMultiplier != 1 || c.ResidualMultiplier != 1 || !near(c.AttentionMultiplier, 0.25) {
			t.Fatalf("scales %v: embedding %g residual %g attention %g; want 1, 1, 1/√16", v, c.EmbeddingMultiplier, c.ResidualMultiplier, c.AttentionMultiplier)
		}
	}
	for _, tc := range []struct {
		key  string
		v    *Value
		want string
	}{
		{"granite.logit_scale", nil, "granite.logit_scale is missing"},
		{"granite.logit_scale", f32(0), "divided by it"},
		{"granite.rope.scaling.finetuned", &Value{Type: TypeBool, V: false}, "without rotary embeddings"},
		{"granite.expert_shared_feed_forward_length", &Value{Type: TypeUint32, V: uint32(64)}, "expert_shared_feed_forward_length is not supported"},
	} {
		if _, err := config(func(g *File) { setKV(g, tc.key, tc.v) }); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%v: got %v, want an error containing %q", tc.key, tc.v, err, tc.want)
		}
	}
	if _, err := config(func(g *File) { setKV(g, "granite.rope.scaling.finetuned", &Value{Type: TypeBool, V: true}) }); err != nil {
		t.Errorf("rope.scaling.finetuned true: %v", err)
	}
	// llama.cpp's granite adds any bias the file has, as its llama does.
	c, err = config(func(g *File) {
		for _, n := range []string{"blk.0.attn_output.bias", "blk.0.ffn_down.bias"} {
			norm, _ := g.Tensor("output_norm.weight")
			norm.Name = n
			g.byName[n] = len(g.Tensors)
			g.Tensors = append(g.Tensors, norm)
		}
	})
	if err != nil || !c.AttentionBias || !c.MLPBias {
		t.Errorf("bias tensors: attention_bias %v, mlp_bias %v (%v)", c != nil && c.AttentionBias, c != nil && c.MLPBias, err)
	}
}

// TestOLMo2Mapping: OLMo 2's post-norms map to Hugging Face's, the shared pre-norm names are refused (ffn_norm
// would otherwise become post_attention_layernorm), q/k norms span the whole projection, and a sliding window
// makes the file OLMo 3 (TestOLMo3Config).
func TestOLMo2Mapping(t *testing.T) {
	a := archs["olmo2"]
	for gguf, want := range map[string]string{
		"blk.3.post_attention_norm.weight": "model.layers.3.post_attention_layernorm.weight",
		"blk.3.post_ffw_norm.weight":       "model.layers.3.post_feedforward_layernorm.weight",
		"blk.3.attn_q_norm.weight":         "model.layers.3.self_attn.q_norm.weight",
		"blk.3.ffn_norm.weight":            "",
		"blk.3.attn_norm.weight":           "",
	} {
		got, err := a.hfName(gguf)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("hfName(%q) = %q, %v; want %q", gguf, got, err, want)
		}
	}
	c := &checkpoint.Config{HiddenSize: 64, NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 16}
	for _, tc := range []struct {
		arch, name string
		shape      int64
	}{{"olmo2", "q_norm", 64}, {"olmo2", "k_norm", 32}, {"qwen3", "q_norm", 16}, {"qwen3", "k_norm", 16}} {
		hf := "model.layers.0.self_attn." + tc.name + ".weight"
		if err := archs[tc.arch].checkShape(hf, []int64{tc.shape}, c); err != nil {
			t.Errorf("%s %s [%d]: %v", tc.arch, tc.name, tc.shape, err)
		}
		if err := archs[tc.arch].checkShape(hf, []int64{tc.shape * 2}, c); err == nil {
			t.Errorf("%s %s [%d] accepted", tc.arch, tc.name, tc.shape*2)
		}
	}
	g := openFamily(t, "olmo2")
	setKV(g, "olmo2.attention.sliding_window", &Value{Type: TypeUint32, V: uint32(4096)})
	if ck, err := g.Checkpoint(); err != nil || ck.Config.Architectures[0] != "Olmo3ForCausalLM" {
		t.Errorf("sliding window: got %v, want OLMo 3", err)
	}
}
