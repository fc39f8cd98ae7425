package kernels

import "github.com/layerstream/layerstream/quant"

// mxfp4Values are quant.MXFP4Values as float32, the table the assembly kernels look the codes up in (VPERMPS).
var mxfp4Values = func() (t [16]float32) {
	for i, v := range quant.MXFP4Values {
		t[i] = float32(v)
	}
	return t
}()

// mxfp4Scales is quant.MXFP4Scale, the table the assembly kernels take each block's scale from.
var mxfp4Scales = quant.MXFP4Scale

// mxfp4Dot1AVX512 is mxfp4Dot1Go over blocks blocks at w (x holds 32·blocks values), lanes into acc.
//
//go:noescape
func mxfp4Dot1AVX512(w *byte, blocks int, x *float32, acc *float32)

// mxfp4Dot4AVX512 is mxfp4Dot4Go: four input rows ldx values apart, acc holding their 4·16 lanes.
//
//go:noescape
func mxfp4Dot4AVX512(w *byte, blocks int, x *float32, ldx int, acc *float32)

// mxfp4Rows4AVX512 is mxfp4Rows4Go: four weight rows stride bytes apart times one input row, acc holding their
// 4·16 lanes.
//
//go:noescape
func mxfp4Rows4AVX512(w *byte, stride int, blocks int, x *float32, acc *float32)

// mxfp4AVX512 are the assembly kernels.
var mxfp4AVX512 = mxfp4Kernels{
	padFour: true,
	one: func(w []byte, x []float32, acc *mxfp4Lanes) {
		if n := len(w) / mxfp4BlockBytes; n > 0 {
			_ = x[32*n-1] // the last value: in bounds
			mxfp4Dot1AVX512(&w[0], n, &x[0], &acc[0])
		} else {
			*acc = mxfp4Lanes{}
		}
	},
	rows4: func(w []byte, stride int, x []float32, acc *[4]mxfp4Lanes) {
		if n := len(x) / 32; n > 0 {
			_ = w[3*stride+n*mxfp4BlockBytes-1] // the fourth row's last byte: in bounds
			mxfp4Rows4AVX512(&w[0], stride, n, &x[0], &acc[0][0])
		} else {
			*acc = [4]mxfp4Lanes{}
		}
	},
	four: func(w []byte, x []float32, ldx int, acc *[4]mxfp4Lanes) {
		if n := len(w) / mxfp4BlockBytes; n > 0 {
			_ = x[3*ldx+32*n-1] // the fourth row's last value: in bounds
			mxfp4Dot4AVX512(&w[0], n, &x[0], ldx, &acc[0][0])
		} else {
			*acc = [4]mxfp4Lanes{}
		}
	},
}

// mxfp4Best are the assembly kernels where the CPU has AVX-512, else the Go ones.
func mxfp4Best() mxfp4Kernels {
	if useAVX512 {
		return mxfp4AVX512
	}
	return mxfp4Go
}
