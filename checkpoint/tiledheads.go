package checkpoint

import (
	"encoding/binary"
	"fmt"
	"math"
)

// TiledHeads says a tensor's value heads are stored in llama.cpp's tiled order, as its converter writes the
// Gated DeltaNet tensors of Qwen3.5 (and Qwen3.5-MoE) when there are more value heads than key heads: Hugging
// Face groups the value heads by the key head they share ([Groups][PerGroup][Size]), llama.cpp tiles them
// ([PerGroup][Groups][Size]) so ggml's broadcast pairs each with its key head. ReadTensorAt puts them back in
// Hugging Face's grouped order. The zero value (Groups 0) means no reordering.
type TiledHeads struct {
	// Groups is the number of key heads, PerGroup the value heads per key head, Size the rows (or, with
	// Columns, the values of each row) of one value head.
	Groups, PerGroup, Size int
	// Offset is the rows (or values of each row) before the first value head: the q and k rows of in_proj_qkv
	// and of the conv1d kernel.
	Offset int
	// Columns: the heads lie along the last dimension (out_proj's input), not the rows. Only float32, bfloat16
	// and float16 values can move one by one.
	Columns bool
}

// untile puts the value heads of b (t's bytes) back in grouped order.
func (h TiledHeads) untile(b []byte, t TensorInfo) error {
	if len(t.Shape) == 0 || t.Shape[0] <= 0 || len(b)%int(t.Shape[0]) != 0 {
		return fmt.Errorf("cannot undo llama.cpp's tiled value heads: shape %v", t.Shape)
	}
	rows := int(t.Shape[0])
	rowBytes := len(b) / rows
	n := h.Groups * h.PerGroup * h.Size
	if !h.Columns {
		if h.Offset+n != rows {
			return fmt.Errorf("cannot undo llama.cpp's tiled value heads: %d rows, want %d before %d heads of %d", rows, h.Offset, h.Groups*h.PerGroup, h.Size)
		}
		untileBlocks(b[h.Offset*rowBytes:], h.Groups, h.PerGroup, h.Size*rowBytes)
		return nil
	}
	size := t.DType.Size()
	if t.DType != F32 && t.DType != BF16 && t.DType != F16 {
		return fmt.Errorf("cannot undo llama.cpp's tiled value heads along the columns of a %s tensor (float32, bfloat16 and float16 only: blocks of quantized values span heads)", t.DType)
	}
	if h.Offset+n != rowBytes/size {
		return fmt.Errorf("cannot undo llama.cpp's tiled value heads: %d columns, want %d before %d heads of %d", rowBytes/size, h.Offset, h.Groups*h.PerGroup, h.Size)
	}
	for r := range rows {
		untileBlocks(b[r*rowBytes+h.Offset*size:(r+1)*rowBytes], h.Groups, h.PerGroup, h.Size*size)
	}
	return nil
}

// untileBlocks reorders b, groups·perGroup blocks of unit bytes, from [perGroup][groups] to [groups][perGroup].
func untileBlocks(b []byte, groups, perGroup, unit int) {
	src := append([]byte(nil), b[:groups*perGroup*unit]...)
	for g := range groups {
		for j := range perGroup {
			copy(b[(g*perGroup+j)*unit:][:unit], src[(j*groups+g)*unit:][:unit])
		}
	}
}

// logNegValues replaces each float32 value a of b by log(-a): llama.cpp's converter stores Qwen3-Next's and
// Qwen3.5's A_log as a = -exp(A_log). Rounded to float32, exp of the result gives -a back within an ulp.
func logNegValues(b []byte, d DType) error {
	if d != F32 {
		return fmt.Errorf("cannot take log(-a) of %s values (llama.cpp's -exp(A_log); float32 only)", d)
	}
	for i := 0; i+4 <= len(b); i += 4 {
		a := math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
		if !(a < 0) || math.IsInf(float64(a), -1) {
			return fmt.Errorf("value [%d] is %g: llama.cpp stores -exp(A_log), a finite negative number", i/4, a)
		}
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(math.Log(-float64(a)))))
	}
	return nil
}
