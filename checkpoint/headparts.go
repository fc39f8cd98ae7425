package checkpoint

import (
	"fmt"
	"io"

	"github.com/layerstream/layerstream/internal/grow"
)

// HeadParts is a matrix whose rows hold, head after head, the rows of two or more weights (DeepSeek-V3's
// kv_b_proj: per head the key part's rows, then the value's), which Open replaces by one tensor per part, so
// that the split stores, and the model binds, each part on its own; a part may be given transposed head by head
// (the key part, which the absorbed attention multiplies from the other side: stored so, its product reads whole
// rows, as llama.cpp's converter stores attn_k_b).
type HeadParts struct {
	// Name is the matrix's name after its layer's prefix ("self_attn.kv_b_proj.weight").
	Name string
	// Heads is the number of heads the rows are grouped in.
	Heads int
	// Parts are each head's rows in order: every head holds Σ Rows rows.
	Parts []HeadPart
}

// HeadPart is one part of a HeadParts matrix.
type HeadPart struct {
	// Name is the part's tensor name after the layer's prefix ("self_attn.k_b_proj.weight").
	Name string
	// Rows is the part's rows per head.
	Rows int
	// Transposed gives each head's [Rows, cols] block as [cols, Rows]: the tensor is [Heads·cols, Rows].
	Transposed bool
}

// RowSelection says a tensor's values are a part of each head's rows of a stored matrix (HeadParts): rows
// [From, From+N) of every head's Per rows of Cols values, each head's block transposed where Transposed says so.
type RowSelection struct {
	Heads, Per, From, N, Cols int
	Transposed                bool
	// Stored is the byte count of the whole stored matrix at TensorInfo.Offset.
	Stored int64
}

// expandHeadParts returns t, or its parts where it is one of parts (matched by its name after the layer's prefix).
func expandHeadParts(t TensorInfo, parts []HeadParts) ([]TensorInfo, error) {
	m := layerTensor.FindStringSubmatch(t.Name)
	if m == nil {
		return []TensorInfo{t}, nil
	}
	for _, p := range parts {
		if m[2] == p.Name {
			return SplitHeads(t, m[1], p)
		}
	}
	return []TensorInfo{t}, nil
}

// SplitHeads cuts t, a float matrix of p.Heads heads' rows, into p's parts (named prefix + part's name), each a
// selection of t's bytes (TensorInfo.Rows).
func SplitHeads(t TensorInfo, prefix string, p HeadParts) ([]TensorInfo, error) {
	per := 0
	for _, q := range p.Parts {
		per += q.Rows
	}
	switch {
	case t.Transformed():
		return nil, fmt.Errorf("tensor %q: a matrix of heads' parts that is itself reordered on reading is not supported", t.Name)
	case t.DType != F32 && t.DType != BF16 && t.DType != F16:
		return nil, fmt.Errorf("tensor %q: dtype %s: its heads' parts (%s) are cut apart on reading, which needs float32, bfloat16 or float16", t.Name, t.DType, partNames(p))
	case len(t.Shape) != 2 || p.Heads <= 0 || t.Shape[0] != int64(p.Heads*per):
		return nil, fmt.Errorf("tensor %q: shape %v, want [%d heads × %d rows (%s), columns]", t.Name, t.Shape, p.Heads, per, partNames(p))
	}
	cols, size, from := int(t.Shape[1]), int64(t.DType.Size()), 0
	out := make([]TensorInfo, len(p.Parts))
	for i, q := range p.Parts {
		shape := []int64{int64(p.Heads * q.Rows), int64(cols)}
		if q.Transposed {
			shape = []int64{int64(p.Heads * cols), int64(q.Rows)}
		}
		out[i] = TensorInfo{Name: prefix + q.Name, DType: t.DType, Shape: shape, File: t.File, Offset: t.Offset,
			Length: int64(p.Heads*q.Rows*cols) * size,
			Rows:   &RowSelection{Heads: p.Heads, Per: per, From: from, N: q.Rows, Cols: cols, Transposed: q.Transposed, Stored: t.Length}}
		from += q.Rows
	}
	return out, nil
}

// partNames lists p's part names.
func partNames(p HeadParts) string {
	s := ""
	for i, q := range p.Parts {
		if i > 0 {
			s += ", "
		}
		s += q.Name
	}
	return s
}

// StoredLength is the byte count read from t's file at Offset: Length, or the whole matrix t is a part of.
func (t TensorInfo) StoredLength() int64 {
	if t.Rows != nil {
		return t.Rows.Stored
	}
	return t.Length
}

// Values turns stored, t's StoredLength bytes as read from its file, into the tensor's Length bytes: reordered
// in place (Transform), or for a part of a matrix (Rows) its rows gathered into *buf (grown as needed).
func (t TensorInfo) Values(stored []byte, buf *[]byte) ([]byte, error) {
	if int64(len(stored)) != t.StoredLength() {
		return nil, fmt.Errorf("tensor %q: %d bytes read, %d stored", t.Name, len(stored), t.StoredLength())
	}
	if t.Rows == nil {
		return stored, t.Transform(stored)
	}
	*buf = grow.Slice(*buf, int(t.Length))
	t.Rows.gather((*buf)[:t.Length], stored, t.DType.Size())
	return (*buf)[:t.Length], nil
}

// ReadValues reads t from r (its file) into its values (Values), stored and buf reused when large enough.
func ReadValues(r io.ReaderAt, t TensorInfo, stored, buf *[]byte) ([]byte, error) {
	*stored = grow.Slice(*stored, int(t.StoredLength()))
	b := (*stored)[:t.StoredLength()]
	at := b
	for _, rg := range t.Ranges() {
		if _, err := r.ReadAt(at[:rg.Length], rg.Offset); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("tensor %q in %s: %w", t.Name, t.File, err)
		}
		at = at[rg.Length:]
	}
	return t.Values(b, buf)
}

// gather copies the selected rows of src (the whole matrix) into dst, each head's block transposed if asked.
func (s *RowSelection) gather(dst, src []byte, size int) {
	rb := s.Cols * size
	for h := range s.Heads {
		blk := src[(h*s.Per+s.From)*rb:][:s.N*rb]
		out := dst[h*s.N*rb:][:s.N*rb]
		if !s.Transposed {
			copy(out, blk)
			continue
		}
		transposeInto(out, blk, s.N, s.Cols, size)
	}
}
