// Package asmgen writes the AVX-512 matrix-product kernels of package kernels (gemm_amd64.s). The kernels are
// unrolled register tiles, which a generator states more clearly than hand-written assembly, and Go's
// assembler does not know the AVX512_BF16 instructions (VDPBF16PS, VCVTNEPS2BF16): they are emitted as bytes
// (EVEX encodings checked against GNU as). kernels' TestGeneratedAsm keeps the file in step with this code.
package asmgen

import (
	"bytes"
	"fmt"
)

// Tile shape: mr input rows against nr weight rows, one 16-lane accumulator per output (Z8.. Z31).
const (
	mr = 3
	nr = 8
)

type gen struct{ b bytes.Buffer }

func (g *gen) p(format string, args ...any) { fmt.Fprintf(&g.b, format+"\n", args...) }

// evex returns the bytes of an EVEX.512.F3.0F38.W0 instruction with a register-register ModRM: dst in reg,
// src1 in vvvv (-1: unused, all ones), src2 in r/m.
func evex(op byte, dst, src1, src2 int) string {
	inv := func(b int) byte { return byte(1 - b) }
	p0 := inv(dst>>3&1)<<7 | inv(src2>>4&1)<<6 | inv(src2>>3&1)<<5 | inv(dst>>4&1)<<4 | 0b10
	v, vhi := byte(0b1111), byte(1)
	if src1 >= 0 {
		v, vhi = byte(^src1&0xF), inv(src1>>4&1)
	}
	p1 := v<<3 | 1<<2 | 0b10
	p2 := byte(0b10)<<5 | vhi<<3
	modrm := byte(0b11)<<6 | byte(dst&7)<<3 | byte(src2&7)
	return fmt.Sprintf("BYTE $0x62; BYTE $0x%02x; BYTE $0x%02x; BYTE $0x%02x; BYTE $0x%02x; BYTE $0x%02x", p0, p1, p2, op, modrm)
}

// vdpbf16ps: acc += pairwise bf16 products of a and b (dot products of bf16 pairs, accumulated in float32).
func vdpbf16ps(acc, a, b int) string {
	return evex(0x52, acc, a, b) + fmt.Sprintf(" // VDPBF16PS Z%d, Z%d, Z%d", b, a, acc)
}

// vcvtneps2bf16: the 16 float32 of zmm src rounded (to nearest even) to bf16 in ymm dst.
func vcvtneps2bf16(dst, src int) string {
	return evex(0x72, dst, -1, src) + fmt.Sprintf(" // VCVTNEPS2BF16 Z%d, Y%d", src, dst)
}

func acc(i, j int) int { return 8 + nr*i + j }

// wAddr is weight row j of the group: BX holds rows 0-3, R11 rows 4-7 (R9 = ldw, R10 = 3·ldw).
func wAddr(j int) string {
	base := "BX"
	if j >= 4 {
		base, j = "R11", j-4
	}
	return fmt.Sprintf([4]string{"(%s)", "(%s)(R9*1)", "(%s)(R9*2)", "(%s)(R10*1)"}[j], base)
}

func xAddr(i int) string { return [3]string{"(AX)", "(AX)(R8*1)", "(AX)(R8*2)"}[i] } // R8 = xs

func yAddr(i int) string { return [3]string{"(DX)", "(DX)(R12*1)", "(DX)(R12*2)"}[i] }

// kernel describes one pair of element types.
type kernel struct {
	name    string
	xType   string // Go element types of x and w, for the comment
	wType   string
	xMasked string // the masked (zeroing) load of x's partial chunk, by element width
	wLoad   func(addr string, reg int, masked bool) []string
	madd    func(acc, x, w int) string
}

// loadW64 loads a 64-byte chunk of weights as it is (masked: elements of maskedOp's width under K1).
func loadW64(maskedOp string) func(addr string, reg int, masked bool) []string {
	return func(addr string, reg int, masked bool) []string {
		if masked {
			return []string{fmt.Sprintf("%s %s, K1, Z%d", maskedOp, addr, reg)}
		}
		return []string{fmt.Sprintf("VMOVUPS %s, Z%d", addr, reg)}
	}
}

// widenBF16 loads 16 bf16 weights (32 bytes) widened exactly to float32 (the bits shifted up by 16).
func widenBF16(addr string, reg int, masked bool) []string {
	ld := fmt.Sprintf("VPMOVZXWD %s, Z%d", addr, reg)
	if masked {
		ld = fmt.Sprintf("VPMOVZXWD.Z %s, K1, Z%d", addr, reg)
	}
	return []string{ld, fmt.Sprintf("VPSLLD $16, Z%d, Z%d", reg, reg)}
}

