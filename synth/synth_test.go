package synth

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/shards"
)

func tiny() Shape {
	return Shape{HiddenSize: 64, IntermediateSize: 96, NumLayers: 8, NumHeads: 4, NumKVHeads: 2, VocabSize: 300,
		BOSTokenID: 1, EOSTokenID: 2}
}

func TestWriteOpens(t *testing.T) {
	for _, dt := range []checkpoint.DType{checkpoint.BF16, checkpoint.F32} {
		t.Run(string(dt), func(t *testing.T) {
			dir := t.TempDir()
			// A small file cap forces several safetensors files.
			if err := Write(dir, Options{Shape: tiny(), DType: dt, Seed: 7, MaxFileBytes: 40_000}); err != nil {
				t.Fatal(err)
			}
			ck, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			c := ck.Config
			if c.HiddenSize != 64 || c.NumHiddenLayers != 8 || c.NumKeyValueHeads != 2 || c.TieWordEmbeddings {
				t.Fatalf("config %+v", c)
			}
			if want := map[checkpoint.DType]string{checkpoint.BF16: "bfloat16", checkpoint.F32: "float32"}[dt]; c.TorchDType != want {
				t.Fatalf("torch_dtype %q want %q", c.TorchDType, want)
			}
			if len(ck.Tensors) != 1+8*9+2 {
				t.Fatalf("%d tensors", len(ck.Tensors))
			}
			files := map[string]bool{}
			for _, ti := range ck.Tensors {
				files[ti.File] = true
				if ti.DType != dt {
					t.Fatalf("%s: dtype %s", ti.Name, ti.DType)
				}
			}
			if len(files) < 2 {
				t.Fatalf("want several files, got %d", len(files))
			}
			norm, err := ck.ReadF32("model.layers.3.input_layernorm.weight")
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range norm {
				if v != 1 {
					t.Fatalf("norm weight %v, want 1", v)
				}
			}
			w, err := ck.ReadF32("model.layers.0.mlp.down_proj.weight")
			if err != nil {
				t.Fatal(err)
			}
			var sum, sq float64
			for _, v := range w {
				sum += float64(v)
				sq += float64(v) * float64(v)
			}
			mean, std := sum/float64(len(w)), math.Sqrt(sq/float64(len(w)))
			if math.Abs(mean) > 0.002 || math.Abs(std-0.02) > 0.002 {
				t.Fatalf("weights mean %g std %g, want ≈0 and ≈0.02", mean, std)
			}
		})
	}
}

