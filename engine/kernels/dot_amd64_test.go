package kernels

import "testing"

// TestDotKernelsPortable runs TestDotKernels with the portable kernels, which CPUs without AVX2 and FMA use.
func TestDotKernelsPortable(t *testing.T) {
	defer func(v bool) { useAVX2 = v }(useAVX2)
	useAVX2 = false
	TestDotKernels(t)
}
