package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
)

// MaxHeaderSize bounds a safetensors JSON header (the reference implementation uses 100 MB).
const MaxHeaderSize = 100 << 20

// TensorInfo locates one tensor inside a file.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int64
	// File is the path of the file that holds the bytes.
	File string
	// Offset is the absolute byte offset of the data in File; Length its byte count.
	Offset, Length int64
	// InterleavedRotaryHeads, when positive, says the rows (the first dimension) are stored in llama.cpp's
	// interleaved rotary order over that many heads, as its converter writes the q/k projections of Llama
	// models into GGUF files: ReadTensorAt puts them back in Hugging Face's rotate-half order. Whole rows move,
	// so a quantized row keeps its blocks.
	InterleavedRotaryHeads int
	// Shift, when not zero, is added to every value (a float32, bfloat16 or float16 tensor): llama.cpp's
	// converter stores Gemma's RMSNorm weights w, which Hugging Face applies as x·(1 + w), as 1 + w, and
	// ReadTensorAt gives back w with Shift -1 (exact for stored values in [0.5, 2]).
	Shift float32
	// Transposed, for one expert's matrix cut from a fused experts tensor (SplitExperts), says its bytes are
	// stored [Shape[1], Shape[0]]: ReadTensorAt gives them in Shape's order.
	Transposed bool
	// InterleavedGateUp says the rows (after Transposed) alternate gate and up rows: ReadTensorAt puts the gate
	// rows first, then the up rows.
	InterleavedGateUp bool
	// Second, when its Length is not 0, is a second range of File holding the tensor's last Second.Length stored
	// bytes: Offset locates the first part and Length counts both. Ranges lists the parts. An expert's gate and up
	// projections stored apart (a GGUF file's ffn_gate_exps and ffn_up_exps) read so as one gate_up tensor.
	Second Range
	// MXFP4Pair says the two parts are an MXFP4 matrix's blocks and scales as Hugging Face's checkpoints store
	// them (FusedExperts.Scales): Transform makes ggml's MXFP4 blocks of them (quant.MXFP4FromSplit).
	MXFP4Pair bool
	// Rows, when set, says the tensor is a part of each head's rows of the matrix stored at Offset
	// (Rows.Stored bytes, of which Length is this part's; HeadParts): ReadTensorAt gathers them.
	Rows *RowSelection
	// NegExp says a float32 tensor holds -exp(w) rather than w (llama.cpp's ssm_a, which its converter writes
	// from a Gated DeltaNet's A_log): ReadTensorAt gives back w = log(-x).
	NegExp bool
}

// Range is Length bytes from Offset of a file.
type Range struct{ Offset, Length int64 }

// Ranges are the byte ranges of File holding t's stored bytes, in order: one (the whole matrix a part of rows is
// cut from, Rows), or two (Second).
func (t TensorInfo) Ranges() []Range {
	switch {
	case t.Rows != nil:
		return []Range{{t.Offset, t.Rows.Stored}}
	case t.Second.Length == 0:
		return []Range{{t.Offset, t.Length}}
	}
	return []Range{{t.Offset, t.Length - t.Second.Length}, t.Second}
}

// Transformed reports whether t's values are not one range of its file as stored: reading t changes its stored
// bytes (Transform), gathers its rows (Rows) or joins two ranges (Second).
func (t TensorInfo) Transformed() bool {
	return t.InterleavedRotaryHeads > 0 || t.Shift != 0 || t.Transposed || t.InterleavedGateUp || t.Second.Length > 0 ||
		t.NegExp || t.Rows != nil
}

// Transform turns b, t's stored bytes, into the tensor's values: an MXFP4 pair's blocks and scales made ggml's
// blocks (MXFP4Pair), a fused expert's matrix transposed and its
// gate/up rows put in halves (Transposed, InterleavedGateUp), the rows put back in Hugging Face's rotary order
// (InterleavedRotaryHeads), Shift added, -exp undone (NegExp).
func (t TensorInfo) Transform(b []byte) error {
	if t.MXFP4Pair {
		if err := pairMXFP4(b, t.Second.Length); err != nil {
			return err
		}
	}
	if t.NegExp {
		return logNeg(b, t)
	}
	if t.Transposed {
		transpose2D(b, int(t.Shape[0]), int(t.Shape[1]), t.DType.Size())
	}
	if t.InterleavedGateUp {
		uninterleaveHalves(b, int(t.Shape[0]))
	}
	if t.InterleavedRotaryHeads > 0 {
		if err := UninterleaveRotaryRows(b, t.Shape, t.InterleavedRotaryHeads); err != nil {
			return err
		}
	}
	if t.Shift != 0 {
		return ShiftValues(b, t.DType, t.Shift)
	}
	return nil
}

