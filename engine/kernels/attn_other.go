//go:build !amd64

package kernels

func softmaxRowAVX512(s *float32, n int, scale, softcap, mOld float32) (mNew, sum float32) {
	panic("no AVX-512")
}

func (s *attnScratch) scoresAVX512(rows, d int, keys []float32, n int) { panic("no AVX-512") }
func (s *attnScratch) pvAVX512(rows, d int, vals []float32, n int)     { panic("no AVX-512") }

func siluAVX512(y, x *float32, n int) { panic("no AVX-512") }

func geluTanhAVX512(y, x *float32, n int) { panic("no AVX-512") }

func softCapAVX512(y, x *float32, n int, c float32)                      { panic("no AVX-512") }
func addAVX512(y, x, b *float32, n int)                                  { panic("no AVX-512") }
func mulAVX512(y, x, b *float32, n int)                                  { panic("no AVX-512") }
func scaleRowAVX512(y, x, b *float32, n int, scale, offset float32)      { panic("no AVX-512") }
func sumSquaresAVX512(x *float32, n int) float64                         { panic("no AVX-512") }
func (s *attnScratch) scoresF16AVX512(rows, d int, keys []uint16, n int) { panic("no AVX-512") }
func (s *attnScratch) pvF16AVX512(rows, d int, vals []uint16, n int)     { panic("no AVX-512") }
func pvRowAVX512(o []float32, w float32, v []float32)                    { panic("no AVX-512") }
