package engine

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
)

// Unit names (docs/DESIGN.md): a checkpoint splits into embed, layer.N, norm and lm_head.
const (
	unitEmbed  = "embed"
	unitNorm   = "norm"
	unitLMHead = "lm_head"
)

func layerUnit(i int) string { return "layer." + strconv.Itoa(i) }

// Tensor names of the non-layer units.
const (
	embedWeight  = "model.embed_tokens.weight"
	normWeight   = "model.norm.weight"
	lmHeadWeight = "lm_head.weight"
)

// rawTensor is one tensor of a loaded unit; Data aliases the host buffer it was read into.
type rawTensor struct {
	Name  string
	DType checkpoint.DType
	Shape []int64
	Data  []byte
}

// loadedUnit is a unit's tensors read into a host buffer.
type loadedUnit struct {
	Unit       string
	Tensors    map[string]rawTensor
	ReadBytes  int64
	ReadTime   time.Duration
	DecodeTime time.Duration
}

// hostBuffer is a reusable host buffer that a source reads units into.
type hostBuffer struct {
	b []byte
}

// source is where unit weights come from.
type source interface {
	Config() *checkpoint.Config
	Generation() *checkpoint.GenerationConfig
	// Dir holds the tokenizer files.
	Dir() string
	HasUnit(unit string) bool
	// NewBuffer returns a host buffer large enough for any unit.
	NewBuffer() *hostBuffer
	// Load reads a unit into buf; the tensors alias buf until the next Load into it.
	Load(ctx context.Context, unit string, buf *hostBuffer) (*loadedUnit, error)
}

// unitOf maps a Hugging Face tensor name to its unit.
func unitOf(name string) (string, error) {
	switch {
	case strings.HasPrefix(name, "model.embed_tokens."):
		return unitEmbed, nil
	case strings.HasPrefix(name, "model.norm."):
		return unitNorm, nil
	case strings.HasPrefix(name, "lm_head."):
		return unitLMHead, nil
	case strings.HasPrefix(name, "model.layers."):
		rest := strings.TrimPrefix(name, "model.layers.")
		n, _, ok := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(n); ok && err == nil && i >= 0 {
			return layerUnit(i), nil
		}
	}
	return "", fmt.Errorf("tensor %q belongs to no unit (embed, layer.N, norm, lm_head)", name)
}

// checkpointSource reads units straight from a Hugging Face checkpoint's safetensors files, one read per
// tensor. It serves tests and small models; shard folders read each unit with one sequential read.
type checkpointSource struct {
	ck       *checkpoint.Checkpoint
	units    map[string][]checkpoint.TensorInfo
	maxBytes int
}

func newCheckpointSource(ck *checkpoint.Checkpoint) (*checkpointSource, error) {
	s := &checkpointSource{ck: ck, units: map[string][]checkpoint.TensorInfo{}}
	size := map[string]int{}
	for _, t := range ck.Tensors {
		u, err := unitOf(t.Name)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", ck.Dir, err)
		}
		s.units[u] = append(s.units[u], t)
		size[u] += alignUp(int(t.Length))
		s.maxBytes = max(s.maxBytes, size[u])
	}
	return s, nil
}

func alignUp(n int) int { return (n + 63) &^ 63 }

func (s *checkpointSource) Config() *checkpoint.Config               { return s.ck.Config }
func (s *checkpointSource) Generation() *checkpoint.GenerationConfig { return s.ck.Generation }
func (s *checkpointSource) Dir() string                              { return s.ck.Dir }
func (s *checkpointSource) HasUnit(unit string) bool                 { return len(s.units[unit]) > 0 }
func (s *checkpointSource) NewBuffer() *hostBuffer                   { return &hostBuffer{b: make([]byte, s.maxBytes)} }

func (s *checkpointSource) Load(ctx context.Context, unit string, buf *hostBuffer) (*loadedUnit, error) {
	infos, ok := s.units[unit]
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: no tensors for unit %q", s.ck.Dir, unit)
	}
	start := time.Now()
	l := &loadedUnit{Unit: unit, Tensors: make(map[string]rawTensor, len(infos))}
	off := 0
	for _, t := range infos {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dst := buf.b[off : off+int(t.Length)]
		if err := checkpoint.ReadTensorAt(t, dst); err != nil {
			return nil, fmt.Errorf("unit %s: %w", unit, err)
		}
		l.Tensors[t.Name] = rawTensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Data: dst}
		l.ReadBytes += t.Length
		off += alignUp(int(t.Length))
	}
	l.ReadTime = time.Since(start)
	return l, nil
}