// NumElements is the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// ParseSafetensors reads and validates the header of a safetensors file of the given size. name is used in
// error messages and recorded as TensorInfo.File. Tensors come back sorted by offset.
//
// Validation: the header length fits the file, the JSON is well formed, every dtype is known, every shape is
// non-negative, every byte range lies inside the data section, ranges do not overlap, and each range's length
// equals product(shape) × dtype size.
func ParseSafetensors(r io.ReaderAt, size int64, name string) ([]TensorInfo, error) {
	if size < 8 {
		return nil, fmt.Errorf("safetensors %s: file is %d bytes, too short for a header", name, size)
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading header length: %w", name, err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize || int64(n) > size-8 {
		return nil, fmt.Errorf("safetensors %s: header length %d does not fit the file (%d bytes; truncated or not a safetensors file)", name, n, size)
	}
	hdr := make([]byte, n)
	if _, err := r.ReadAt(hdr, 8); err != nil {
		return nil, fmt.Errorf("safetensors %s: reading header: %w", name, err)
	}
	return parseHeader(hdr, 8+int64(n), size, name)
}

type rawTensor struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

func parseHeader(hdr []byte, dataStart, size int64, name string) ([]TensorInfo, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("safetensors %s: malformed header JSON: %w", name, err)
	}
	// Writers pad the header with spaces; anything else after the JSON object means a corrupted header.
	if rest := bytes.Trim(hdr[dec.InputOffset():], " \t\r\n\x00"); len(rest) > 0 {
		return nil, fmt.Errorf("safetensors %s: %d unexpected bytes after the header JSON (corrupted header?)", name, len(rest))
	}
	dataLen := size - dataStart
	out := make([]TensorInfo, 0, len(raw))
	for key, msg := range raw {
		if key == "__metadata__" {
			continue
		}
		var rt rawTensor
		if err := json.Unmarshal(msg, &rt); err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %q: malformed entry: %w", name, key, err)
		}
		dt, err := ParseDType(rt.DType)
		if rt.DType == string(U8) { // MXFP4 blocks and scales (Open refuses any other)
			dt, err = U8, nil
		}
		if err == nil && dt.Size() == 0 {
			err = fmt.Errorf("unsupported dtype %q (supported: F32, BF16, F16)", rt.DType)
		}
		if err != nil {
			return nil, fmt.Errorf("safetensors %s: tensor %q: %w", name, key, err)
		}
		if len(rt.DataOffsets) != 2 {
			return nil, fmt.Errorf("safetensors %s: tensor %q: data_offsets must have 2 entries, got %d", name, key, len(rt.DataOffsets))
		}
		begin, end := rt.DataOffsets[0], rt.DataOffsets[1]
		if begin < 0 || end < begin || end > dataLen {
			return nil, fmt.Errorf("safetensors %s: tensor %q: data_offsets [%d, %d] outside the data section (%d bytes)", name, key, begin, end, dataLen)
		}
		elems := int64(1)
		for _, d := range rt.Shape {
			if d < 0 {
				return nil, fmt.Errorf("safetensors %s: tensor %q: negative dimension in shape %v", name, key, rt.Shape)
			}
			if d != 0 && elems > math.MaxInt64/8/d {
				return nil, fmt.Errorf("safetensors %s: tensor %q: shape %v is too large", name, key, rt.Shape)
			}
			elems *= d
		}
		if want := elems * int64(dt.Size()); want != end-begin {
			return nil, fmt.Errorf("safetensors %s: tensor %q: shape %v of %s needs %d bytes, data_offsets span %d", name, key, rt.Shape, dt, want, end-begin)
		}
		out = append(out, TensorInfo{Name: key, DType: dt, Shape: rt.Shape, File: name, Offset: dataStart + begin, Length: end - begin})
	}
	slices.SortFunc(out, func(a, b TensorInfo) int {
		if a.Offset != b.Offset {
			return int(a.Offset - b.Offset)
		}
		return int(a.Length - b.Length)
	})
	for i := 1; i < len(out); i++ {
		if prev := out[i-1]; out[i].Offset < prev.Offset+prev.Length {
			return nil, fmt.Errorf("safetensors %s: tensors %q and %q overlap", name, prev.Name, out[i].Name)
		}
	}
	return out, nil
}

// logNeg replaces each float32 x of b, which must be negative, by log(-x) (TensorInfo.NegExp).
func logNeg(b []byte, t TensorInfo) error {
	if t.DType != F32 {
		return fmt.Errorf("tensor %s: -exp(w) stored as %s: only float32 is implemented", t.Name, t.DType)
	}
	for i := 0; i+4 <= len(b); i += 4 {
		x := math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
		if !(x < 0) {
			return fmt.Errorf("tensor %s holds %g where -exp(w) is negative", t.Name, x)
		}
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(math.Log(-float64(x)))))
	}
	return nil
}
