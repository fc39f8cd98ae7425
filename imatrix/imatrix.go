// Package imatrix holds importance matrices: for each weight matrix of a model, the mean square of each of its
// input columns over a calibration text, as llama.cpp's imatrix tool collects them, keyed by Hugging Face tensor
// name. A split weights the error each quantized block minimizes by them (shards.SplitOptions.Importance), so
// that the weights that meet large inputs (the outlier activations of LLMs) are kept closest.
//
// The file is a safetensors file of one F32 vector per weight matrix, named as the matrix; `layerstream imatrix`
// writes one.
package imatrix

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/atomicfile"
)

// Matrix is an importance matrix: Columns[name][j] is the mean of x_j² over the inputs x that weight matrix name
// (a [rows, cols] matrix, j < cols) was multiplied with.
type Matrix struct {
	Columns map[string][]float32
}

// maxColumns bounds one vector (the widest matrices have tens of thousands of inputs).
const maxColumns = 1 << 24

// Read reads and validates an importance matrix file: every tensor a non-empty F32 vector of finite,
// non-negative values, named as a weight ("….weight").
func Read(path string) (*Matrix, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	infos, err := checkpoint.ParseSafetensors(f, st.Size(), path)
	if err != nil {
		return nil, fmt.Errorf("imatrix: %w", err)
	}
	if len(infos) == 0 {
		return nil, fmt.Errorf("imatrix %s: no tensors", path)
	}
	m := &Matrix{Columns: make(map[string][]float32, len(infos))}
	for _, t := range infos {
		switch {
		case !strings.HasSuffix(t.Name, ".weight"):
			return nil, fmt.Errorf("imatrix %s: tensor %q: want the name of a weight matrix (….weight)", path, t.Name)
		case t.DType != checkpoint.F32 || len(t.Shape) != 1 || t.Shape[0] == 0 || t.Shape[0] > maxColumns:
			return nil, fmt.Errorf("imatrix %s: tensor %q is %s %v, want a non-empty F32 vector (one value per input column)", path, t.Name, t.DType, t.Shape)
		}
		b := make([]byte, t.Length)
		if _, err := f.ReadAt(b, t.Offset); err != nil {
			return nil, fmt.Errorf("imatrix %s: tensor %q: %w", path, t.Name, err)
		}
		v := make([]float32, t.Shape[0])
		for j := range v {
			v[j] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*j:]))
			if !(v[j] >= 0) || math.IsInf(float64(v[j]), 1) {
				return nil, fmt.Errorf("imatrix %s: tensor %q: column %d is %g, want a finite mean square (≥ 0)", path, t.Name, j, v[j])
			}
		}
		m.Columns[t.Name] = v
	}
	return m, nil
}

// names returns the matrix's tensor names, sorted.
func (m *Matrix) names() []string {
	names := make([]string, 0, len(m.Columns))
	for n := range m.Columns {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Write writes m to path atomically as a safetensors file, with meta (strings: the calibration text, the token
// count) as its __metadata__.
func (m *Matrix) Write(path string, meta map[string]string) error {
	header := map[string]any{}
	if len(meta) > 0 {
		header["__metadata__"] = meta
	}
	var off int64
	names := m.names()
	for _, n := range names {
		size := 4 * int64(len(m.Columns[n]))
		header[n] = map[string]any{"dtype": "F32", "shape": []int{len(m.Columns[n])}, "data_offsets": []int64{off, off + size}}
		off += size
	}
	js, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("imatrix: %w", err)
	}
	js = append(js, bytes.Repeat([]byte(" "), (8-len(js)%8)%8)...) // the data starts 8-byte aligned
	err = atomicfile.Write(path, func(w io.Writer) error {
		if err := binary.Write(w, binary.LittleEndian, uint64(len(js))); err != nil {
			return err
		}
		if _, err := w.Write(js); err != nil {
			return err
		}
		for _, n := range names {
			if err := binary.Write(w, binary.LittleEndian, m.Columns[n]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("imatrix: writing %s: %w", path, err)
	}
	return nil
}

// Hash is a SHA-256 of m's names and values, in hex: what a split records, so that quantizing with another
// matrix is noticed.
func (m *Matrix) Hash() string {
	h := sha256.New()
	for _, n := range m.names() {
		h.Write([]byte(n))
		h.Write([]byte{0})
		binary.Write(h, binary.LittleEndian, uint64(len(m.Columns[n])))
		binary.Write(h, binary.LittleEndian, m.Columns[n])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Collector accumulates an importance matrix from the inputs of matrix products (engine.Options.ObserveInputs).
// It is safe for concurrent use.
type Collector struct {
	mu    sync.Mutex
	sums  map[string][]float64
	count map[string]int64
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{sums: map[string][]float64{}, count: map[string]int64{}}
}

// Observe adds the input rows x (cols values each) that weight matrix name was multiplied with.
func (c *Collector) Observe(name string, x []float32, cols int) {
	if cols <= 0 || len(x) < cols {
		return
	}
	rows := len(x) / cols
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sums[name]
	if s == nil {
		s = make([]float64, cols)
		c.sums[name] = s
	} else if len(s) != cols {
		panic(fmt.Sprintf("imatrix: %s multiplied with rows of %d and of %d values", name, len(s), cols))
	}
	for r := range rows {
		for j, v := range x[r*cols : (r+1)*cols] {
			s[j] += float64(v) * float64(v)
		}
	}
	c.count[name] += int64(rows)
}

// Matrix returns the means collected so far.
func (c *Collector) Matrix() *Matrix {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := &Matrix{Columns: make(map[string][]float32, len(c.sums))}
	for n, s := range c.sums {
		v := make([]float32, len(s))
		for j, x := range s {
			v[j] = float32(x / float64(c.count[n]))
		}
		m.Columns[n] = v
	}
	return m
}
