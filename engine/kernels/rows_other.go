//go:build !amd64

package kernels

import "github.com/layerstream/layerstream/quant"

// rowsAsm returns no kernels: this architecture's LinearQuant keeps its lanes order.
func rowsAsm() map[quant.Type]rowsKernelPair { return nil }

// rowsOctAsm returns no kernels (rowsAsm).
func rowsOctAsm() map[quant.Type]quantRowsKernel { return nil }

// tiledRowsAsm returns no kernels (rowsAsm).
func tiledRowsAsm() map[quant.Type]transKernel { return nil }

// panelsAsm returns no kernels (rowsAsm).
func panelsAsm() map[quant.Type]*panelFormat { return nil }
