package kernels

import (
	"maps"

	"github.com/layerstream/layerstream/quant"
	"golang.org/x/sys/cpu"
)

// useVNNI selects the rows and tiled kernels (rows.go, tiled.go: VPDPBUSD and VPDPWSSD, AVX-512 VNNI).
var useVNNI = useAVX512 && cpu.X86.HasAVX512VNNI

// The assembly kernels (quant_amd64.s) need AVX2 and F16C (every CPU with AVX2 and FMA has F16C).

//go:noescape
func dotQ8_0AVX2(b []byte, qs []int8, d []float32) float32

//go:noescape
func dotQ8_0FMA(b []byte, qs []int8, d []float32) float32

//go:noescape
func dotQ4_1FMA(b []byte, qs []int8, d, s []float32) float32

//go:noescape
func dotQ5_0FMA(b []byte, qs []int8, d []float32) float32

//go:noescape
func dotQ5_1FMA(b []byte, qs []int8, d, s []float32) float32

// iq4Bytes is quant.IQ4Values, the table the IQ4 assembly kernels look their grid values up in (VPSHUFB; in
// quant_amd64.s and quads_amd64.s).
var iq4Bytes = quant.IQ4Values

//go:noescape
func dotIQ4_NLAVX2(b []byte, qs []int8, d []float32) float32

//go:noescape
func dotIQ4_XSAVX2(b []byte, qs []int8, d []float32) float32

//go:noescape
func dotQ4_0FMA(b []byte, qs []int8, d []float32) float32

//go:noescape
func dotQ4_0RepackedFMA(b []byte, qs []int8, d []float32) float32

//go:noescape
func dotIQ4_NLRepackedFMA(b []byte, qs []int8, d []float32) float32

// ggmlAsmRepacked are the assembly products of LinearQuantGGML's repacked kernels, bit for bit the portable ones.
func ggmlAsmRepacked() map[quant.Type]func(w []byte, x qActRow) float32 {
	if !useAVX2 {
		return nil
	}
	return map[quant.Type]func(w []byte, x qActRow) float32{
		quant.Q4_0:   func(w []byte, x qActRow) float32 { return dotQ4_0RepackedFMA(w, x.qs, x.d) },
		quant.IQ4_NL: func(w []byte, x qActRow) float32 { return dotIQ4_NLRepackedFMA(w, x.qs, x.d) },
	}
}

// ggmlAsmDots are the assembly dot products of LinearQuantGGML, bit for bit those of dot32 with fused.
func ggmlAsmDots() map[quant.Type]func(w []byte, x qActRow) float32 {
	if !useAVX2 {
		return nil
	}
	return map[quant.Type]func(w []byte, x qActRow) float32{
		quant.Q8_0: func(w []byte, x qActRow) float32 { return dotQ8_0FMA(w, x.qs, x.d) },
		quant.Q4_0: func(w []byte, x qActRow) float32 { return dotQ4_0FMA(w, x.qs, x.d) },
		quant.Q4_1: func(w []byte, x qActRow) float32 { return dotQ4_1FMA(w, x.qs, x.d, x.s) },
		quant.Q5_0: func(w []byte, x qActRow) float32 { return dotQ5_0FMA(w, x.qs, x.d) },
		quant.Q5_1: func(w []byte, x qActRow) float32 { return dotQ5_1FMA(w, x.qs, x.d, x.s) },
	}
}

//go:noescape
func dotQ4_0AVX2(b []byte, qs []int8, d []float32) float32

//go:noescape
func dotQ4_1AVX2(b []byte, qs []int8, d, s []float32) float32

//go:noescape
func dotQ5_0AVX2(b []byte, qs []int8, d []float32) float32

//go:noescape
func dotQ5_1AVX2(b []byte, qs []int8, d, s []float32) float32

//go:noescape
func quantizeQ8BlocksAVX512(q []int8, x []float32, d []float32, sums []int32)

// quantizeQ8Blocks sets, for the len(d) blocks of 32 values of x, q to the block's values quantized as
// quantizeQ8_0Block does, d[b] to the block's unrounded scale max|x|/127 and sums[b] to Σq; it reports false,
// doing nothing, where the CPU has no assembly for it.
func quantizeQ8Blocks(q []int8, x []float32, d []float32, sums []int32) bool {
	if !useAVX512 {
		return false
	}
	n := len(d) * quant.QK
	quantizeQ8BlocksAVX512(q[:n], x[:n], d, sums[:len(d)])
	return true
}

//go:noescape
func quantizeQ8KBlocksAVX512(q []int8, bsums []int16, x []float32, d []float32)

