package gguf

import (
	"math"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/quant"
)

// gemmaMeta is the metadata of a Gemma file of the architecture (no tensors), with extra keys.
func gemmaMeta(t *testing.T, arch string, layers, hidden, heads int, extra ...KV) *File {
	t.Helper()
	f := &testFile{}
	f.kv("general.architecture", arch)
	f.kv(arch+".block_count", uint32(layers))
	f.kv(arch+".embedding_length", uint32(hidden))
	f.kv(arch+".feed_forward_length", uint32(128))
	f.kv(arch+".attention.head_count", uint32(heads))
	f.kv(arch+".attention.head_count_kv", uint32(2))
	f.kv(arch+".attention.key_length", uint32(16))
	f.kv(arch+".attention.value_length", uint32(16))
	f.kv(arch+".attention.layer_norm_rms_epsilon", float32(1e-6))
	f.kvs = append(f.kvs, extra...)
	g, err := parseBytes(t, f.bytes())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func kvOf(key string, v any) KV {
	f := &testFile{}
	f.kv(key, v)
	return f.kvs[0]
}

// types spells layer_types as a string of s (sliding) and f (full).
func types(c *checkpoint.Config) string {
	var b strings.Builder
	for _, l := range c.LayerTypes {
		b.WriteByte(l[0])
	}
	return b.String()
}

// TestGemmaConfig: what llama.cpp makes of Gemma 2 and 3 metadata (src/models/gemma2.cpp, gemma3.cpp), as the
// derived config.json says it: its defaults, its hard-coded attention scale, its sliding layers.
func TestGemmaConfig(t *testing.T) {
	g2 := func(c *checkpoint.Config) {
		if c.Arch.Name != "Gemma2ForCausalLM" || c.HiddenActivation != "gelu_pytorch_tanh" || c.TorchDType != "float32" {
			t.Errorf("gemma2: %s %q %q", c.Arch.Name, c.HiddenActivation, c.TorchDType)
		}
	}
	for _, c := range []struct {
		name         string
		g            *File
		check        func(*checkpoint.Config)
		scalar       float64
		types        string
		window       int
		attn, final  float64 // 0: none
		local, theta float64
	}{
		// llama.cpp's defaults: soft-caps 50 and 30, a window of 4096 on every other layer, the first local.
		{name: "gemma2 defaults", g: gemmaMeta(t, "gemma2", 3, 64, 4), check: g2, scalar: 16, types: "sfs", window: 4096, attn: 50, final: 30, theta: 10000},
		{name: "gemma2", g: gemmaMeta(t, "gemma2", 4, 64, 4, kvOf("gemma2.attn_logit_softcapping", float32(5)),
			kvOf("gemma2.final_logit_softcapping", float32(6)), kvOf("gemma2.attention.sliding_window", uint32(8)),
			kvOf("gemma2.rope.freq_base", float32(20000))),
			check: g2, scalar: 16, types: "sfsf", window: 8, attn: 5, final: 6, theta: 20000},
		// 46 layers is Gemma 2 27B to llama.cpp: queries scaled by 1/√(hidden/heads), not 1/√head_dim.
		{name: "gemma2 27B", g: gemmaMeta(t, "gemma2", 46, 128, 4), check: g2, scalar: 32, types: strings.Repeat("sf", 23), window: 4096, attn: 50, final: 30, theta: 10000},
		{name: "gemma2 pattern", g: gemmaMeta(t, "gemma2", 4, 64, 4, kvOf("gemma2.attention.sliding_window_pattern", uint32(4))),
			check: g2, scalar: 16, types: "sssf", window: 4096, attn: 50, final: 30, theta: 10000},
		// Gemma 3: five local layers then a global one; the local base from rope.freq_base_swa (10000 if absent).
		{name: "gemma3", g: gemmaMeta(t, "gemma3", 7, 64, 4, kvOf("gemma3.attention.sliding_window", uint32(8)),
			kvOf("gemma3.rope.freq_base", float32(1e6)), kvOf("gemma3.rope.freq_base_swa", float32(20000))),
			scalar: 16, types: "sssssfs", window: 8, local: 20000, theta: 1e6},
		{name: "gemma3 flags", g: gemmaMeta(t, "gemma3", 3, 64, 4, kvOf("gemma3.attention.sliding_window", uint32(8)),
			kvOf("gemma3.attention.sliding_window_pattern", []bool{false, true, false}), kvOf("gemma3.final_logit_softcapping", float32(30))),
			scalar: 16, types: "fsf", window: 8, final: 30, local: 10000, theta: 10000},
		{name: "gemma3 no window", g: gemmaMeta(t, "gemma3", 3, 64, 4), scalar: 16, types: "fff", theta: 10000},
		{name: "gemma3 27B", g: gemmaMeta(t, "gemma3", 62, 128, 4), scalar: 32, types: strings.Repeat("f", 62), theta: 10000},
	} {
		_, cfg, err := c.g.metaConfig(true, 256)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if c.check != nil {
			c.check(cfg)
		}
		window := 0
		if cfg.SlidingWindow != nil {
			window = *cfg.SlidingWindow
		}
		f := func(p *float64) float64 {
			if p == nil {
				return 0
			}
			return *p
		}
		if cfg.QueryPreAttnScalar != c.scalar || types(cfg) != c.types || window != c.window || f(cfg.AttnLogitSoftcapping) != c.attn ||
			f(cfg.FinalLogitSoftcapping) != c.final || f(cfg.RopeLocalBaseFreq) != c.local || cfg.Rope.Theta != c.theta {
			t.Errorf("%s: scalar %g, layers %s, window %d, soft-caps %g %g, local base %g, theta %g; want %g %s %d %g %g %g %g", c.name,
				cfg.QueryPreAttnScalar, types(cfg), window, f(cfg.AttnLogitSoftcapping), f(cfg.FinalLogitSoftcapping), f(cfg.RopeLocalBaseFreq),
				cfg.Rope.Theta, c.scalar, c.types, c.window, c.attn, c.final, c.local, c.theta)
		}
	}
}

// TestGemmaRefuses: what llama.cpp would compute as garbage, or differently from what layerstream would, is refused
// by name.
func TestGemmaRefuses(t *testing.T) {
	for _, c := range []struct {
		g    *File
		want string
	}{
		{gemmaMeta(t, "gemma2", 2, 64, 4, kvOf("gemma2.attention.sliding_window", uint32(0))), "gemma2.attention.sliding_window is 0"},
		{gemmaMeta(t, "gemma3", 1<<30, 64, 4), "llama.cpp loads at most 512 layers"},
		{gemmaMeta(t, "gemma2", 2, 64, 4, kvOf("gemma2.attn_logit_softcapping", float32(0))), "gemma2.attn_logit_softcapping is 0"},
		{gemmaMeta(t, "gemma2", 2, 64, 4, kvOf("gemma2.final_logit_softcapping", float32(-1))), "gemma2.final_logit_softcapping is -1"},
		// Gemma 2's local layers would take another rotary base: one rotary embedding serves Gemma 2's layers.
		{gemmaMeta(t, "gemma2", 2, 64, 4, kvOf("gemma2.rope.freq_base_swa", float32(20000))), "gemma2.rope.freq_base_swa is not supported"},
		{gemmaMeta(t, "gemma2", 2, 64, 4, kvOf("gemma2.attention.sliding_window_pattern", []bool{true})), "has 1 entries for 2 layers"},
		{gemmaMeta(t, "gemma3", 2, 64, 4, kvOf("gemma3.attn_logit_softcapping", float32(50))), "gemma3.attn_logit_softcapping is not supported"},
		{gemmaMeta(t, "gemma3", 2, 64, 4, kvOf("gemma3.rope.scaling.type", "yarn"), kvOf("gemma3.rope.scaling.factor", float32(8))),
			`gemma3.rope.scaling.type "yarn" is not supported for gemma3`},
		{gemmaMeta(t, "gemma3", 2, 64, 4, kvOf("gemma3.attention.sliding_window_pattern", uint32(2))), "without a sliding window"},
	} {
		if _, _, err := c.g.metaConfig(true, 256); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error containing %q", err, c.want)
		}
	}
}

