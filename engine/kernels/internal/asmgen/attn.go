package asmgen

import (
	"fmt"
	"strings"
)

// ExpConsts are the constants of the vectorized exp (Cephes' expf: e^x = 2^n · e^r, n = round(x·log2 e),
// r = x − n·ln 2 split in two parts, e^r ≈ 1 + r + r²·P(r) with P of degree 5) and of tanh, in the order of the
// table the kernels load them from (kernels' expConsts).
var ExpConsts = [...]float32{
	1.44269504088896341, // log2 e
	0.693359375,         // ln 2, high part
	-2.12194440e-4,      // ln 2, low part
	1.9875691500e-4,     // P, highest degree first
	1.3981999507e-3,
	8.3334519073e-3,
	4.1665795894e-2,
	1.6666665459e-1,
	5.0000001201e-1,
	1,
	-103.9720840454, // inputs are clamped to [min, max]: e^min is 0 in float32, e^max finite
	88.7228391117,
	2,
	1.5957691216057308,  // GELU (tanh form) as x·sigmoid(x·(a + b·x²)): a = 2·√(2/π)
	0.07135481627159977, // b = 2·√(2/π)·0.044715
}

// Indexes into ExpConsts; the kernels broadcast constant k into Z16+k.
const (
	cLog2e = iota
	cLn2Hi
	cLn2Lo
	cP0
	cP1
	cP2
	cP3
	cP4
	cP5
	cOne
	cMin
	cMax
	cTwo
	cGeluA
	cGeluB
	nConsts
)

func cz(k int) int { return 16 + k }

// exp16 sets Zx = e^Zx (16 lanes); Zt1, Zt2, Zt3 are scratch.
func (g *gen) exp16(x, t1, t2, t3 int) {
	g.p("\tVMAXPS Z%d, Z%d, Z%d", cz(cMin), x, x)
	g.p("\tVMINPS Z%d, Z%d, Z%d", cz(cMax), x, x)
	g.p("\tVMULPS Z%d, Z%d, Z%d", cz(cLog2e), x, t1)
	g.p("\tVRNDSCALEPS $0, Z%d, Z%d", t1, t1)              // n, rounded to nearest even
	g.p("\tVFNMADD231PS Z%d, Z%d, Z%d", cz(cLn2Hi), t1, x) // r = x − n·ln2hi − n·ln2lo
	g.p("\tVFNMADD231PS Z%d, Z%d, Z%d", cz(cLn2Lo), t1, x)
	g.p("\tVMULPS Z%d, Z%d, Z%d", x, x, t3) // r²
	g.p("\tVMOVAPS Z%d, Z%d", cz(cP0), t2)
	for k := cP1; k <= cP5; k++ {
		g.p("\tVFMADD213PS Z%d, Z%d, Z%d", cz(k), x, t2) // P = P·r + p_k
	}
	g.p("\tVFMADD213PS Z%d, Z%d, Z%d", x, t3, t2) // r²·P + r
	g.p("\tVADDPS Z%d, Z%d, Z%d", cz(cOne), t2, t2)
	g.p("\tVSCALEFPS Z%d, Z%d, Z%d", t1, t2, x) // · 2^n
}

// tanhCap sets Zx = c·tanh(Zx/c) for c in Z31: tanh(u) = 1 − 2/(e^{2u} + 1). Zt1-Zt4 are scratch.
func (g *gen) tanhCap(x, t1, t2, t3, t4 int) {
	g.p("\tVDIVPS Z31, Z%d, Z%d", x, t4)
	g.p("\tVADDPS Z%d, Z%d, Z%d", t4, t4, t4)
	g.exp16(t4, t1, t2, t3)
	g.p("\tVADDPS Z%d, Z%d, Z%d", cz(cOne), t4, t4)
	g.p("\tVDIVPS Z%d, Z%d, Z%d", t4, cz(cTwo), t1)
	g.p("\tVSUBPS Z%d, Z%d, Z%d", t1, cz(cOne), t4)
	g.p("\tVMULPS Z31, Z%d, Z%d", t4, x)
}

