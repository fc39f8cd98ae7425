package kernels

import (
	"fmt"

	"github.com/layerstream/layerstream/quant"
)

// QuantMatrix is a [Rows, Cols] weight matrix (the Hugging Face [out, in] layout) stored in a ggml block format,
// row by row, each row Cols/BlockElems whole blocks: read in place from the shard it was loaded from.
type QuantMatrix struct {
	Type       quant.Type
	Data       []byte
	Rows, Cols int
	rowBytes   int
	k          *quantKernel
}

// NewQuantMatrix checks that data holds a [rows, cols] matrix of type t and returns it.
func NewQuantMatrix(t quant.Type, data []byte, rows, cols int) (QuantMatrix, error) {
	f, ok := t.Format()
	if !ok || !t.Quantized() {
		return QuantMatrix{}, fmt.Errorf("quantized matrix: %s is not a supported block type", t)
	}
	rb, err := f.RowBytes(int64(cols))
	if err != nil {
		return QuantMatrix{}, err
	}
	if rows <= 0 || cols <= 0 || int64(len(data)) != int64(rows)*rb {
		return QuantMatrix{}, fmt.Errorf("quantized matrix %s [%d, %d]: %d bytes, want %d", t, rows, cols, len(data), int64(rows)*rb)
	}
	return QuantMatrix{Type: t, Data: data, Rows: rows, Cols: cols, rowBytes: int(rb), k: quantKernelFor(t)}, nil
}

// Row returns the bytes of row o.
func (w QuantMatrix) Row(o int) []byte { return w.Data[o*w.rowBytes : (o+1)*w.rowBytes] }

// DequantizeRow writes row o's values into dst (len Cols), bit-exact with quant.Dequantize.
func (w QuantMatrix) DequantizeRow(dst []float32, o int) {
	if err := quant.Dequantize(w.Type, dst[:w.Cols], w.Row(o)); err != nil {
		panic(err) // NewQuantMatrix checked the sizes
	}
}

// quantKernel holds the dot products of one block format: dot1(x, row) is x · the row's dequantized values
// (len(x) = the row's length); dot3 sets y[r·stride] = dot1(x[r·n:(r+1)·n], row) for the first 3·triples rows
// of x, each summed exactly as dot1 sums it, the row's blocks decoded once per three input rows.
type quantKernel struct {
	dot1 func(x []float32, row []byte) float32
	dot3 func(x []float32, n, triples int, row []byte, y []float32, stride int)
}

// quantKernelFor returns t's kernels: assembly where the CPU and the format have them (quant_amd64.go), else
// the portable ones.
func quantKernelFor(t quant.Type) *quantKernel {
	if k := quantKernelAsm(t); k != nil {
		return k
	}
	return portableQuantKernel(t)
}

// portableQuantKernel decodes each block with quant's decoder (bit-exact values) and sums with four
// accumulators, as dotF32Go does.
func portableQuantKernel(t quant.Type) *quantKernel {
	f, _ := t.Format()
	dec := quant.BlockDecoder(t)
	dot1 := func(x []float32, row []byte) float32 {
		var buf [quant.QKK]float32
		var s0, s1, s2, s3 float32
		w := buf[:f.BlockElems]
		for b := 0; b*f.BlockElems < len(x); b++ {
			dec(w, row[b*f.BlockBytes:(b+1)*f.BlockBytes])
			xb := x[b*f.BlockElems : (b+1)*f.BlockElems]
			for i := 0; i < len(w); i += 4 {
				s0 += xb[i] * w[i]
				s1 += xb[i+1] * w[i+1]
				s2 += xb[i+2] * w[i+2]
				s3 += xb[i+3] * w[i+3]
			}
		}
		return (s0 + s1) + (s2 + s3)
	}
	return &quantKernel{
		dot1: dot1,
		dot3: func(x []float32, n, triples int, row []byte, y []float32, stride int) {
			for r := range 3 * triples {
				y[r*stride] = dot1(x[r*n:(r+1)*n], row)
			}
		},
	}
}

// LinearQuant sets y[r·out+o] = x[r·in:(r+1)·in] · w's row o (+ bias[o] when bias is not nil) for every input row
// r of x and every output o, where in = w.Cols and out = w.Rows: Linear for a block-quantized matrix. Each
// block is decoded in registers (or, in the portable kernels, into a block-sized buffer on the stack) and
// multiplied with the activations at once: the matrix is never expanded. As in Linear, each weight row serves a
// block of input rows three at a time, and each output is summed exactly as the one-row kernel sums it.
func LinearQuant(y, x []float32, w QuantMatrix, bias []float32) {
	in, out := w.Cols, w.Rows
	rows := len(x) / in
	block := linearRowBlock(in)
	k := w.k
	ParallelFor(out, func(lo, hi int) {
		for rb := 0; rb < rows; rb += block {
			re := min(rb+block, rows)
			triples := (re - rb) / 3
			for o := lo; o < hi; o++ {
				wr := w.Row(o)
				if triples > 0 {
					if !rowsFit(len(x[rb*in:re*in]), in, len(y[rb*out+o:]), out, triples) {
						return
					}
					k.dot3(x[rb*in:re*in], in, triples, wr, y[rb*out+o:], out)
				}
				for r := rb + 3*triples; r < re; r++ {
					y[r*out+o] = k.dot1(x[r*in:(r+1)*in], wr)
				}
			}
		}
		if bias != nil {
			for r := range rows {
				yr := y[r*out : (r+1)*out]
				for o := lo; o < hi; o++ {
					yr[o] += bias[o]
				}
			}
		}
	})
}