// quantizeQ8KBlocks quantizes the len(d) blocks of 256 values of x into q, bsums and d as quantizeQ8_KBlock
// does, bit for bit; it reports false, doing nothing, where the CPU has no assembly for it.
func quantizeQ8KBlocks(q []int8, bsums []int16, x []float32, d []float32) bool {
	if !useAVX512 {
		return false
	}
	n := len(d) * quant.QKK
	quantizeQ8KBlocksAVX512(q[:n], bsums[:n/16], x[:n], d)
	return true
}

//go:noescape
func dotQ4_KAVX2(b []byte, qs []int8, d []float32, bsums []int16) float32

//go:noescape
func dotQ2_KAVX2(b []byte, qs []int8, d []float32, bsums []int16) float32

//go:noescape
func dotQ3_KAVX2(b []byte, qs []int8, d []float32) float32

//go:noescape
func dotQ4_KIn4AVX2(b []byte, qs []int8, d []float32, bsums []int16, y *float32, ystride int)

//go:noescape
func dotQ5_KIn4AVX2(b []byte, qs []int8, d []float32, bsums []int16, y *float32, ystride int)

//go:noescape
func dotQ6_KIn4AVX2(b []byte, qs []int8, d []float32, bsums []int16, y *float32, ystride int)

//go:noescape
func dotQ5_KAVX2(b []byte, qs []int8, d []float32, bsums []int16) float32

//go:noescape
func dotQ6_KAVX2(b []byte, qs []int8, d []float32, bsums []int16) float32

// asmKernels returns the assembly kernels the CPU can run. Each reads len(x.d) blocks; the callers guarantee
// that the row holds that many (NewQuantMatrix checked the sizes).
func asmKernels() map[quant.Type]*quantKernel {
	if !useAVX2 {
		return nil
	}
	m := map[quant.Type]*quantKernel{
		quant.Q8_0:   {act: actQ8_0, dot: func(w []byte, x qActRow) float32 { return dotQ8_0AVX2(w, x.qs, x.d) }},
		quant.Q4_0:   {act: actQ8_0, dot: func(w []byte, x qActRow) float32 { return dotQ4_0AVX2(w, x.qs, x.d) }},
		quant.Q4_1:   {act: actQ8_1, dot: func(w []byte, x qActRow) float32 { return dotQ4_1AVX2(w, x.qs, x.d, x.s) }},
		quant.Q5_0:   {act: actQ8_0, dot: func(w []byte, x qActRow) float32 { return dotQ5_0AVX2(w, x.qs, x.d) }},
		quant.Q5_1:   {act: actQ8_1, dot: func(w []byte, x qActRow) float32 { return dotQ5_1AVX2(w, x.qs, x.d, x.s) }},
		quant.Q4_K:   {act: actQ8_K, dot: func(w []byte, x qActRow) float32 { return dotQ4_KAVX2(w, x.qs, x.d, x.bsums) }},
		quant.Q2_K:   {act: actQ8_K, dot: func(w []byte, x qActRow) float32 { return dotQ2_KAVX2(w, x.qs, x.d, x.bsums) }},
		quant.Q3_K:   {act: actQ8_K, dot: func(w []byte, x qActRow) float32 { return dotQ3_KAVX2(w, x.qs, x.d) }},
		quant.Q5_K:   {act: actQ8_K, dot: func(w []byte, x qActRow) float32 { return dotQ5_KAVX2(w, x.qs, x.d, x.bsums) }},
		quant.Q6_K:   {act: actQ8_K, dot: func(w []byte, x qActRow) float32 { return dotQ6_KAVX2(w, x.qs, x.d, x.bsums) }},
		quant.IQ4_NL: {act: actQ8_0, dot: func(w []byte, x qActRow) float32 { return dotIQ4_NLAVX2(w, x.qs, x.d) }},
		quant.IQ4_XS: {act: actQ8_K, dot: func(w []byte, x qActRow) float32 { return dotIQ4_XSAVX2(w, x.qs, x.d) }},
	}
	maps.Copy(m, gridKernels(true))
	in4 := map[quant.Type]func(b []byte, qs []int8, d []float32, bsums []int16, y *float32, ystride int){
		quant.Q4_K: dotQ4_KIn4AVX2, quant.Q5_K: dotQ5_KIn4AVX2, quant.Q6_K: dotQ6_KIn4AVX2,
	}
	for t, f := range in4 {
		m[t].in4 = func(w []byte, x qActRow, y []float32, ystride int) {
			_ = y[3*ystride]
			f(w, x.qs, x.d, x.bsums, &y[0], ystride)
		}
	}
	return m
}