// hreduce leaves op (VMAXPS or VADDPS) over the 16 lanes of Zx in lane 0 of Xx (lanes l and l+8, l+4, l+2,
// l+1); Zt is scratch.
func (g *gen) hreduce(op string, x, t int) {
	g.p("\tVEXTRACTF64X4 $1, Z%d, Y%d", x, t)
	g.p("\t%s Y%d, Y%d, Y%d", op, t, x, x)
	g.p("\tVEXTRACTF128 $1, Y%d, X%d", x, t)
	g.p("\t%s X%d, X%d, X%d", op, t, x, x)
	g.p("\tVPERMILPS $0x4E, X%d, X%d", x, t)
	g.p("\t%s X%d, X%d, X%d", op, t, x, x)
	g.p("\tVPERMILPS $0xB1, X%d, X%d", x, t)
	g.p("\t%s X%d, X%d, X%d", op, t, x, x)
}

// loadConsts broadcasts the first n constants of ExpConsts into Z16….
func (g *gen) loadConsts(n int) {
	for k := range n {
		g.p("\tVBROADCASTSS ·expConsts+%d(SB), Z%d", 4*k, cz(k))
	}
}

// tailMask sets K1 to the mask of the last n%16 elements of a row of n (in R8), and R8 to its full chunks.
func (g *gen) tailMask() {
	g.p("\tMOVQ R8, CX")
	g.p("\tANDQ $15, CX")
	g.p("\tMOVQ $1, AX")
	g.p("\tSHLQ CX, AX")
	g.p("\tDECQ AX")
	g.p("\tKMOVW AX, K1")
	g.p("\tSHRQ $4, R8")
}

// softmaxRow writes softmaxRowAVX512. It is long because it writes one assembly routine straight through, in the
// order of the listing it produces, with the routine's own comments.
func (g *gen) softmaxRow() {
	for _, l := range []string{
		"func softmaxRowAVX512(s *float32, n int, scale, softcap, mOld float32) (mNew, sum float32)",
		"One row of a block of attention scores, s[0:n] (the keys its query sees): s[i] becomes t = s[i]·scale",
		"(softcap > 0: softcap·tanh(t/softcap)), then e^(t − mNew) with mNew the largest of mOld and every t; the",
		"sum of the exponentials is returned with mNew.",
	} {
		g.p("// %s", l)
	}
	g.p("TEXT ·softmaxRowAVX512(SB), NOSPLIT, $0-40")
	g.p("\tMOVQ s+0(FP), SI")
	g.p("\tMOVQ n+8(FP), R8")
	g.loadConsts(cTwo + 1)
	g.p("\tVBROADCASTSS scale+16(FP), Z30")
	g.p("\tVBROADCASTSS softcap+20(FP), Z31")
	g.p("\tVBROADCASTSS mOld+24(FP), Z2")
	g.tailMask()
	g.p("\tMOVQ SI, DI")
	g.p("\tMOVQ R8, R9")
	g.p("\tMOVL softcap+20(FP), AX")
	g.p("\tTESTL AX, AX")
	g.p("\tJNZ sm_cap")
	pass1 := func(label string, capped bool) {
		transform := func() {
			g.p("\tVMULPS Z30, Z0, Z0")
			if capped {
				g.tanhCap(0, 3, 4, 5, 6)
			}
		}
		g.p("%s_loop:", label)
		g.p("\tTESTQ R9, R9")
		g.p("\tJZ %s_tail", label)
		g.p("\tVMOVUPS (DI), Z0")
		transform()
		g.p("\tVMOVUPS Z0, (DI)")
		g.p("\tVMAXPS Z0, Z2, Z2")
		g.p("\tADDQ $64, DI")
		g.p("\tDECQ R9")
		g.p("\tJMP %s_loop", label)
		g.p("%s_tail:", label)
		g.p("\tKORTESTW K1, K1")
		g.p("\tJZ sm_max")
		g.p("\tVMOVUPS.Z (DI), K1, Z0")
		transform()
		g.p("\tVMOVUPS Z0, K1, (DI)")
		g.p("\tVMAXPS Z0, Z2, K1, Z2")
		g.p("\tJMP sm_max")
	}
	pass1("sm_plain", false)
	g.p("sm_cap:")
	pass1("sm_capped", true)
	g.p("sm_max:")
	g.hreduce("VMAXPS", 2, 3)
	g.p("\tVMOVSS X2, mNew+32(FP)")
	g.p("\tVBROADCASTSS X2, Z2")
	g.p("\tVXORPS Z7, Z7, Z7")
	g.p("\tMOVQ SI, DI")
	g.p("\tMOVQ R8, R9")
	g.p("sm_exp_loop:")
	g.p("\tTESTQ R9, R9")
	g.p("\tJZ sm_exp_tail")
	g.p("\tVMOVUPS (DI), Z0")
	g.p("\tVSUBPS Z2, Z0, Z0")
	g.exp16(0, 3, 4, 5)
	g.p("\tVMOVUPS Z0, (DI)")
	g.p("\tVADDPS Z0, Z7, Z7")
	g.p("\tADDQ $64, DI")
	g.p("\tDECQ R9")
	g.p("\tJMP sm_exp_loop")
	g.p("sm_exp_tail:")
	g.p("\tKORTESTW K1, K1")
	g.p("\tJZ sm_sum")
	g.p("\tVMOVUPS.Z (DI), K1, Z0")
	g.p("\tVSUBPS Z2, Z0, Z0")
	g.exp16(0, 3, 4, 5)
	g.p("\tVMOVUPS Z0, K1, (DI)")
	g.p("\tVADDPS Z0, Z7, K1, Z7")
	g.p("sm_sum:")
	g.hreduce("VADDPS", 7, 3)
	g.p("\tVMOVSS X7, sum+36(FP)")
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	g.p("")
}

