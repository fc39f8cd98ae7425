package kernels

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/layerstream/layerstream/quant"
)

// randomMXFP4 is a [rows, cols] MXFP4 matrix of random codes and scales around 2^0 (and a block of the smallest
// scale, 2^-127, whose values are subnormal).
func randomMXFP4(t testing.TB, rng *rand.Rand, rows, cols int) QuantMatrix {
	t.Helper()
	data := make([]byte, rows*cols/32*mxfp4BlockBytes)
	for i := range data {
		data[i] = byte(rng.IntN(256))
	}
	for b := 0; b < len(data); b += mxfp4BlockBytes {
		data[b] = byte(120 + rng.IntN(12))
	}
	data[0] = 0
	w, err := NewQuantMatrix(quant.MXFP4, data, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// mxfp4Scalar is the product of MXFP4 weight row w and x written out from the definition of the kernels' order
// (mxfp4.go), one element at a time: two sets of 16 lanes, lane l of the first taking element l of every block
// and of the second element 16+l, the sets added, then the lanes summed halves first.
func mxfp4Scalar(w []byte, x []float32) float32 {
	var lanes, second [16]float32
	for b := range len(x) / 32 {
		e := w[b*17]
		d := float32(math.Ldexp(0.5, int(e)-127)) // half the scale: the values below are doubled
		for l := range 16 {
			q := w[b*17+1+l]
			lanes[l] += float32(x[b*32+l] * (float32(quant.MXFP4Values[q&15]) * d))
			second[l] += float32(x[b*32+16+l] * (float32(quant.MXFP4Values[q>>4]) * d))
		}
	}
	for l := range lanes {
		lanes[l] += second[l]
	}
	for n := 8; n >= 1; n /= 2 {
		for i := range n {
			lanes[i] += lanes[i+n]
		}
	}
	return lanes[0]
}

// TestLinearMXFP4: on every kernel path, LinearQuant of an MXFP4 matrix gives, for every input row count from 1
// to 32 (the four-row kernel and the one-row tail), each output bit for bit what the scalar reference gives, and
// within float32 rounding of the float64 product with the decoded matrix (quant.Dequantize); with a bias.
func TestLinearMXFP4(t *testing.T) {
	kernelPaths(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(39, 4))
		const out, in = 37, 96
		w := randomMXFP4(t, rng, out, in)
		dec := make([]float32, out*in)
		if err := quant.Dequantize(quant.MXFP4, dec, w.Data); err != nil {
			t.Fatal(err)
		}
		bias := make([]float32, out)
		for i := range bias {
			bias[i] = float32(rng.NormFloat64())
		}
		for rows := 1; rows <= 32; rows++ {
			x := make([]float32, rows*in)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			y := make([]float32, rows*out)
			LinearQuant(y, x, w, bias)
			for r := range rows {
				xr := x[r*in : (r+1)*in]
				for o := range out {
					want := mxfp4Scalar(w.Row(o), xr) + bias[o]
					if got := y[r*out+o]; math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("%d rows, row %d, output %d: %g, scalar reference %g", rows, r, o, got, want)
					}
					var exact, mag float64
					for i, v := range xr {
						exact += float64(v) * float64(dec[o*in+i])
						mag += math.Abs(float64(v) * float64(dec[o*in+i]))
					}
					if d := math.Abs(float64(y[r*out+o]-bias[o]) - exact); d > 1e-6*mag+1e-30 {
						t.Fatalf("%d rows, row %d, output %d: %g, float64 product %g", rows, r, o, y[r*out+o]-bias[o], exact)
					}
				}
			}
		}
	})
}
