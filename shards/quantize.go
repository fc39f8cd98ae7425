package shards

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/imatrix"
	"github.com/layerstream/layerstream/internal/grow"
	"github.com/layerstream/layerstream/quant"
)

// Quantization is how Split stores weight matrices: as they are (None), or block-quantized (Q8, Q4).
type Quantization string

// The quantizations. Q8 stores decoder-layer matrices and an untied lm_head as Q8_0 (8.5 bits a weight: 32
// int8 and one float16 scale per block, chosen by quant.QuantizeQ8_0Search). Q4 stores decoder-layer matrices as Q4_K (4.5 bits a weight: 256-element
// super-blocks of 32-element sub-blocks, each with a 6-bit scale and minimum) where their rows are a whole
// number of 256 elements, else as q4Fallback, and an untied lm_head as Q8_0 (it is not streamed, and the
// logits are sensitive to it). Embeddings and norms keep their dtype, and so does anything already quantized.
const (
	None Quantization = ""
	Q8   Quantization = "q8"
	Q4   Quantization = "q4"
)

// q4Fallback is Q4's format for matrices whose rows are not a whole number of Q4_K super-blocks (SmolLM2's
// 576-wide rows): Q4_1 (32-element blocks with a float16 scale and minimum, 5 bits a weight), chosen over
// Q4_0 (4.5 bits, no minimum) for accuracy (see docs/performance-log.md, quantization).
const q4Fallback = quant.Q4_1

// ParseQuantization validates a --quantize value.
func ParseQuantization(s string) (Quantization, error) {
	switch q := Quantization(strings.ToLower(s)); q {
	case None, "none":
		return None, nil
	case Q8, Q4:
		return q, nil
	}
	return None, fmt.Errorf("unknown quantization %q (known: none, q8, q4)", s)
}

// Target is the dtype a tensor is stored as under q: its own, or a block type. Only 2-D weights of decoder
// layers and lm_head whose source is a float type are quantized.
func (q Quantization) Target(t checkpoint.TensorInfo) checkpoint.DType {
	if q == None || t.DType.Quantized() || len(t.Shape) != 2 || !strings.HasSuffix(t.Name, ".weight") {
		return t.DType
	}
	if isRouter(t.Name) {
		return t.DType
	}
	unit, _, _ := unitOf(t.Name)
	var want quant.Type
	switch {
	case unit == "lm_head":
		want = quant.Q8_0
	case !strings.HasPrefix(unit, "layer."):
		return t.DType
	case q == Q8:
		want = quant.Q8_0
	case t.Shape[1]%quant.QKK == 0:
		want = quant.Q4_K
	default:
		want = q4Fallback
	}
	f, _ := want.Format()
	if t.Shape[1]%int64(f.BlockElems) != 0 {
		return t.DType // rows too short for whole blocks: kept as they are
	}
	return checkpoint.DTypeOf(want)
}

// routerSuffixes name a mixture of experts' router projections: kept in their dtype by every quantization, as
// llama.cpp keeps ffn_gate_inp: a few KB a layer, whose rounding would change which experts a token goes to.
var routerSuffixes = []string{".mlp.gate.weight", ".block_sparse_moe.gate.weight", ".mlp.shared_expert_gate.weight", ".router.proj.weight",
	".feed_forward.router.weight", ".mlp.router.weight"}

// isRouter reports whether a tensor is a router projection (routerSuffixes).
func isRouter(name string) bool {
	return slices.ContainsFunc(routerSuffixes, func(s string) bool { return strings.HasSuffix(name, s) })
}

// encoder names how q encodes with importance matrix imp (nil: none) (Source.Quantizer), so that shards quantized
// by another encoder, or with another matrix, are quantized again: empty for None. Q8_0's encoder changed from
// round-to-nearest to the scale search.
func (q Quantization) encoder(imp *imatrix.Matrix) string {
	var s string
	switch {
	case q == None:
		return ""
	case q == Q8:
		s = fmt.Sprintf("q8: Q8_0 scale search of %d", quant.Q8_0Candidates)
	case imp == nil:
		s = fmt.Sprintf("%s: Q4_K as ggml's reference, Q4_1 min-max, Q8_0 scale search of %d", q, quant.Q8_0Candidates)
	default:
		s = fmt.Sprintf("%s: Q4_K and Q4_1 as ggml's with importances, Q8_0 scale search of %d", q, quant.Q8_0Candidates)
	}
	if imp != nil {
		s += ", weighted by importance matrix sha256:" + imp.Hash()
	}
	return s
}