// PVRows and PVCols bound the tiles of the attention kernels' weighted sums of values: up to PVRows query
// rows times PVCols 16-lane columns of the head.
const (
	PVRows = 6
	PVCols = 4
)

// pv writes pvAVX512r{rows}c{cols}: o[i][c] += Σ_j p[i][j]·v[j][c] for the tile's rows i and its 16·cols
// columns, keys j in order (each output a chain of fused multiply-adds over the keys); with half,
// pvF16AVX512r{rows}c{cols}, whose values are float16 (a float16 cache's), widened as they are loaded.
func (g *gen) pv(rows, cols int, half bool) {
	name, vType, vLoad, vBytes := fmt.Sprintf("pvAVX512r%dc%d", rows, cols), "float32", "VMOVUPS", 64
	if half {
		name, vType, vLoad, vBytes = fmt.Sprintf("pvF16AVX512r%dc%d", rows, cols), "uint16", "VCVTPH2PS", 32
	}
	g.p("// func %s(o *float32, ldo int, p *float32, ldp int, v *%s, ldv int, keys int)", name, vType)
	g.p("TEXT ·%s(SB), NOSPLIT, $0-56", name)
	g.p("\tMOVQ o+0(FP), DI")
	g.p("\tMOVQ ldo+8(FP), R8")
	g.p("\tMOVQ p+16(FP), SI")
	g.p("\tMOVQ ldp+24(FP), R9")
	g.p("\tMOVQ v+32(FP), DX")
	g.p("\tMOVQ ldv+40(FP), R10")
	g.p("\tMOVQ keys+48(FP), CX")
	g.p("\tLEAQ (R8)(R8*2), AX")
	g.p("\tLEAQ (DI)(AX*1), R11") // o + 3·ldo
	g.p("\tLEAQ (R9)(R9*2), AX")
	g.p("\tLEAQ (SI)(AX*1), R12") // p + 3·ldp
	// Row i of a matrix at base, its row 3 at alt, ld bytes between rows.
	row := func(base, alt, ld string, i int) string {
		return fmt.Sprintf([6]string{"(%[1]s)", "(%[1]s)(%[3]s*1)", "(%[1]s)(%[3]s*2)", "(%[2]s)", "(%[1]s)(%[3]s*4)", "(%[2]s)(%[3]s*2)"}[i], base, alt, ld)
	}
	oAddr := func(i, c int) string { return fmt.Sprintf("%d%s", 64*c, row("DI", "R11", "R8", i)) }
	pAddr := func(i int) string { return row("SI", "R12", "R9", i) }
	acc := func(i, c int) int { return i*PVCols + c }
	for i := range rows {
		for c := range cols {
			g.p("\tVMOVUPS %s, Z%d", oAddr(i, c), acc(i, c))
		}
	}
	g.p("\tTESTQ CX, CX")
	g.p("\tJZ %s_store", name)
	g.p("%s_loop:", name)
	for c := range cols {
		g.p("\t%s %d(DX), Z%d", vLoad, vBytes*c, 24+c)
	}
	for i := range rows {
		g.p("\tVBROADCASTSS %s, Z28", pAddr(i))
		for c := range cols {
			g.p("\tVFMADD231PS Z%d, Z28, Z%d", 24+c, acc(i, c))
		}
	}
	g.p("\tADDQ $4, SI")
	g.p("\tADDQ $4, R12")
	g.p("\tADDQ R10, DX")
	g.p("\tDECQ CX")
	g.p("\tJNZ %s_loop", name)
	g.p("%s_store:", name)
	for i := range rows {
		for c := range cols {
			g.p("\tVMOVUPS Z%d, %s", acc(i, c), oAddr(i, c))
		}
	}
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	g.p("")
}

