//go:build !amd64

package kernels

// mxfp4Best are the Go kernels: this architecture has no assembly ones.
func mxfp4Best() mxfp4Kernels { return mxfp4Go }
