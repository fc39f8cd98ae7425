package checkpoint

import (
	"fmt"
	"regexp"
)

// FusedExperts is a tensor holding every routed expert of a layer stacked on its first axis ([E, ...]), as
// gpt-oss, Llama 4 and Gemma 4 save them, which Open replaces by one tensor per expert: the split then stores,
// streams and checks each expert on its own, and the model binds it as it binds Mixtral's or Qwen-MoE's
// per-expert tensors. Expert e's slice is contiguous in the file, so it is a view of the fused tensor's bytes
// (Offset, Length), reordered on reading where Transposed or Interleaved say so.
type FusedExperts struct {
	// Name is the fused tensor's name after its layer's prefix ("mlp.experts.gate_up_proj").
	Name string
	// Expert is each expert's tensor name after the layer's prefix, %d standing for the expert
	// ("mlp.experts.%d.gate_up_proj.weight").
	Expert string
	// Transposed says each expert's matrix is stored [in, out]: it is given in Linear's [out, in] layout.
	Transposed bool
	// Interleaved says the gate and up rows of a fused gate_up matrix alternate (after transposition: row 2i is
	// gate row i, row 2i+1 up row i; for a bias, its values): they are given gate rows first, then up rows.
	Interleaved bool
	// Scales, when set, names the scales tensor of an MXFP4 pair whose blocks tensor is Name (gpt-oss's
	// released checkpoints: "mlp.experts.gate_up_proj_blocks" [E, out, in/32, 16] and "..._scales" [E, out,
	// in/32], uint8, already [out, in]): Open pairs them into one MXFP4 tensor [out, in] per expert (mxfp4.go).
	Scales string
}

// layerTensor matches the prefix of a decoder layer's tensor name, "….layers.N.".
var layerTensor = regexp.MustCompile(`^(.*\blayers\.\d+\.)(.+)$`)

// expandFused returns t, or t's per-expert tensors where it is one of fused (matched by its name after the
// layer's prefix).
func expandFused(t TensorInfo, fused []FusedExperts) ([]TensorInfo, error) {
	m := layerTensor.FindStringSubmatch(t.Name)
	if m == nil {
		return []TensorInfo{t}, nil
	}
	for _, f := range fused {
		if m[2] == f.Name {
			return SplitExperts(t, m[1]+f.Expert, f.Transposed, f.Interleaved)
		}
	}
	return []TensorInfo{t}, nil
}

// SplitExperts cuts t, every expert's tensor stacked on the first axis, into one tensor per expert named by
// name (a format with %d for the expert), each a view of its slice of t's bytes. transposed gives 2-D [in, out]
// slices in [out, in] order (float dtypes only); interleaved puts alternating gate/up rows (or values) into
// halves, gate first.
func SplitExperts(t TensorInfo, name string, transposed, interleaved bool) ([]TensorInfo, error) {
	if t.Transformed() {
		return nil, fmt.Errorf("tensor %q: a fused experts tensor that is itself reordered on reading is not supported", t.Name)
	}
	if len(t.Shape) < 2 || t.Shape[0] <= 0 {
		return nil, fmt.Errorf("tensor %q: shape %v is not experts stacked on the first axis ([experts, ...])", t.Name, t.Shape)
	}
	n := t.Shape[0]
	if t.Length%n != 0 {
		return nil, fmt.Errorf("tensor %q: %d bytes do not split into %d experts", t.Name, t.Length, n)
	}
	shape := append([]int64(nil), t.Shape[1:]...)
	if transposed {
		if len(shape) != 2 {
			return nil, fmt.Errorf("tensor %q: shape %v: only matrices ([experts, in, out]) are stored transposed", t.Name, t.Shape)
		}
		if t.DType != F32 && t.DType != BF16 && t.DType != F16 {
			return nil, fmt.Errorf("tensor %q: dtype %s: a transposed experts tensor must be float32, bfloat16 or float16 to be reordered", t.Name, t.DType)
		}
		shape[0], shape[1] = shape[1], shape[0]
	}
	if interleaved && shape[0]%2 != 0 {
		return nil, fmt.Errorf("tensor %q: %d gate/up rows per expert cannot be interleaved pairs", t.Name, shape[0])
	}
	per := t.Length / n
	out := make([]TensorInfo, n)
	for e := range n {
		out[e] = TensorInfo{Name: fmt.Sprintf(name, e), DType: t.DType, Shape: shape, File: t.File,
			Offset: t.Offset + e*per, Length: per, Transposed: transposed, InterleavedGateUp: interleaved}
	}
	return out, nil
}

// transpose2D reorders b, a row-major [cols, rows] matrix of size-byte elements, into [rows, cols].
func transpose2D(b []byte, rows, cols, size int) {
	transposeInto(b, append([]byte(nil), b...), cols, rows, size)
}

// transposeInto writes src, a row-major [n, m] matrix of size-byte elements, into dst as [m, n].
func transposeInto(dst, src []byte, n, m, size int) {
	for i := range n {
		for j := range m {
			copy(dst[(j*n+i)*size:][:size], src[(i*m+j)*size:][:size])
		}
	}
}

// uninterleaveHalves moves the odd rows of b (rows of equal size) after the even ones: gate/up pairs become a
// gate half then an up half.
func uninterleaveHalves(b []byte, rows int) {
	rb := len(b) / rows
	src := append([]byte(nil), b...)
	for i := range rows {
		to := i/2 + (i%2)*(rows/2)
		copy(b[to*rb:][:rb], src[i*rb:][:rb])
	}
}
