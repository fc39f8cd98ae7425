package gguf

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/hffixture"
)

// TestNewFamiliesTensors: each GGUF file llama.cpp's converter made of an issue #35 fixture (OLMo 3, Ministral
// 3, Gemma 4 with experts) opens as the transformers checkpoint it came from: the same architecture, the same
// tensor names and shapes, and the same values once reading undoes the converter's changes (q/k rows in rotary
// pairs, fused experts cut), bit for bit.
func TestNewFamiliesTensors(t *testing.T) {
	for _, name := range []string{"olmo3", "ministral3", "gemma4_text-moe"} {
		t.Run(name, func(t *testing.T) {
			ck, hf := familyCheckpoints(t, name)
			if !slices.Equal(ck.Config.Architectures, hf.Config.Architectures) {
				t.Fatalf("architectures %v, transformers' %v", ck.Config.Architectures, hf.Config.Architectures)
			}
			names := func(c *checkpoint.Checkpoint) []string {
				var n []string
				for _, ti := range c.Tensors {
					n = append(n, ti.Name)
				}
				return slices.Sorted(slices.Values(n))
			}
			if got, want := names(ck), names(hf); !slices.Equal(got, want) {
				t.Fatalf("tensors %v, transformers' %v", got, want)
			}
			for _, ti := range ck.Tensors {
				w, _ := hf.Tensor(ti.Name)
				if !slices.Equal(ti.Shape, w.Shape) {
					t.Errorf("%s: shape %v, transformers' %v", ti.Name, ti.Shape, w.Shape)
					continue
				}
				got, err := ck.ReadF32(ti.Name)
				if err != nil {
					t.Fatal(err)
				}
				want, err := hf.ReadF32(ti.Name)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("%s[%d] reads %g, transformers' %g", ti.Name, i, got[i], want[i])
					}
				}
			}
		})
	}
}

// familyCheckpoints opens the family GGUF file of the transformers fixture name as a checkpoint, and the fixture.
func familyCheckpoints(t *testing.T, name string) (ck, hf *checkpoint.Checkpoint) {
	t.Helper()
	ck, err := openFamily(t, name).Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := hffixture.Dir(name)
	if err != nil {
		t.Fatal(err)
	}
	if hf, err = checkpoint.Open(dir); err != nil {
		t.Fatal(err)
	}
	return ck, hf
}

// TestOLMo3Config: an olmo2 file with a sliding window is OLMo 3 (layer types from the pattern, yarn on the
// full-attention layers only); the keys llama.cpp's olmo2 graph reads but does not apply are refused when they
// would change the model.
func TestOLMo3Config(t *testing.T) {
	ck, err := openFamily(t, "olmo3").Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Config
	if want := []string{"sliding_attention", "sliding_attention", "sliding_attention", "full_attention"}; !slices.Equal(c.LayerTypes, want) || *c.SlidingWindow != 8 {
		t.Errorf("layer types %v, window %v", c.LayerTypes, c.SlidingWindow)
	}
	if full, sliding := c.RopeByLayerType["full_attention"], c.RopeByLayerType["sliding_attention"]; full.Type != "yarn" || full.Factor != 4 || sliding.Type != "default" || sliding.Theta != full.Theta {
		t.Errorf("rope by layer type %+v", c.RopeByLayerType)
	}
	checkRefusals(t, "olmo3", []refusal{
		{map[string]*Value{"olmo2.rope.freq_base_swa": {Type: TypeFloat32, V: float32(10000)}}, "olmo2.rope.freq_base_swa is 10000"},
		{map[string]*Value{"olmo2.attention.sliding_window_pattern": {Type: TypeArray, V: []bool{true, false}}}, "has 2 entries for 4 layers"},
	})
	g := openFamily(t, "olmo2")
	setKV(g, "olmo2.rope.freq_base_swa", &Value{Type: TypeFloat32, V: float32(10000)})
	if _, err := g.Checkpoint(); err == nil || !strings.Contains(err.Error(), "set without a sliding window") {
		t.Errorf("olmo2 with freq_base_swa: got %v", err)
	}
}

// TestMistral3Config: temperature_scale is Ministral 3's llama_4_scaling_beta over the yarn rope's original
// context, yarn_log_multiplier its mscale_all_dim; without a temperature scale the file is Mistral's decoder;
// what llama.cpp's mistral3 graph ignores is refused when set.
func TestMistral3Config(t *testing.T) {
	ck, err := openFamily(t, "ministral3").Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	r := ck.Config.Rope
	if r.Type != "yarn" || r.Llama4ScalingBeta == nil || math.Abs(*r.Llama4ScalingBeta-0.1) > 1e-7 || r.OriginalMaxPositionEmbeddings != 16 || r.Mscale != 1 || r.MscaleAllDim != 1 {
		t.Errorf("rope %+v", r)
	}
	g := openFamily(t, "ministral3")
	setKV(g, "mistral3.attention.temperature_scale", nil)
	if ck, err := g.Checkpoint(); err != nil || ck.Config.Architectures[0] != "MistralForCausalLM" {
		t.Errorf("without a temperature scale: %v", err)
	}
	checkRefusals(t, "ministral3", []refusal{
		{map[string]*Value{"mistral3.attention.sliding_window": {Type: TypeUint32, V: uint32(4096)}}, "ignores it"},
		{map[string]*Value{"mistral3.rope.scaling.type": {Type: TypeString, V: "none"}}, "without yarn rope scaling"},
		{map[string]*Value{"mistral3.attention.scale": {Type: TypeFloat32, V: float32(0.5)}}, "mistral3.attention.scale is not supported"},
	})
}

