//go:build !amd64

package kernels

import "github.com/layerstream/layerstream/quant"

// asmKernels returns no kernels: this architecture has only the portable ones.
func asmKernels() map[quant.Type]*quantKernel { return nil }

// quantizeQ8Blocks reports false: this architecture quantizes with quantizeQ8_0Block.
func quantizeQ8Blocks(q []int8, x []float32, d []float32, sums []int32) bool { return false }

// quantizeQ8KBlocks reports false: this architecture quantizes with quantizeQ8_KBlock.
func quantizeQ8KBlocks(q []int8, bsums []int16, x []float32, d []float32) bool { return false }

// ggmlAsmDots returns no kernels: this architecture has only the portable ones.
func ggmlAsmDots() map[quant.Type]func(w []byte, x qActRow) float32 { return nil }

// ggmlAsmRepacked returns no kernels: this architecture has only the portable ones.
func ggmlAsmRepacked() map[quant.Type]func(w []byte, x qActRow) float32 { return nil }
