package kernels

import (
	"bytes"
	"os"
	"testing"

	"github.com/layerstream/layerstream/engine/kernels/internal/asmgen"
)

// TestGeneratedAsm: gemm_amd64.s is what internal/asmgen writes (go generate rewrites it).
func TestGeneratedAsm(t *testing.T) {
	want := asmgen.Generate()
	got, err := os.ReadFile("gemm_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("gemm_amd64.s differs from what internal/asmgen writes: run go generate ./engine/kernels")
	}
}