func TestWriteDeterministicAndSeeded(t *testing.T) {
	read := func(seed uint64) []byte {
		dir := t.TempDir()
		if err := Write(dir, Options{Shape: tiny(), Seed: seed}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "model-00001-of-00001.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b, c := read(1), read(1), read(2)
	if !bytes.Equal(a, b) {
		t.Fatal("same seed gave different files")
	}
	if bytes.Equal(a, c) {
		t.Fatal("different seeds gave the same file")
	}
}

func TestTiedDropScaleTokenizer(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "tokenizer.json"), []byte(`{"model":{}}`), 0o644)
	os.WriteFile(filepath.Join(src, "tokenizer_config.json"), []byte(`{}`), 0o644)

	s := tiny()
	s.TieEmbeddings = true
	dir := t.TempDir()
	if err := Write(dir, Options{Shape: s, Tokenizer: filepath.Join(src, "tokenizer.json"), Scale: 1000}); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ck.Tensor("lm_head.weight"); ok || !ck.Config.TieWordEmbeddings {
		t.Fatal("tied checkpoint has lm_head or untied config")
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	w, _ := ck.ReadF32("model.embed_tokens.weight")
	var big int
	for _, v := range w {
		if math.Abs(float64(v)) > 1 {
			big++
		}
	}
	if big == 0 {
		t.Fatal("Scale 1000 left every weight below 1")
	}

	dropped := t.TempDir()
	if err := Write(dropped, Options{Shape: tiny(), DropLMHead: true}); err != nil {
		t.Fatal(err)
	}
	ck, err = checkpoint.Open(dropped)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ck.Tensor("lm_head.weight"); ok || ck.Config.TieWordEmbeddings {
		t.Fatal("DropLMHead: want an untied config without lm_head.weight")
	}
}

func TestWriteRejectsBadOptions(t *testing.T) {
	s := tiny()
	s.NumKVHeads = 3
	if err := Write(t.TempDir(), Options{Shape: s}); err == nil || !strings.Contains(err.Error(), "multiple of kv heads") {
		t.Fatalf("err = %v", err)
	}
	if err := Write(t.TempDir(), Options{Shape: tiny(), DType: checkpoint.F16}); err == nil || !strings.Contains(err.Error(), `dtype "F16"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestNamedShapes(t *testing.T) {
	n, err := TotalBytes(Options{Shape: Shapes["tinyllama-1.1b"]})
	if err != nil {
		t.Fatal(err)
	}
	// TinyLlama-1.1B has 1,100,048,384 parameters.
	if n != 2*1100048384 {
		t.Fatalf("tinyllama bytes %d", n)
	}
	n, _ = TotalBytes(Options{Shape: Shapes["smollm2-135m"]})
	if n != 2*134515008 {
		t.Fatalf("smollm2 bytes %d", n)
	}
	// DeepSeek-V3: 671B parameters besides its multi-token-prediction layer (3 dense layers of 583.5M, 58 sparse
	// ones of 11.51B, 1.85B of embedding and lm_head).
	n, _ = TotalBytes(Options{Shape: Shapes["deepseek-v3-671b"]})
	if n != 2*671026419200 {
		t.Fatalf("deepseek-v3 bytes %d", n)
	}
}

// TestQuantized splits the generated q8 and q4 checkpoints into shard folders and checks their dtypes, that they verify, and that
// the quantized weights spread like the float ones (standard deviation within 20% of Std).
func TestQuantized(t *testing.T) {
	shape := Shape{HiddenSize: 512, IntermediateSize: 1024, NumLayers: 2, NumHeads: 8, NumKVHeads: 2, VocabSize: 300}
	for q, want := range map[shards.Quantization]checkpoint.DType{shards.Q8: checkpoint.Q8_0, shards.Q4: checkpoint.Q4_K} {
		dir := t.TempDir()
		ck, err := Quantized(dir, Options{Shape: shape, Seed: 3}, q.Target)
		if err != nil {
			t.Fatal(err)
		}
		set, err := shards.Split(context.Background(), ck, shards.SplitOptions{Out: dir})
		if err != nil {
			t.Fatal(err)
		}
		r, err := set.Verify(context.Background(), nil)
		if err != nil || !r.OK() {
			t.Fatalf("%s: verify: %v %v", q, err, r.Problems)
		}
		l, err := set.Load(context.Background(), "layer.1", shards.NewBuffer(0))
		if err != nil {
			t.Fatal(err)
		}
		w := l.Tensors["model.layers.1.mlp.down_proj.weight"]
		if w.DType != want {
			t.Fatalf("%s: down_proj is %s, want %s", q, w.DType, want)
		}
		x := make([]float32, w.Shape[0]*w.Shape[1])
		if err := checkpoint.ToF32(x, w.Data, w.DType); err != nil {
			t.Fatal(err)
		}
		var sum, sq float64
		for _, v := range x {
			sum += float64(v)
			sq += float64(v) * float64(v)
		}
		mean := sum / float64(len(x))
		std := math.Sqrt(sq/float64(len(x)) - mean*mean)
		if std < 0.016 || std > 0.024 || math.Abs(mean) > 0.004 {
			t.Fatalf("%s: weights have mean %.4f, std %.4f; want about 0 and 0.02", q, mean, std)
		}
		if u, _ := set.Unit("embed"); u.Tensors[0].DType != checkpoint.BF16 {
			t.Fatalf("%s: the embedding is %s, want BF16", q, u.Tensors[0].DType)
		}
	}
}

// TestQuantizedRerun: a split of the generated model over an earlier one of other options (another seed) writes
// the new weights: the generated tensors have no files whose identity would tell the split they changed.
func TestQuantizedRerun(t *testing.T) {
	split := func(dir string, seed uint64) []byte {
		t.Helper()
		ck, err := Quantized(dir, Options{Shape: tiny(), Seed: seed}, shards.Q8.Target)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := shards.Split(context.Background(), ck, shards.SplitOptions{Out: dir}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, "layer.0.shard"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dir := t.TempDir()
	first := split(dir, 3)
	if !bytes.Equal(split(dir, 3), first) {
		t.Fatal("the same options split again changed layer.0's shard")
	}
	if again, fresh := split(dir, 4), split(t.TempDir(), 4); !bytes.Equal(again, fresh) {
		t.Errorf("seed 4 over seed 3: layer.0's shard is not seed 4's (unchanged from seed 3: %v)", bytes.Equal(again, first))
	}
}

// TestHybridShape: a Qwen3.5 shape writes a checkpoint config.json and tensors that checkpoint.Open accepts
// (every key and tensor known to the family), with a full-attention layer every FullAttentionInterval layers;
// the qwen3.5-9b shape counts Qwen3_5TextConfig's default parameters.
func TestHybridShape(t *testing.T) {
	s := tiny()
	s.HeadDim, s.NumLayers = 32, 4
	s.Hybrid = &Hybrid{LinearKeyHeads: 2, LinearValueHeads: 4, LinearKeyDim: 16, LinearValueDim: 16, ConvKernel: 4,
		FullAttentionInterval: 4, PartialRotary: 0.25}
	dir := t.TempDir()
	if err := Write(dir, Options{Shape: s, DType: checkpoint.F32, Seed: 7}); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Config
	if c.Arch.Name != "Qwen3_5ForCausalLM" || !slices.Equal(c.LayerTypes, []string{"linear_attention", "linear_attention", "linear_attention", "full_attention"}) ||
		c.LinearNumValueHeads != 4 || c.Rope.PartialRotaryFactor != 0.25 {
		t.Fatalf("config %+v", c)
	}
	if len(ck.Tensors) != 1+3*14+11+2 {
		t.Fatalf("%d tensors", len(ck.Tensors))
	}
	n, err := TotalBytes(Options{Shape: Shapes["qwen3.5-9b"]})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2*8_953_803_264 {
		t.Errorf("qwen3.5-9b: %d parameters", n/2)
	}
}

// TestWriteMoE: a shape with experts is a Qwen3-MoE checkpoint: the config names the experts, and every layer
// holds q/k norms, a router and each expert's three projections instead of a dense MLP.
func TestWriteMoE(t *testing.T) {
	s := tiny()
	s.NumLayers, s.NumExperts, s.NumExpertsPerTok, s.MoEIntermediateSize = 2, 4, 2, 32
	dir := t.TempDir()
	if err := Write(dir, Options{Shape: s, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Config
	if c.Architectures[0] != "Qwen3MoeForCausalLM" || c.NumExperts != 4 || c.NumExpertsPerTok != 2 {
		t.Fatalf("config %+v", c)
	}
	if got, want := len(ck.Tensors), 1+2*(6+2+1+4*3)+2; got != want {
		t.Fatalf("%d tensors, want %d", got, want)
	}
	for _, name := range []string{"model.layers.1.mlp.gate.weight", "model.layers.1.mlp.experts.3.down_proj.weight", "model.layers.0.self_attn.q_norm.weight"} {
		if _, ok := ck.Tensor(name); !ok {
			t.Errorf("no tensor %s", name)
		}
	}
}

// TestGptOssShape: a gpt-oss shape writes a config.json and tensors that checkpoint.Open accepts (every key and
// tensor known to the family), its experts' MXFP4 blocks and scales as U8 paired into one MXFP4 tensor per expert
// and projection, sliding and full attention alternating; gpt-oss-120b's bytes add up as its parts.
func TestGptOssShape(t *testing.T) {
	s := tiny()
	s.NumLayers, s.IntermediateSize, s.HeadDim = 2, 64, 16
	s.GptOss = &GptOss{Experts: 4, ExpertsPerTok: 2, SlidingWindow: 8, OriginalContext: 32, Factor: 4}
	dir := t.TempDir()
	if err := Write(dir, Options{Shape: s, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := ck.Config
	if c.Arch.Name != "GptOssForCausalLM" || !slices.Equal(c.LayerTypes, []string{"sliding_attention", "full_attention"}) || c.SlidingWindow == nil || *c.SlidingWindow != 8 {
		t.Fatalf("config %+v", c)
	}
	mx := 0
	for _, ti := range ck.Tensors {
		if ti.DType == checkpoint.MXFP4 {
			mx++
		}
	}
	if want := 2 * 4 * 2; mx != want { // layers × experts × (gate_up, down)
		t.Fatalf("%d MXFP4 tensors, want %d", mx, want)
	}
	if _, err := Quantized(t.TempDir(), Options{Shape: s}, nil); err == nil {
		t.Fatal("Quantized wrote a gpt-oss shape")
	}
	n, err := TotalBytes(Options{Shape: Shapes["gpt-oss-120b"]})
	if err != nil {
		t.Fatal(err)
	}
	// A layer: attention, biases, sinks, norms and router in bf16, 2 × 26,924,672 bytes; 128 experts' MXFP4
	// blocks and scales with bf16 biases, 1,694,269,440 bytes (gate_up 5760 × 2880, down 2880 × 2880: 17 bytes
	// per 32 weights). 36 layers, the bf16 embedding and lm_head (201,088 × 2880 each) and the final norm:
	// 65,248,815,744 bytes.
	if n != 65_248_815_744 {
		t.Errorf("gpt-oss-120b: %d bytes", n)
	}
}