func (g *gen) chunk(k kernel, rows int, masked bool) {
	for i := range rows {
		if masked {
			g.p("\t%s %s, K1, Z%d", k.xMasked, xAddr(i), i)
		} else {
			g.p("\tVMOVUPS %s, Z%d", xAddr(i), i)
		}
	}
	for j := range nr {
		wr := 3 + j%2
		for _, l := range k.wLoad(wAddr(j), wr, masked) {
			g.p("\t%s", l)
		}
		for i := range rows {
			g.p("\t%s", k.madd(acc(i, j), i, wr))
		}
	}
}

// reduce sums each accumulator of row i (lanes l and l+8, then l and l+4, l and l+2, l and l+1: the
// canonical order every kernel follows) and stores the row's 8 sums at yAddr(i). Z7 holds permIdx.
func (g *gen) reduce(i int) {
	a := func(j int) string { return fmt.Sprintf("Z%d", acc(i, j)) }
	for j := 0; j < nr; j += 2 { // lanes l and l+8: two accumulators per vector
		g.p("\tVSHUFF64X2 $0x44, %s, %s, Z5", a(j+1), a(j))
		g.p("\tVSHUFF64X2 $0xEE, %s, %s, Z6", a(j+1), a(j))
		g.p("\tVADDPS Z6, Z5, %s", a(j))
	}
	for j := 0; j < nr; j += 4 { // lanes l and l+4: four accumulators per vector
		g.p("\tVSHUFF64X2 $0x88, %s, %s, Z5", a(j+2), a(j))
		g.p("\tVSHUFF64X2 $0xDD, %s, %s, Z6", a(j+2), a(j))
		g.p("\tVADDPS Z6, Z5, %s", a(j))
	}
	// lanes l and l+2 (accumulator k and k+4 share 128-bit lane k), then l and l+1
	g.p("\tVSHUFPS $0x44, %s, %s, Z5", a(4), a(0))
	g.p("\tVSHUFPS $0xEE, %s, %s, Z6", a(4), a(0))
	g.p("\tVADDPS Z6, Z5, Z5")
	g.p("\tVPERMILPS $0xB1, Z5, Z6")
	g.p("\tVADDPS Z6, Z5, Z5")
	g.p("\tVPERMPS Z5, Z7, Z6")
	g.p("\tVMOVUPS Y6, %s", yAddr(i))
}

func (g *gen) tile(k kernel, rows int, label string) {
	for i := range rows {
		for j := range nr {
			z := acc(i, j)
			g.p("\tVXORPS Z%d, Z%d, Z%d", z, z, z)
		}
	}
	g.p("\tMOVQ SI, AX")
	g.p("\tMOVQ DI, BX")
	g.p("\tLEAQ (DI)(R9*4), R11")
	g.p("\tMOVQ chunks+64(FP), CX")
	g.p("\tTESTQ CX, CX")
	g.p("\tJZ %s_tail", label)
	g.p("%s_loop:", label)
	g.chunk(k, rows, false)
	g.p("\tADDQ xc+16(FP), AX")
	g.p("\tADDQ wc+56(FP), BX")
	g.p("\tADDQ wc+56(FP), R11")
	g.p("\tDECQ CX")
	g.p("\tJNZ %s_loop", label)
	g.p("%s_tail:", label)
	g.p("\tKORTESTQ K1, K1")
	g.p("\tJZ %s_reduce", label)
	g.chunk(k, rows, true)
	g.p("%s_reduce:", label)
	g.p("\tVMOVDQU32 ·permIdx(SB), Z7")
	for i := range rows {
		g.reduce(i)
	}
}

