//go:build ignore

// gen_asm writes gemm_amd64.s and attn_amd64.s from internal/asmgen: go generate ./engine/kernels
package main

import (
	"log"
	"os"

	"github.com/layerstream/layerstream/engine/kernels/internal/asmgen"
)

func main() {
	for name, text := range map[string][]byte{"gemm_amd64.s": asmgen.Generate(), "attn_amd64.s": asmgen.GenerateAttention()} {
		if err := os.WriteFile(name, text, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
