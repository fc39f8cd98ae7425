package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/reference"
)

// TestGptOssMXFP4: a gpt-oss checkpoint whose experts are MXFP4 as OpenAI publishes them (blocks and scales
// apart, quantization_config mxfp4: testdata/mxfp4/gpt_oss, made by scripts/fixtures/make_mxfp4_fixture.py)
// matches transformers, which dequantizes them, as TestHFFixtures checks a fixture: the prompt's logits within
// 1e-4 through Engine.Logits (graphs), host decode steps and a 25-token prefill, and the float64 reference; the
// 20 greedy ids on the host kernels and the graphs. The experts open as ggml MXFP4 tensors, streamed expert by
// expert (routed-only), which the host kernels multiply in place (kernels.LinearQuant).
func TestGptOssMXFP4(t *testing.T) {
	src, err := hffixture.Testdata("mxfp4", "gpt_oss")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{"config.json", "generation_config.json", "model.safetensors"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ref, err := reference.LoadTransformers(filepath.Join(src, hffixture.ReferenceFile))
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"model.layers.1.mlp.experts.3.gate_up_proj.weight", "model.layers.0.mlp.experts.0.down_proj.weight"} {
		if ti, ok := ck.Tensor(name); !ok || ti.DType != checkpoint.MXFP4 {
			t.Fatalf("%s: %+v, want an MXFP4 tensor", name, ti)
		}
	}
	c := &hfCase{t: t, name: "gpt_oss (MXFP4)", dir: dir, ref: ref, e: open(t, dir, Options{}), ids: ints(ref.InputIDs)}
	if c.e.store.experts == nil {
		t.Fatal("the experts are not streamed apart (each expert's paired blocks and scales a unit of its own)")
	}
	c.want = ref.Rows()
	c.checkLogits()
	c.check("decode (host kernels)", tokenByToken(t, c.e, c.ids), c.want, 0)
	c.check("prefill 25 + decode (host kernels)", prefillDecode(t, c.e, c.ids, 25), c.want, 24)
	r, err := reference.Forward(ck, c.ids)
	if err != nil {
		t.Fatal(err)
	}
	c.check("float64 reference", toF32(r.Logits), c.want, 0)
	c.checkGreedy("greedy (host kernels)", c.e)
	c.checkGreedy("greedy (graphs)", open(t, dir, Options{GraphDecode: true}))
}
