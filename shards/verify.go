package shards

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/imatrix"
	"github.com/layerstream/layerstream/internal/grow"
)

// VerifyReport is the outcome of Verify.
type VerifyReport struct {
	Units, Tensors int
	Bytes          int64    // decoded tensor bytes checked
	Problems       []string // empty when everything verified
}

// OK reports whether no problem was found.
func (r *VerifyReport) OK() bool { return len(r.Problems) == 0 }

// Verify reads every shard, checks every checksum and, when ck is not nil, compares every tensor byte for byte
// with the source checkpoint and checks that no source tensor is missing. Problems are collected in the report;
// the error is only for cancellation.
func (s *Set) Verify(ctx context.Context, ck *checkpoint.Checkpoint) (*VerifyReport, error) {
	r := &VerifyReport{}
	buf := NewBuffer(int(s.MaxBufferSize()))
	var src, qbuf []byte
	var f32 []float32
	seen := map[string]bool{}
	// The tensors the split quantized are compared with the checkpoint's quantized again, which takes the
	// encoder the split recorded, with the importance matrix it kept: another encoder's (an older build's) cannot
	// be compared byte for byte, and says so once.
	var imp *imatrix.Matrix
	quantOK, quantWhy := true, ""
	if ck != nil && s.source != nil {
		rec := s.source.Quantizer
		if strings.Contains(rec, "importance matrix") {
			var err error
			if imp, err = imatrix.Read(filepath.Join(s.Dir, ImatrixFile)); err != nil {
				quantOK, quantWhy = false, fmt.Sprintf("the split was quantized with an importance matrix and its copy cannot be read (%v)", err)
			}
		}
		if quantOK && rec != "" && rec != Q8.encoder(imp) && rec != Q4.encoder(imp) {
			kept := "none"
			if imp != nil {
				kept = "sha256:" + imp.Hash()
			}
			quantOK, quantWhy = false, fmt.Sprintf("the split's quantized tensors were made by encoder %q, which is not this build's with the %s the folder holds (%s)", rec, ImatrixFile, kept)
		}
		if rec == "" {
			quantOK, quantWhy = false, "the split's quantized tensors were made by an older build (round-to-nearest Q8_0, no encoder recorded)"
		}
	}
	quantReported := false
	for _, u := range s.units {
		l, err := s.load(ctx, u.Name, buf, true) // every checksum, whatever the policy
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		r.Units++
		if err != nil {
			r.Problems = append(r.Problems, err.Error())
			for _, t := range u.Tensors {
				seen[t.Name] = true // reported above; not "missing" as well
			}
			continue
		}
		for _, ti := range u.Tensors {
			t := l.Tensors[ti.Name]
			r.Tensors++
			r.Bytes += int64(len(t.Data))
			seen[t.Name] = true
			if ck == nil {
				continue
			}
			st, ok := ck.Tensor(t.Name)
			// A tensor quantized by the split is compared with the checkpoint's quantized again (the
			// encoders are deterministic).
			quantized := t.DType != st.DType && t.DType.Quantized() && !st.DType.Quantized()
			switch {
			case !ok:
				r.Problems = append(r.Problems, fmt.Sprintf("tensor %q (unit %s) is not in the checkpoint %s", t.Name, u.Name, ck.Dir))
				continue
			case (st.DType != t.DType && !quantized) || !slices.Equal(st.Shape, t.Shape):
				r.Problems = append(r.Problems, fmt.Sprintf("tensor %q (unit %s) is %s %v, the checkpoint has %s %v", t.Name, u.Name, t.DType, t.Shape, st.DType, st.Shape))
				continue
			}
			if quantized && !quantOK {
				if !quantReported {
					r.Problems = append(r.Problems, quantWhy+": their bytes cannot be compared with the checkpoint's; run split again to quantize them with this build")
					quantReported = true
				}
				continue
			}
			src = grow.Slice(src, int(st.Length))
			if err := checkpoint.ReadTensorAt(st, src); err != nil {
				r.Problems = append(r.Problems, err.Error())
				continue
			}
			want := src
			if quantized {
				v, _, err := importanceOf(imp, st, t.DType)
				if err == nil {
					want, err = quantizeTensor(src, st.DType, t.DType, st.Shape, v, &f32, &qbuf)
				}
				if err != nil {
					r.Problems = append(r.Problems, fmt.Sprintf("tensor %q (unit %s): quantizing the checkpoint's to %s: %v", t.Name, u.Name, t.DType, err))
					continue
				}
			}
			if !bytes.Equal(want, t.Data) {
				r.Problems = append(r.Problems, fmt.Sprintf("tensor %q (unit %s, file %s) differs from the checkpoint's bytes in %s", t.Name, u.Name, u.File, st.File))
			}
		}
	}
	if ck != nil {
		for _, t := range ck.Tensors {
			if !seen[t.Name] {
				r.Problems = append(r.Problems, fmt.Sprintf("checkpoint tensor %q is missing from the shards", t.Name))
			}
		}
	}
	return r, nil
}