// ImatrixFile is the copy of the importance matrix a split was quantized with (SplitOptions.Importance), kept in
// the shard folder so that Verify quantizes the checkpoint's tensors again as the split did.
const ImatrixFile = "imatrix.safetensors"

// CheckImportance checks that importance matrix imp fits checkpoint ck under quantization q: q quantizes (Q8 or
// Q4), and every entry for a tensor q quantizes has one value per column. Split checks it before it changes
// anything.
func CheckImportance(ck *checkpoint.Checkpoint, q Quantization, imp *imatrix.Matrix) error {
	if q == None {
		return fmt.Errorf("an importance matrix weights the quantizers of q8 and q4; this split quantizes nothing")
	}
	for _, t := range ck.Tensors {
		if _, _, err := importanceOf(imp, t, q.Target(t)); err != nil {
			return err
		}
	}
	var unknown []string
	for name := range imp.Columns {
		if _, ok := ck.Tensor(name); !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		slog.Warn("the importance matrix has entries for tensors this checkpoint does not have: they are not used (was it collected on this model?)",
			"checkpoint", ck.Dir, "tensors", summarize(unknown))
	}
	return nil
}

// importanceOf returns the importances imp holds for tensor t, to be quantized as dst: nil when imp is nil, t is
// not quantized (dst is its own dtype) or imp has no entry for t (missing is then true).
func importanceOf(imp *imatrix.Matrix, t checkpoint.TensorInfo, dst checkpoint.DType) (v []float32, missing bool, err error) {
	if imp == nil || dst == t.DType || !dst.Quantized() {
		return nil, false, nil
	}
	v, ok := imp.Columns[t.Name]
	switch {
	case !ok:
		return nil, true, nil
	case int64(len(v)) != t.Shape[1]:
		return nil, false, fmt.Errorf("the importance matrix has %d columns for tensor %q, which has %d: made for another model?", len(v), t.Name, t.Shape[1])
	}
	return v, false, nil
}

// quantizes reports whether q quantizes any of unit p's tensors.
func (q Quantization) quantizes(p unitPlan) bool {
	for _, t := range p.tensors {
		if q.Target(t) != t.DType {
			return true
		}
	}
	return false
}

// quantizeTensor encodes raw (a float tensor of dtype src) as the block type dst into out (grown as needed)
// and returns the encoded bytes; f32 is reused scratch for the float values. importance (nil: none) weights
// Q8_0's scale search (quant.QuantizeQ8_0Search) and, given, makes Q4_K and Q4_1 ggml's weighted encoders
// (quant.QuantizeWeighted).
func quantizeTensor(raw []byte, src, dst checkpoint.DType, shape []int64, importance []float32, f32 *[]float32, out *[]byte) ([]byte, error) {
	n := int(shape[0] * shape[1])
	*f32 = grow.Slice(*f32, n)
	x := *f32
	if err := checkpoint.ToF32(x, raw, src); err != nil {
		return nil, err
	}
	size, err := dst.TensorBytes(shape)
	if err != nil {
		return nil, err
	}
	*out = grow.Slice(*out, int(size))
	t, _ := dst.Quant()
	rows, cols := int(shape[0]), int(shape[1])
	if rows == 0 {
		return *out, nil
	}
	encode := func(dst []byte, src []float32) error {
		switch {
		case t == quant.Q8_0:
			return quant.QuantizeQ8_0Search(dst, src, cols, importance)
		case importance != nil:
			return quant.QuantizeWeighted(t, dst, src, cols, importance)
		}
		return quant.Quantize(t, dst, src)
	}
	// The searches take 60-200 ns a weight: rows spread over the cores.
	rowBytes := len(*out) / rows
	workers := min(runtime.GOMAXPROCS(0), rows)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		lo, hi := rows*i/workers, rows*(i+1)/workers
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = encode((*out)[lo*rowBytes:hi*rowBytes], x[lo*cols:hi*cols])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return *out, nil
}