// TestGemma4MoEConfig: a gemma4 file with experts is Gemma 4 with enable_moe_block, its widths and counts read;
// the experts' width without experts, or experts without it, is refused.
func TestGemma4MoEConfig(t *testing.T) {
	ck, err := openFamily(t, "gemma4_text-moe").Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if c := ck.Config; !c.EnableMoEBlock || c.NumExperts != 4 || c.TopKExperts != 2 || c.MoEIntermediateSize != 24 {
		t.Errorf("config %+v", c)
	}
	checkRefusals(t, "gemma4_text-moe", []refusal{
		{map[string]*Value{"gemma4.expert_feed_forward_length": nil}, "gemma4.expert_feed_forward_length is missing"},
	})
	checkRefusals(t, "gemma4_text", []refusal{
		{map[string]*Value{"gemma4.expert_feed_forward_length": {Type: TypeUint32, V: uint32(24)}}, "without gemma4.expert_count"},
	})
}

// TestQwen35MoEConfig: a qwen35moe file is Qwen3.5-MoE with its experts' widths and counts, llama.cpp's tiled
// value heads, and every expert cut from the fused tensors; a file without experts is refused by name.
func TestQwen35MoEConfig(t *testing.T) {
	ck, err := openFamily(t, "qwen3_5_moe").Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Config
	if c.Architectures[0] != "Qwen3_5MoeForCausalLM" || c.NumExperts != 8 || c.NumExpertsPerTok != 2 || c.MoEIntermediateSize != 32 ||
		c.SharedExpertIntermediateSize != 48 || !c.LinearTiledValueHeads {
		t.Errorf("config %+v", c)
	}
	if _, ok := ck.Tensor("model.layers.3.mlp.experts.7.down_proj.weight"); !ok {
		t.Error("expert 7 of layer 3 not cut from ffn_down_exps")
	}
	checkRefusals(t, "qwen3_5_moe", []refusal{
		{map[string]*Value{"qwen35moe.expert_count": nil}, "a mixture of experts needs"},
		{map[string]*Value{"qwen35moe.ssm.inner_size": {Type: TypeUint32, V: uint32(128)}}, "value heads are the size of its key heads"},
		{map[string]*Value{"qwen35moe.attention.layer_norm_rms_epsilon": {Type: TypeFloat32, V: float32(1e-5)}}, "only 1e-6 is supported"},
	})
}

// TestQwen3NextConfig: a qwen3next file is Qwen3-Next with llama.cpp's projections (linear_grouped_ba: qkv and z
// separate, ba grouped), its value heads in Hugging Face's order, every layer sparse and renormalized; a file with
// both the legacy ssm_in and the split projections is refused.
func TestQwen3NextConfig(t *testing.T) {
	ck, err := openFamily(t, "qwen3_next").Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Config
	if c.Architectures[0] != "Qwen3NextForCausalLM" || !c.LinearGroupedBA || c.LinearTiledValueHeads || !c.NormTopKProb || c.NumExperts != 8 {
		t.Errorf("config %+v", c)
	}
	for _, name := range []string{"model.layers.0.linear_attn.in_proj_ba.weight", "model.layers.0.linear_attn.in_proj_qkv.weight", "model.layers.0.linear_attn.in_proj_z.weight"} {
		if _, ok := ck.Tensor(name); !ok {
			t.Errorf("no %s", name)
		}
	}
	g := openFamily(t, "qwen3_next")
	for i := range g.Tensors {
		if g.Tensors[i].Name == "blk.0.attn_qkv.weight" {
			g.Tensors[i].Name = "blk.0.ssm_in.weight"
		}
	}
	if _, err := g.Checkpoint(); err == nil || !strings.Contains(err.Error(), "one layout or the other") {
		t.Errorf("ssm_in beside attn_gate: %v", err)
	}
}

// refusal is metadata set (nil: removed) on a family file, and the words of the error it must give.
type refusal struct {
	kvs  map[string]*Value
	want string
}

// checkRefusals requires each refusal's edit of the family file name to be refused with its words.
func checkRefusals(t *testing.T, name string, cases []refusal) {
	t.Helper()
	for _, c := range cases {
		g := openFamily(t, name)
		for k, v := range c.kvs {
			setKV(g, k, v)
		}
		if _, err := g.Checkpoint(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: got %v, want %q", name, c.kvs, err, c.want)
		}
	}
}
