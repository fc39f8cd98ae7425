package reference

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
)

// Tensor is one tensor of a reference-outputs file, decoded. Exactly one of F32 and I64 is set, by DType.
type Tensor struct {
	Name  string
	DType string // "F32" or "I64"
	Shape []int
	F32   []float32
	I64   []int64
}

// Transformers are outputs transformers itself computed for a checkpoint (scripts/fixtures/make_hf_fixtures.py
// writes them as reference.safetensors beside each fixture): an independent reference, unlike this package's
// forward pass, which reads the checkpoint's config through the same code as the engine.
type Transformers struct {
	// InputIDs are the prompt ids.
	InputIDs []int64
	// Logits are transformers' float32 logits for every prompt position, row-major [len(InputIDs), Vocab].
	Logits []float32
	Vocab  int
	// GreedyIDs are the ids generate(do_sample=False) appended to InputIDs (may be empty).
	GreedyIDs []int64
	// Tensors holds every tensor of the file by name, the three above and any extra.
	Tensors map[string]*Tensor
}

// Row returns the logits of prompt position i.
func (r *Transformers) Row(i int) []float32 { return r.Logits[i*r.Vocab : (i+1)*r.Vocab] }

// Rows are the logits of every input position, Row(0) … Row(len(InputIDs)−1).
func (r *Transformers) Rows() [][]float32 {
	rows := make([][]float32, len(r.InputIDs))
	for i := range rows {
		rows[i] = r.Row(i)
	}
	return rows
}

// TransformersFile is the name of the reference outputs beside a checkpoint.
const TransformersFile = "reference.safetensors"

// LoadTransformers reads and checks reference outputs: input_ids int64 [n], logits f32 [n, vocab], and
// optionally greedy_ids int64 [m].
func LoadTransformers(path string) (*Transformers, error) {
	tensors, err := ReadTensors(path)
	if err != nil {
		return nil, err
	}
	get := func(key, dtype string, rank int, optional bool) (*Tensor, error) {
		t := tensors[key]
		if t == nil {
			if optional {
				return &Tensor{}, nil
			}
			return nil, fmt.Errorf("reference outputs %s: no tensor %q", path, key)
		}
		if t.DType != dtype || len(t.Shape) != rank {
			return nil, fmt.Errorf("reference outputs %s: tensor %q is %s %v, want %s of rank %d", path, key, t.DType, t.Shape, dtype, rank)
		}
		return t, nil
	}
	ids, err := get("input_ids", "I64", 1, false)
	if err != nil {
		return nil, err
	}
	logits, err := get("logits", "F32", 2, false)
	if err != nil {
		return nil, err
	}
	greedy, err := get("greedy_ids", "I64", 1, true)
	if err != nil {
		return nil, err
	}
	if logits.Shape[0] != len(ids.I64) || logits.Shape[1] == 0 {
		return nil, fmt.Errorf("reference outputs %s: logits %v do not match %d input ids", path, logits.Shape, len(ids.I64))
	}
	return &Transformers{InputIDs: ids.I64, Logits: logits.F32, Vocab: logits.Shape[1], GreedyIDs: greedy.I64, Tensors: tensors}, nil
}

// ReadTensors decodes every tensor of a small safetensors file holding F32 and I64 tensors, such as the
// reference outputs saved next to a checkpoint (checkpoint's parser is for weight dtypes and refuses I64).
func ReadTensors(path string) (map[string]*Tensor, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reference outputs: %w", err)
	}
	return parseTensors(b, path)
}

// maxReferenceElems bounds the elements of one tensor of reference outputs.
const maxReferenceElems = 1 << 30

// parseTensors decodes the safetensors file b (named path in errors). Offsets, lengths and shapes are checked
// against each other.
func parseTensors(b []byte, path string) (map[string]*Tensor, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("reference outputs: %s: %d bytes, too short for a safetensors header", path, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) {
		return nil, fmt.Errorf("reference outputs: %s: header length %d exceeds the file (%d bytes)", path, n, len(b))
	}
	var hdr map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &hdr); err != nil {
		return nil, fmt.Errorf("reference outputs: %s: header: %w", path, err)
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
			return nil, fmt.Errorf("reference outputs: %s: tensor %q: %w", path, key, err)
		}
		if len(raw.Offsets) != 2 || raw.Offsets[0] < 0 || raw.Offsets[1] < raw.Offsets[0] || raw.Offsets[1] > int64(len(data)) {
			return nil, fmt.Errorf("reference outputs: %s: tensor %q: bad data_offsets %v (data section %d bytes)", path, key, raw.Offsets, len(data))
		}
		elems := 1
		for _, d := range raw.Shape {
			if d < 0 || (d > 0 && elems > maxReferenceElems/d) {
				return nil, fmt.Errorf("reference outputs: %s: tensor %q: bad shape %v", path, key, raw.Shape)
			}
			elems *= d
		}
		buf := data[raw.Offsets[0]:raw.Offsets[1]]
		t := &Tensor{Name: key, DType: raw.DType, Shape: raw.Shape}
		switch raw.DType {
		case "F32":
			if len(buf) != 4*elems {
				return nil, fmt.Errorf("reference outputs: %s: tensor %q: %d bytes for shape %v of F32", path, key, len(buf), raw.Shape)
			}
			t.F32 = make([]float32, elems)
			for i := range t.F32 {
				t.F32[i] = math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:]))
			}
		case "I64":
			if len(buf) != 8*elems {
				return nil, fmt.Errorf("reference outputs: %s: tensor %q: %d bytes for shape %v of I64", path, key, len(buf), raw.Shape)
			}
			t.I64 = make([]int64, elems)
			for i := range t.I64 {
				t.I64[i] = int64(binary.LittleEndian.Uint64(buf[8*i:]))
			}
		default:
			return nil, fmt.Errorf("reference outputs: %s: tensor %q: dtype %q (this reader knows F32 and I64)", path, key, raw.DType)
		}
		out[key] = t
	}
	return out, nil
}
