package engine

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/layerstream/layerstream/internal/hffixture"
	"github.com/layerstream/layerstream/reference"
)

// ggufFamilyTolerance bounds the logit differences from llama.cpp's on the family GGUF files (F32 weights,
// float32 arithmetic on both sides; llama.cpp and transformers differ by up to 3e-5 on them).
const ggufFamilyTolerance = 1e-4

// ggufFamilyLlamaCPPTolerance loosens the bound on the difference from llama.cpp's logits where llama.cpp's CPU
// code rounds: its GELU (Gemma's MLP) is a float16 table lookup (ggml-cpu/vec.h, GGML_GELU_FP16), which moves its
// logits by 1.2e-3 (gemma2) to 1.9e-3 (gemma3) from transformers' with the file's meaning (emulating the table in
// transformers leaves 3e-4 on gemma2). These fixtures have an exact reference of what the file means,
// <name>.transformers.safetensors, held to ggufFamilyTolerance.
var ggufFamilyLlamaCPPTolerance = map[string]float64{"gemma2": 3e-3, "gemma3": 3e-3, "gemma3-vl": 3e-3}

// ggufFamilyRefused are the family GGUF files layerstream refuses, each with the words its error must contain.
// Everything else must open and match llama.cpp.
var ggufFamilyRefused = map[string]string{
	"phi4-mini":          `general.architecture "phi3" is not supported`,
	"llama-rope-dynamic": `40 tokens exceed the model's context of 32 positions`,
}

// TestGGUFFamilies opens every GGUF file llama.cpp's converter made of the transformers fixtures
// (gguf/testdata/families, scripts/fixtures/gguf_families.py) and compares layerstream's logits of the
// fixture's 40 ids with llama.cpp's on the same file, and, where llama.cpp itself agrees with transformers (within
// 1e-3: the converter kept everything that changes the math), with transformers' logits of the original
// checkpoint. Where they disagree, the file lost a setting (the converter drops dynamic rope scaling and Mistral's
// and Qwen2's sliding windows, and llama.cpp computes without them): layerstream follows the file, as llama.cpp.
// Where <name>.transformers.safetensors exists, it holds transformers' logits of the checkpoint with the settings
// llama.cpp reads from the file (scripts/fixtures/gguf_families.py, FILE_MEANING), and layerstream must match them.
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
			tol := ggufFamilyTolerance
			if v, ok := ggufFamilyLlamaCPPTolerance[name]; ok {
				tol = v
			}
			if dl > tol {
				t.Errorf("logits differ from llama.cpp's on the same file by %.3g (tolerance %g)", dl, tol)
			}
			meaning := strings.TrimSuffix(file, ".gguf") + ".transformers.safetensors"
			if _, err := os.Stat(meaning); err == nil {
				m, err := reference.ReadTensors(meaning)
				if err != nil {
					t.Fatal(err)
				}
				d := worst(m["logits"])
				t.Logf("largest logit difference from transformers with the file's meaning %.2g", d)
				if d > ggufFamilyTolerance {
					t.Errorf("logits differ from transformers' with the settings llama.cpp reads from the file by %.3g (tolerance %g)", d, ggufFamilyTolerance)
				}
			} else if _, known := ggufFamilyLlamaCPPTolerance[name]; known {
				t.Fatalf("%s is missing (scripts/fixtures/gguf_families.py %s makes it): the tolerance from llama.cpp is loosened only beside an exact reference", meaning, name)
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
