package shards

import "golang.org/x/sys/cpu"

// useInterleaveAVX2 selects interleave2AVX2 (interleave_amd64.s).
var useInterleaveAVX2 = cpu.X86.HasAVX2

//go:noescape
func interleave2AVX2(dst, p0, p1 *byte, n int)

// interleave2 writes out[2i] = p0[i], out[2i+1] = p1[i] for the len(p0) elements (p1 and out at least as long).
func interleave2(out, p0, p1 []byte) {
	n := len(p0) &^ 31
	if !useInterleaveAVX2 || n == 0 {
		interleave2Go(out, p0, p1)
		return
	}
	_, _ = p1[n-1], out[2*n-1]
	interleave2AVX2(&out[0], &p0[0], &p1[0], n)
	interleave2Go(out[2*n:], p0[n:], p1[n:])
}

//go:noescape
func interleave4AVX2(dst, p0, p1, p2, p3 *byte, n int)

// interleave4 writes out[4i+k] = pk[i] for the len(p0) elements (the others and out at least as long).
func interleave4(out, p0, p1, p2, p3 []byte) {
	n := len(p0) &^ 31
	if !useInterleaveAVX2 || n == 0 {
		interleave4Go(out, p0, p1, p2, p3)
		return
	}
	_, _, _, _ = p1[n-1], p2[n-1], p3[n-1], out[4*n-1]
	interleave4AVX2(&out[0], &p0[0], &p1[0], &p2[0], &p3[0], n)
	interleave4Go(out[4*n:], p0[n:], p1[n:], p2[n:], p3[n:])
}

//go:noescape
func expandNibblesAVX2(dst, codes *byte, table *[nibbleTable]byte, groups int)

// expandNibbles writes dst[g+j] = table[low nibble of codes[g/2+j]], dst[g+j+16] = table[its high nibble], for
// each group of 32 bytes g of dst (a multiple of 32 bytes; codes holds half as many).
func expandNibbles(dst, codes []byte, table *[nibbleTable]byte) {
	if !useInterleaveAVX2 || len(dst) < 32 {
		expandNibblesGo(dst, codes, table)
		return
	}
	_ = codes[len(dst)/2-1]
	expandNibblesAVX2(&dst[0], &codes[0], table, len(dst)/32)
}
