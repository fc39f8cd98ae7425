package engine

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/reference"
)

// ggufFamilyTolerance bounds the logit differences from llama.cpp's on the family GGUF files (F32 weights,
// float32 arithmetic on both sides; llama.cpp and transformers differ by up to 3e-5 on them).
const ggufFamilyTolerance = 1e-4

// ggufFamilyRefused are the family GGUF files layerstream refuses, each with the words its error must contain.
// Everything else must open and match llama.cpp.
var ggufFamilyRefused = map[string]string{
	"gemma2":             `general.architecture "gemma2" is not supported`,
	"granite":            `general.architecture "granite" is not supported`,
	"olmo2":              `general.architecture "olmo2" is not supported`,
	"phi4-mini":          `general.architecture "phi3" is not supported`,
	"qwen3":              `general.architecture "qwen3" is not supported`,
	"llama-rope-dynamic": `40 tokens exceed the model's context of 32 positions`,
}

// TestGGUFFamilies opens every GGUF file llama.cpp's converter made of the transformers fixtures
// (gguf/testdata/families, scripts/fixtures/gguf_families.py) and compares layerstream's logits of the
// fixture's 40 ids with llama.cpp's on the same file, and, where llama.cpp itself agrees with transformers (within
// 1e-3: the converter kept everything that changes the math), with transformers' logits of the original
// checkpoint. Where they disagree, the file lost a setting (the converter drops dynamic rope scaling and Mistral's
// and Qwen2's sliding windows, and llama.cpp computes without them): layerstream follows the file, as llama.cpp.
func TestGGUFFamilies(t *testing.T) {
	files, err := filepath.Glob("../gguf/testdata/families/*.gguf")
	if err != nil || len(files) == 0 {
		t.Fatalf("no GGUF files in gguf/testdata/families (made by scripts/fixtures/gguf_families.py): %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".gguf")
		t.Run(name, func(t *testing.T) {
			llama, err := reference.ReadTensors(strings.TrimSuffix(file, ".gguf") + ".llamacpp.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			hf := hffixture.MustReference(t, name)
			ids := ints(hf.InputIDs)
			var got [][]float32
			e, err := Open(context.Background(), file, Options{ShardDir: filepath.Join(t.TempDir(), "shards")})
			if err == nil {
				defer e.Close()
				got, err = e.Logits(context.Background(), ids)
			}
			if want, refused := ggufFamilyRefused[name]; refused {
				if err == nil {
					t.Fatalf("computed its logits; want it refused with %q", want)
				}
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("refused with %q; want the error to say %q", err, want)
				}
				t.Skipf("refused, as it should be: %v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			vocab := len(got[0])
			row := func(x *reference.Tensor, p int) []float32 { return x.F32[p*vocab : (p+1)*vocab] }
			worst := func(x *reference.Tensor) float64 {
				d := 0.0
				for p := range ids {
					for j, v := range row(x, p) {
						d = max(d, math.Abs(float64(got[p][j]-v)))
					}
				}
				return d
			}
			var llamaVsHF float64
			for p := range ids {
				for j, v := range row(llama["logits"], p) {
					llamaVsHF = max(llamaVsHF, math.Abs(float64(v-hf.Row(p)[j])))
				}
			}
			dl := worst(llama["logits"])
			t.Logf("largest logit difference from llama.cpp %.2g; llama.cpp from transformers %.2g", dl, llamaVsHF)
			if dl > ggufFamilyTolerance {
				t.Errorf("logits differ from llama.cpp's on the same file by %.3g (tolerance %g)", dl, ggufFamilyTolerance)
			}
			if llamaVsHF <= 10*ggufFamilyTolerance {
				var want reference.Tensor
				want.F32 = make([]float32, 0, len(ids)*vocab)
				for p := range ids {
					want.F32 = append(want.F32, hf.Row(p)...)
				}
				if d := worst(&want); d > ggufFamilyTolerance {
					t.Errorf("logits differ from transformers' on the original checkpoint by %.3g (tolerance %g)", d, ggufFamilyTolerance)
				}
			}
		})
	}
}
