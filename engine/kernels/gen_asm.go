//go:build ignore

// gen_asm writes gemm_amd64.s from internal/asmgen: go generate ./engine/kernels
package main

import (
	"log"
	"os"

	"github.com/layerstream/layerstream/engine/kernels/internal/asmgen"
)

func main() {
	if err := os.WriteFile("gemm_amd64.s", asmgen.Generate(), 0o644); err != nil {
		log.Fatal(err)
	}
}
