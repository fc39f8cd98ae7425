//go:build !amd64

package kernels

import "github.com/layerstream/layerstream/quant"

// asmKernels returns no kernels: this architecture has only the portable ones.
func asmKernels() map[quant.Type]*quantKernel { return nil }