func (g *gen) gemm(k kernel) {
	g.p("// func %s(x *%s, xs, xc, xt, rows int, w *%s, ws, wc, chunks int, tail uint64, y *float32, ldy int)", k.name, k.xType, k.wType)
	g.p("TEXT ·%s(SB), NOSPLIT, $0-96", k.name)
	g.p("\tMOVQ x+0(FP), SI")
	g.p("\tMOVQ xs+8(FP), R8")
	g.p("\tMOVQ rows+32(FP), R13")
	g.p("\tMOVQ w+40(FP), DI")
	g.p("\tMOVQ ws+48(FP), R9")
	g.p("\tLEAQ (R9)(R9*2), R10")
	g.p("\tMOVQ tail+72(FP), AX")
	g.p("\tKMOVQ AX, K1")
	g.p("\tMOVQ y+80(FP), DX")
	g.p("\tMOVQ ldy+88(FP), R12")
	l := k.name
	g.p("%s_rows3:", l)
	g.p("\tCMPQ R13, $3")
	g.p("\tJLT %s_rows2", l)
	g.tile(k, 3, l+"_t3")
	g.p("\tADDQ xt+24(FP), SI")
	g.p("\tLEAQ (DX)(R12*2), DX")
	g.p("\tADDQ R12, DX")
	g.p("\tSUBQ $3, R13")
	g.p("\tJMP %s_rows3", l)
	g.p("%s_rows2:", l)
	g.p("\tCMPQ R13, $2")
	g.p("\tJLT %s_rows1", l)
	g.tile(k, 2, l+"_t2")
	g.p("\tJMP %s_done", l)
	g.p("%s_rows1:", l)
	g.p("\tCMPQ R13, $1")
	g.p("\tJLT %s_done", l)
	g.tile(k, 1, l+"_t1")
	g.p("%s_done:", l)
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	g.p("")
}

// Generate returns the text of gemm_amd64.s.
func Generate() []byte {
	var g gen
	g.p("// Code generated by engine/kernels/internal/asmgen; DO NOT EDIT.")
	g.p("// Regenerate: go generate ./engine/kernels")
	g.p("")
	g.p("#include \"textflag.h\"")
	g.p("")
	for _, l := range []string{
		fmt.Sprintf("The matrix-product tiles: %d input rows (x) against %d weight rows (w), each output accumulated in", mr, nr),
		"its own 16-lane register over chunks of 16 elements (lane l takes the chunk's element l), or of 32 bf16",
		"elements with VDPBF16PS (lane l takes the products of elements 2l+1, then 2l), then its lanes summed in one",
		"fixed order: an output's value depends only on its two rows, never on the tile or the rows computed beside",
		"it. A chunk of input row i is at x + i·xs, the next chunk xc bytes on, the next tile of rows xt bytes on;",
		"weight row j's chunk is at w + j·ws, the next wc bytes on. chunks full chunks, then one chunk loaded under",
		"the element mask tail (zeros elsewhere) when tail ≠ 0. Row r's outputs go to y + r·ldy.",
	} {
		g.p("// %s", l)
	}
	g.p("")
	fma := func(a, x, w int) string { return fmt.Sprintf("VFMADD231PS Z%d, Z%d, Z%d", w, x, a) }
	g.gemm(kernel{name: "gemmF32AVX512", xType: "float32", wType: "float32", xMasked: "VMOVDQU32.Z",
		wLoad: loadW64("VMOVDQU32.Z"), madd: fma})
	g.gemm(kernel{name: "gemmF32BF16AVX512", xType: "float32", wType: "uint16", xMasked: "VMOVDQU32.Z",
		wLoad: widenBF16, madd: fma})
	g.gemm(kernel{name: "gemmBF16AVX512", xType: "uint16", wType: "uint16", xMasked: "VMOVDQU16.Z",
		wLoad: loadW64("VMOVDQU16.Z"), madd: vdpbf16ps})
	g.p("// func cvtBF16AVX512(dst *uint16, step int, src *float32, chunks int)")
	g.p("// Rounds chunks·32 float32 at src to bf16 (nearest even), each chunk of 32 written at dst + k·step bytes.")
	g.p("TEXT ·cvtBF16AVX512(SB), NOSPLIT, $0-32")
	g.p("\tMOVQ dst+0(FP), DI")
	g.p("\tMOVQ step+8(FP), DX")
	g.p("\tMOVQ src+16(FP), SI")
	g.p("\tMOVQ chunks+24(FP), CX")
	g.p("\tTESTQ CX, CX")
	g.p("\tJZ cvt_done")
	g.p("cvt_loop:")
	g.p("\tVMOVUPS (SI), Z0")
	g.p("\tVMOVUPS 64(SI), Z2")
	g.p("\t%s", vcvtneps2bf16(1, 0))
	g.p("\t%s", vcvtneps2bf16(3, 2))
	g.p("\tVMOVDQU Y1, (DI)")
	g.p("\tVMOVDQU Y3, 32(DI)")
	g.p("\tADDQ $128, SI")
	g.p("\tADDQ DX, DI")
	g.p("\tDECQ CX")
	g.p("\tJNZ cvt_loop")
	g.p("cvt_done:")
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	return g.b.Bytes()
}
