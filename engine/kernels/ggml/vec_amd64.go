package ggml

import "golang.org/x/sys/cpu"

// useAVX512 selects the assembly twins (vec_amd64.s) of VecDot, Dot16, Expf and Silu.
var useAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL

//go:noescape
func vecDot64AVX512(x, y *float32, n int) float32

//go:noescape
func dot16AVX512(x, y *float32, n int) float32

//go:noescape
func expfAVX512(dst, src *float32, n int)

//go:noescape
func siluAVX512(dst, src *float32, n int)
