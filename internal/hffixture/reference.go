package hffixture

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/layerstream/layerstream/reference"
)

// Tensor is one tensor of a reference file, decoded (reference.Tensor).
type Tensor = reference.Tensor

// Reference is the content of a fixture's reference.safetensors (reference.Transformers; every fixture has 40
// input ids and 20 greedy ids).
type Reference = reference.Transformers

// LoadReference reads and checks the named fixture's reference.safetensors: input_ids int64 [n], logits f32
// [n, vocab], greedy_ids int64 [m].
func LoadReference(name string) (*Reference, error) {
	dir, err := Dir(name)
	if err != nil {
		return nil, err
	}
	r, err := reference.LoadTransformers(filepath.Join(dir, ReferenceFile))
	if err != nil {
		return nil, fmt.Errorf("hffixture %s: %w", name, err)
	}
	if r.GreedyIDs == nil {
		return nil, fmt.Errorf("hffixture %s: %s lacks tensor \"greedy_ids\"", name, ReferenceFile)
	}
	return r, nil
}

// MustReference is LoadReference failing the test on error.
func MustReference(t testing.TB, name string) *Reference {
	t.Helper()
	r, err := LoadReference(name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ReadSafetensors decodes every tensor of a small safetensors file holding F32 and I64 tensors
// (reference.ReadTensors).
func ReadSafetensors(path string) (map[string]*Tensor, error) { return reference.ReadTensors(path) }
