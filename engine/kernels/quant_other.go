//go:build !amd64

package kernels

import "github.com/layerstream/layerstream/quant"

// quantKernelAsm returns nil: this architecture has only the portable kernels.
func quantKernelAsm(quant.Type) *quantKernel { return nil }
