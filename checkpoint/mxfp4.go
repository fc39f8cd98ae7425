package checkpoint

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/layerstream/layerstream/quant"
)

// mxfp4Pairs pairs, as Open meets them, the blocks and scales tensors of the MXFP4 pairs an Architecture's
// FusedExperts declare, layer by layer: each pair becomes one MXFP4 tensor per expert, which reads as ggml's
// MXFP4 blocks of the two (TensorInfo.Second, MXFP4Pair).
type mxfp4Pairs struct {
	fused []FusedExperts
	// waiting holds the half met first, by its layer's prefix and the pair's blocks name.
	waiting map[string]TensorInfo
}

func newMXFP4Pairs(fused []FusedExperts) *mxfp4Pairs {
	return &mxfp4Pairs{fused: fused, waiting: map[string]TensorInfo{}}
}

// add takes t when it is a half of a declared pair (paired true), returning the pair's per-expert tensors once
// both halves are in (nil until then). A uint8 tensor that is no half of a pair is refused.
func (p *mxfp4Pairs) add(t TensorInfo) (out []TensorInfo, paired bool, err error) {
	m := layerTensor.FindStringSubmatch(t.Name)
	for _, f := range p.fused {
		if f.Scales == "" || m == nil || m[2] != f.Name && m[2] != f.Scales {
			continue
		}
		key := m[1] + f.Name
		other, ok := p.waiting[key]
		if !ok {
			p.waiting[key] = t
			return nil, true, nil
		}
		delete(p.waiting, key)
		blocks, scales := t, other
		if m[2] == f.Scales {
			blocks, scales = other, t
		}
		out, err := pairExperts(blocks, scales, m[1]+f.Expert, f.Interleaved)
		return out, true, err
	}
	if t.DType == U8 {
		return nil, false, fmt.Errorf("tensor %q: uint8 tensors are read only as the MXFP4 blocks and scales of an architecture's experts, which this is not", t.Name)
	}
	return nil, false, nil
}

// unpaired refuses a half whose other half never came.
func (p *mxfp4Pairs) unpaired() error {
	if len(p.waiting) == 0 {
		return nil
	}
	var names []string
	for _, t := range p.waiting {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return fmt.Errorf("MXFP4 tensor %s has no other half (blocks need their scales, and scales their blocks)", names[0])
}

// pairExperts cuts an MXFP4 pair, blocks [E, out, in/32, 16] and scales [E, out, in/32] (uint8, in one file),
// into one MXFP4 tensor [out, in] per expert named by name (a format with %d for the expert); interleaved
// reorders alternating gate/up rows into halves, gate first.
func pairExperts(blocks, scales TensorInfo, name string, interleaved bool) ([]TensorInfo, error) {
	if blocks.DType != U8 || scales.DType != U8 {
		return nil, fmt.Errorf("MXFP4 tensors %q (%s) and %q (%s): want uint8 blocks and scales", blocks.Name, blocks.DType, scales.Name, scales.DType)
	}
	bs, ss := blocks.Shape, scales.Shape
	if len(bs) != 4 || bs[3] != quant.QK/2 || len(ss) != 3 || !slices.Equal(bs[:3], ss) || bs[0] <= 0 {
		return nil, fmt.Errorf("MXFP4 tensors %q %v and %q %v: want blocks [experts, out, in/32, 16] and scales [experts, out, in/32]", blocks.Name, bs, scales.Name, ss)
	}
	if blocks.File != scales.File {
		return nil, fmt.Errorf("MXFP4 tensors %q and %q are in different files (%s, %s): blocks and scales are read only from one file", blocks.Name, scales.Name, blocks.File, scales.File)
	}
	if interleaved && bs[1]%2 != 0 {
		return nil, fmt.Errorf("MXFP4 tensor %q: %d gate/up rows per expert cannot be interleaved pairs", blocks.Name, bs[1])
	}
	n := bs[0]
	perScales := scales.Length / n
	out := make([]TensorInfo, n)
	for e := range n {
		out[e] = TensorInfo{Name: fmt.Sprintf(name, e), DType: MXFP4, Shape: []int64{bs[1], bs[2] * quant.QK}, File: blocks.File,
			Offset: blocks.Offset + e*(blocks.Length/n), Length: blocks.Length/n + perScales,
			Second: Range{scales.Offset + e*perScales, perScales}, MXFP4Pair: true, InterleavedGateUp: interleaved}
	}
	return out, nil
}

// pairMXFP4 rewrites b, an MXFP4 pair's blocks followed by its scales (the last scales bytes), as ggml's MXFP4
// blocks in place.
func pairMXFP4(b []byte, scales int64) error {
	src := slices.Clone(b)
	n := int64(len(b)) - scales
	return quant.MXFP4FromSplit(b, src[:n], src[n:])
}

// quantMethods are the quantization_config methods a family may read (Architecture.QuantMethods), with the
// keys their config holds that do not change the computation beyond what the checkpoint's tensors say.
var quantMethods = map[string][]string{
	// transformers' Mxfp4Config: the modules left unquantized (the tensors say which are) and whether to
	// dequantize on loading (an execution choice).
	"mxfp4": {"modules_to_not_convert", "dequantize"},
}

// checkQuantization accepts a quantization_config whose quant_method the family reads (its keys each known),
// refusing any other by name.
func checkQuantization(raw json.RawMessage, arch Architecture) error {
	var q map[string]any
	if err := json.Unmarshal(raw, &q); err != nil || q == nil {
		return fmt.Errorf("config: quantization_config: want an object, got %s", short(raw))
	}
	method, _ := q["quant_method"].(string)
	if !slices.Contains(arch.QuantMethods, method) {
		return fmt.Errorf("config: quantization_config %s: quant_method %q is not supported for %s (supported: %v)", short(raw), method, arch.Name, arch.QuantMethods)
	}
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if k != "quant_method" && !slices.Contains(quantMethods[method], k) {
			return fmt.Errorf("config: quantization_config: key %s (value %v) of quant_method %s is not implemented", k, q[k], method)
		}
	}
	return nil
}
