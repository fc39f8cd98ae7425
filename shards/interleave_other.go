//go:build !amd64

package shards

// interleave2 writes out[2i] = p0[i], out[2i+1] = p1[i] for the len(p0) elements (p1 and out at least as long).
func interleave2(out, p0, p1 []byte) { interleave2Go(out, p0, p1) }

// expandNibbles writes dst[g+j] = table[low nibble of codes[g/2+j]], dst[g+j+16] = table[its high nibble], for
// each group of 32 bytes g of dst (a multiple of 32 bytes; codes holds half as many).
func expandNibbles(dst, codes []byte, table *[nibbleTable]byte) { expandNibblesGo(dst, codes, table) }

// interleave4 writes out[4i+k] = pk[i] for the len(p0) elements (the others and out at least as long).
func interleave4(out, p0, p1, p2, p3 []byte) { interleave4Go(out, p0, p1, p2, p3) }
