package hffixture

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Tensor is one tensor of a reference file, decoded. Exactly one of F32 and I64 is set, by DType.
type Tensor struct {
	Name  string
	DType string // "F32" or "I64"
	Shape []int
	F32   []float32
	I64   []int64
}

// Reference is the content of a fixture's reference.safetensors.
type Reference struct {
	// InputIDs are the prompt ids (40 in every fixture).
	InputIDs []int64
	// Logits are transformers' float32 logits for every prompt position, row-major [len(InputIDs), Vocab].
	Logits []float32
	Vocab  int
	// GreedyIDs are the ids generate(do_sample=False) appended to InputIDs.
	GreedyIDs []int64
	// Tensors holds every tensor of the file by name, the three above and any per-fixture extra
	// (testdata/hf/README.md lists them).
	Tensors map[string]*Tensor
}

// Row returns the logits of prompt position i.
func (r *Reference) Row(i int) []float32 { return r.Logits[i*r.Vocab : (i+1)*r.Vocab] }

// LoadReference reads and checks the named fixture's reference.safetensors: input_ids int64 [n], logits f32
// [n, vocab], greedy_ids int64 [m].
func LoadReference(name string) (*Reference, error) {
	dir, err := Dir(name)
	if err != nil {
		return nil, err
	}
	tensors, err := ReadSafetensors(filepath.Join(dir, ReferenceFile))
	if err != nil {
		return nil, err
	}
	get := func(key, dtype string, rank int) (*Tensor, error) {
		t := tensors[key]
		if t == nil {
			return nil, fmt.Errorf("hffixture %s: %s lacks tensor %q", name, ReferenceFile, key)
		}
		if t.DType != dtype || len(t.Shape) != rank {
			return nil, fmt.Errorf("hffixture %s: tensor %q is %s %v, want %s of rank %d", name, key, t.DType, t.Shape, dtype, rank)
		}
		return t, nil
	}
	ids, err := get("input_ids", "I64", 1)
	if err != nil {
		return nil, err
	}
	logits, err := get("logits", "F32", 2)
	if err != nil {
		return nil, err
	}
	greedy, err := get("greedy_ids", "I64", 1)
	if err != nil {
		return nil, err
	}
	if logits.Shape[0] != len(ids.I64) {
		return nil, fmt.Errorf("hffixture %s: logits %v do not match %d input ids", name, logits.Shape, len(ids.I64))
	}
	return &Reference{InputIDs: ids.I64, Logits: logits.F32, Vocab: logits.Shape[1], GreedyIDs: greedy.I64, Tensors: tensors}, nil
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

// ReadSafetensors decodes every tensor of a small safetensors file holding F32 and I64 tensors (checkpoint's
// parser is for weight dtypes and refuses I64). Offsets, lengths and shapes are checked against each other.
func ReadSafetensors(path string) (map[string]*Tensor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hffixture: %w", err)
	}
	if len(b) < 8 {
		return nil, fmt.Errorf("hffixture: %s: %d bytes, too short for a safetensors header", path, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("hffixture: %s: header length %d exceeds the file (%d bytes)", path, n, len(b))
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		return nil, fmt.Errorf("hffixture: %s: header: %w", path, err)
	}
	data := b[8+n:]
	out := make(map[string]*Tensor, len(hdr))
	for key, msg := range hdr {
		if key == "__metadata__" {
			continue
		}
		var raw struct {
			DType   string  `json:"dtype"`
			Shape   []int   `json:"shape"`
			Offsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &raw); err != nil {
			return nil, fmt.Errorf("hffixture: %s: tensor %q: %w", path, key, err)
		}
		if len(raw.Offsets) != 2 || raw.Offsets[0] < 0 || raw.Offsets[1] < raw.Offsets[0] || raw.Offsets[1] > int64(len(data)) {
			return nil, fmt.Errorf("hffixture: %s: tensor %q: bad data_offsets %v (data section %d bytes)", path, key, raw.Offsets, len(data))
		}
		elems := 1
		for _, d := range raw.Shape {
			if d < 0 || (d > 0 && elems > math.MaxInt32/d) {
				return nil, fmt.Errorf("hffixture: %s: tensor %q: bad shape %v", path, key, raw.Shape)
			}
			elems *= d
		}
		buf := data[raw.Offsets[0]:raw.Offsets[1]]
		t := &Tensor{Name: key, DType: raw.DType, Shape: raw.Shape}
		switch raw.DType {
		case "F32":
			if len(buf) != 4*elems {
				return nil, fmt.Errorf("hffixture: %s: tensor %q: %d bytes for shape %v of F32", path, key, len(buf), raw.Shape)
			}
			t.F32 = make([]float32, elems)
			for i := range t.F32 {
				t.F32[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
			}
		case "I64":
			if len(buf) != 8*elems {
				return nil, fmt.Errorf("hffixture: %s: tensor %q: %d bytes for shape %v of I64", path, key, len(buf), raw.Shape)
			}
			t.I64 = make([]int64, elems)
			for i := range t.I64 {
				t.I64[i] = int64(binary.LittleEndian.Uint64(buf[8*i:]))
			}
		default:
			return nil, fmt.Errorf("hffixture: %s: tensor %q: dtype %q (this reader knows F32 and I64)", path, key, raw.DType)
		}
		out[key] = t
	}
	return out, nil
}

// SortedKeys returns the tensor names of a decoded file, sorted.
func SortedKeys(m map[string]*Tensor) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