// TestGemmaNorms: the converter stored each norm weight w of the transformers fixture as float32(1 + w); read
// back, it is w to within the rounding of that sum, and 1 + it is the stored value exactly.
func TestGemmaNorms(t *testing.T) {
	for _, name := range []string{"gemma2", "gemma3"} {
		ck, hf := familyCheckpoints(t, name)
		n := 0
		for _, ti := range ck.Tensors {
			if !strings.HasSuffix(ti.Name, "norm.weight") {
				if ti.Shift != 0 {
					t.Errorf("%s: %s shifted", name, ti.Name)
				}
				continue
			}
			n++
			got, err := ck.ReadF32(ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			raw := make([]byte, ti.Length)
			stored := make([]float32, len(got))
			ti.Shift = 0
			if err := checkpoint.ReadTensorAt(ti, raw); err != nil {
				t.Fatal(err)
			}
			if err := checkpoint.ToF32(stored, raw, ti.DType); err != nil {
				t.Fatal(err)
			}
			want, err := hf.ReadF32(ti.Name)
			if err != nil {
				t.Fatal(err)
			}
			for i, w := range want {
				if math.Abs(float64(got[i]-w)) > 0x1p-24 || 1+got[i] != stored[i] {
					t.Fatalf("%s: %s[%d] reads %g (stored %g), transformers' %g", name, ti.Name, i, got[i], stored[i], w)
				}
			}
		}
		perLayer := map[string]int{"gemma2": 4, "gemma3": 6}[name] // Gemma 3's q and k norms besides the four
		if n != perLayer*ck.Config.NumHiddenLayers+1 {
			t.Fatalf("%s: %d norms", name, n)
		}
	}
}

// TestGemmaQuantizedNorm: a norm stored plus 1 in quantized blocks cannot be given back exactly: refused by name.
func TestGemmaQuantizedNorm(t *testing.T) {
	f := &testFile{kvs: gemmaMeta(t, "gemma2", 1, 32, 2).KVs}
	f.tensor("token_embd.weight", quant.F32, f32Bytes(make([]float32, 32*4)...), 32, 4)
	f.tensor("blk.0.attn_norm.weight", quant.Q8_0, encodeAs(quant.Q8_0, make([]float32, 32)), 32)
	g, err := parseBytes(t, f.bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Checkpoint(); err == nil || !strings.Contains(err.Error(), `tensor "blk.0.attn_norm.weight" is Q8_0`) {
		t.Fatalf("got %v", err)
	}
}
