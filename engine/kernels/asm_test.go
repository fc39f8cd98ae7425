package kernels

import (
	"bytes"
	"os"
	"testing"

	"github.com/layerstream/layerstream/engine/kernels/internal/asmgen"
)

// TestGeneratedAsm: the assembly files are what internal/asmgen writes (go generate rewrites them).
func TestGeneratedAsm(t *testing.T) {
	for name, want := range map[string][]byte{"gemm_amd64.s": asmgen.Generate(), "attn_amd64.s": asmgen.GenerateAttention()} {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from what internal/asmgen writes: run go generate ./engine/kernels", name)
		}
	}
}