// elementwise writes name(y, x *float32, [b *float32,] n int, [scalars float32...]): y[i] = f(x[i][, b[i]])
// for i < n, where body computes f of the 16 lanes of Z0 (and Z1, the second input's) into Z0, with Z1-Z6
// scratch (Z6 zero) and the scalars broadcast into Z31, Z30, … .
func (g *gen) elementwise(name, doc string, binary bool, scalars []string, body func()) {
	sig, n := "y, x *float32, n int", "n+16(FP)"
	frame := 24
	if binary {
		sig, n, frame = "y, x, b *float32, n int", "n+24(FP)", 32
	}
	if len(scalars) > 0 {
		sig += ", " + strings.Join(scalars, ", ") + " float32"
	}
	g.p("// func %s(%s)", name, sig)
	g.p("// %s", doc)
	g.p("TEXT ·%s(SB), NOSPLIT, $0-%d", name, frame+4*len(scalars))
	g.p("\tMOVQ y+0(FP), DI")
	g.p("\tMOVQ x+8(FP), SI")
	if binary {
		g.p("\tMOVQ b+16(FP), DX")
	}
	g.p("\tMOVQ %s, R8", n)
	for i, sc := range scalars {
		g.p("\tVBROADCASTSS %s+%d(FP), Z%d", sc, frame+4*i, 31-i)
	}
	g.loadConsts(min(nConsts, 16-len(scalars))) // Z16 … below the scalars
	g.tailMask()
	g.p("\tVXORPS Z6, Z6, Z6")
	g.p("%s_loop:", name)
	g.p("\tTESTQ R8, R8")
	g.p("\tJZ %s_tail", name)
	g.p("\tVMOVUPS (SI), Z0")
	if binary {
		g.p("\tVMOVUPS (DX), Z1")
	}
	body()
	g.p("\tVMOVUPS Z0, (DI)")
	g.p("\tADDQ $64, SI")
	if binary {
		g.p("\tADDQ $64, DX")
	}
	g.p("\tADDQ $64, DI")
	g.p("\tDECQ R8")
	g.p("\tJMP %s_loop", name)
	g.p("%s_tail:", name)
	g.p("\tKORTESTW K1, K1")
	g.p("\tJZ %s_done", name)
	g.p("\tVMOVUPS.Z (SI), K1, Z0")
	if binary {
		g.p("\tVMOVUPS.Z (DX), K1, Z1")
	}
	body()
	g.p("\tVMOVUPS Z0, K1, (DI)")
	g.p("%s_done:", name)
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	g.p("")
}

