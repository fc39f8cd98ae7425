//go:build !amd64

package ggml

// useAVX512 is false: this architecture runs the Go functions.
var useAVX512 = false

func vecDot64AVX512(x, y *float32, n int) float32 { panic("ggml: no assembly") }
func dot16AVX512(x, y *float32, n int) float32    { panic("ggml: no assembly") }
func expfAVX512(dst, src *float32, n int)         { panic("ggml: no assembly") }
func siluAVX512(dst, src *float32, n int)         { panic("ggml: no assembly") }
