package hffixture

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// SmolLM2Name is the folder (under the test models folder) of SmolLM2-135M-Instruct as saved by transformers 5,
// made by scripts/fixtures/smollm2_hf.py: <models>/smollm2-135m-instruct-hf/{f32,bf16}.
const SmolLM2Name = "smollm2-135m-instruct-hf"

// ModelsDir is where tests find large, gitignored models: $LAYERSTREAM_TESTDATA_MODELS, else testdata/models.
func ModelsDir() (string, error) {
	if d := os.Getenv("LAYERSTREAM_TESTDATA_MODELS"); d != "" {
		return d, nil
	}
	return Testdata("models")
}

// SmolLM2Checkpoint returns the folder of the converted SmolLM2-135M-Instruct checkpoint in the given dtype ("f32"
// or "bf16"), skipping the test with a message saying how to make it, and why CI does not, when it is absent.
func SmolLM2Checkpoint(t testing.TB, dtype string) string {
	t.Helper()
	if dtype != "f32" && dtype != "bf16" {
		t.Fatalf("hffixture: SmolLM2 dtype %q (want f32 or bf16)", dtype)
	}
	models, err := ModelsDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(models, SmolLM2Name, dtype)
	if _, err := os.Stat(filepath.Join(dir, "model.safetensors")); err != nil {
		t.Skipf("skipping: %s not found; %s", dir, whyMissing("scripts/fixtures/smollm2_hf.py (after "+FetchScript+
			", with a transformers-5 venv)"))
	}
	return dir
}

// SmolLM2Prompt is transformers' output for one of the committed SmolLM2 prompts (testdata/smollm2/README.md).
type SmolLM2Prompt struct {
	Index int    `json:"index"`
	Kind  string `json:"kind"` // "chat" (chat template applied, generation prompt added) or "plain"
	Text  string `json:"text"` // the prompt as text (after the chat template for "chat")
	// EOSAt is the index of the first eos id in GreedyIDs, or -1 (generation did not stop at eos).
	EOSAt     int `json:"eos_at"`
	PromptIDs []int64
	// GreedyIDs are 64 greedy ids (float32, eos ignored).
	GreedyIDs []int64
	// Per position of the teacher-forced sequence PromptIDs ++ GreedyIDs (one forward pass): the argmax, the max
	// logit and its margin over the second largest.
	Argmax   []int64
	MaxLogit []float32
	Margin   []float32
	// TopIDs/TopValues, for the prompts listed in SmolLM2Reference.TopKPrompts: per position the TopK largest logits,
	// row-major [positions, TopK], largest first.
	TopIDs    []int64
	TopValues []float32
}

// SmolLM2Reference is testdata/smollm2: twelve prompts with transformers' greedy ids and logit summaries.
type SmolLM2Reference struct {
	Prompts     []SmolLM2Prompt
	TopK        int
	TopKPrompts []int
	// FullRows maps [prompt, position] to that position's full logit row.
	FullRows map[[2]int][]float32
}

// LoadSmolLM2Reference reads testdata/smollm2/{prompts.json,reference.safetensors}.
func LoadSmolLM2Reference() (*SmolLM2Reference, error) {
	dir, err := Testdata("smollm2")
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "prompts.json"))
	if err != nil {
		return nil, fmt.Errorf("hffixture: %w", err)
	}
	var doc struct {
		Prompts     []SmolLM2Prompt `json:"prompts"`
		TopK        int             `json:"top_k"`
		TopKPrompts []int           `json:"top_k_sequences"`
		FullRows    [][2]int        `json:"full_rows"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("hffixture: smollm2 prompts.json: %w", err)
	}
	tensors, err := ReadSafetensors(filepath.Join(dir, ReferenceFile))
	if err != nil {
		return nil, err
	}
	need := func(key, dtype string) (*Tensor, error) {
		t := tensors[key]
		if t == nil || t.DType != dtype {
			return nil, fmt.Errorf("hffixture: smollm2 reference lacks %s tensor %q", dtype, key)
		}
		return t, nil
	}
	ref := &SmolLM2Reference{Prompts: doc.Prompts, TopK: doc.TopK, TopKPrompts: doc.TopKPrompts, FullRows: map[[2]int][]float32{}}
	for i := range ref.Prompts {
		p := &ref.Prompts[i]
		for _, f := range []struct {
			key string
			i64 *[]int64
			f32 *[]float32
		}{
			{"prompt_ids", &p.PromptIDs, nil}, {"greedy_ids", &p.GreedyIDs, nil}, {"argmax", &p.Argmax, nil},
			{"max_logit", nil, &p.MaxLogit}, {"margin", nil, &p.Margin},
		} {
			key := fmt.Sprintf("%s.%d", f.key, p.Index)
			if f.i64 != nil {
				t, err := need(key, "I64")
				if err != nil {
					return nil, err
				}
				*f.i64 = t.I64
			} else {
				t, err := need(key, "F32")
				if err != nil {
					return nil, err
				}
				*f.f32 = t.F32
			}
		}
		if n := len(p.PromptIDs) + len(p.GreedyIDs); len(p.Argmax) != n || len(p.MaxLogit) != n || len(p.Margin) != n {
			return nil, fmt.Errorf("hffixture: smollm2 prompt %d: per-position tensors do not cover its %d positions", p.Index, n)
		}
		if t := tensors[fmt.Sprintf("top_ids.%d", p.Index)]; t != nil {
			v, err := need(fmt.Sprintf("top_values.%d", p.Index), "F32")
			if err != nil {
				return nil, err
			}
			p.TopIDs, p.TopValues = t.I64, v.F32
		}
	}
	for _, rc := range doc.FullRows {
		t, err := need(fmt.Sprintf("full_row.%d.%d", rc[0], rc[1]), "F32")
		if err != nil {
			return nil, err
		}
		ref.FullRows[rc] = t.F32
	}
	return ref, nil
}