// sumSquares writes sumSquaresAVX512(x *float32, n int) float64: Σ x[i]² for i < n, in float64 (each square
// exact), over 16 lanes then summed l and l+8, l+4, l+2, l+1.
func (g *gen) sumSquares() {
	g.p("// func sumSquaresAVX512(x *float32, n int) float64")
	g.p("TEXT ·sumSquaresAVX512(SB), NOSPLIT, $0-24")
	g.p("\tMOVQ x+0(FP), SI")
	g.p("\tMOVQ n+8(FP), R8")
	g.tailMask()
	g.p("\tVXORPD Z3, Z3, Z3")
	g.p("\tVXORPD Z4, Z4, Z4")
	step := func() {
		g.p("\tVCVTPS2PD Y0, Z1")
		g.p("\tVEXTRACTF64X4 $1, Z0, Y2")
		g.p("\tVCVTPS2PD Y2, Z2")
		g.p("\tVFMADD231PD Z1, Z1, Z3")
		g.p("\tVFMADD231PD Z2, Z2, Z4")
	}
	g.p("ss_loop:")
	g.p("\tTESTQ R8, R8")
	g.p("\tJZ ss_tail")
	g.p("\tVMOVUPS (SI), Z0")
	step()
	g.p("\tADDQ $64, SI")
	g.p("\tDECQ R8")
	g.p("\tJMP ss_loop")
	g.p("ss_tail:")
	g.p("\tKORTESTW K1, K1")
	g.p("\tJZ ss_sum")
	g.p("\tVMOVUPS.Z (SI), K1, Z0")
	step()
	g.p("ss_sum:")
	g.p("\tVADDPD Z4, Z3, Z3")
	g.p("\tVEXTRACTF64X4 $1, Z3, Y4")
	g.p("\tVADDPD Y4, Y3, Y3")
	g.p("\tVEXTRACTF128 $1, Y3, X4")
	g.p("\tVADDPD X4, X3, X3")
	g.p("\tVPERMILPD $1, X3, X4")
	g.p("\tVADDSD X4, X3, X3")
	g.p("\tVMOVSD X3, ret+16(FP)")
	g.p("\tVZEROUPPER")
	g.p("\tRET")
	g.p("")
}

// sigmoidTimesX sets Z0 = Z0/(1 + e^−Z1).
func (g *gen) sigmoidTimesX() {
	g.p("\tVSUBPS Z1, Z6, Z1")
	g.exp16(1, 2, 3, 4)
	g.p("\tVADDPS Z%d, Z1, Z1", cz(cOne))
	g.p("\tVDIVPS Z1, Z0, Z0")
}

// GenerateAttention returns the text of attn_amd64.s: softmaxRowAVX512, the pvAVX512r*c* tiles, and the
// elementwise kernels that use the vectorized exp (siluAVX512, geluTanhAVX512).
func GenerateAttention() []byte {
	var g gen
	g.header()
	g.softmaxRow()
	g.elementwise("siluAVX512", "y[i] = x[i]·sigmoid(x[i]) = x[i]/(1 + e^−x[i])", false, nil, func() {
		g.p("\tVMOVAPS Z0, Z1")
		g.sigmoidTimesX()
	})
	g.elementwise("geluTanhAVX512", "y[i] = 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) = x·sigmoid(x·(a + b·x²)), x = x[i]", false, nil, func() {
		g.p("\tVMULPS Z0, Z0, Z1")
		g.p("\tVFMADD213PS Z%d, Z%d, Z1", cz(cGeluA), cz(cGeluB))
		g.p("\tVMULPS Z0, Z1, Z1")
		g.sigmoidTimesX()
	})
	g.elementwise("softCapAVX512", "y[i] = c·tanh(x[i]/c)", false, []string{"c"}, func() { g.tanhCap(0, 1, 2, 3, 4) })
	g.elementwise("addAVX512", "y[i] = x[i] + b[i]", true, nil, func() { g.p("\tVADDPS Z1, Z0, Z0") })
	g.elementwise("mulAVX512", "y[i] = x[i]·b[i]", true, nil, func() { g.p("\tVMULPS Z1, Z0, Z0") })
	g.elementwise("scaleRowAVX512", "y[i] = (x[i]·scale)·(offset + b[i]): RMSNorm's last step", true, []string{"scale", "offset"}, func() {
		g.p("\tVMULPS Z31, Z0, Z0")
		g.p("\tVADDPS Z30, Z1, Z1")
		g.p("\tVMULPS Z1, Z0, Z0")
	})
	g.sumSquares()
	for _, half := range []bool{false, true} {
		for r := 1; r <= PVRows; r++ {
			for c := 1; c <= PVCols; c++ {
				g.pv(r, c, half)
			}
		}
	}
	return g.b.Bytes()
}
