//go:build !amd64

package shards

// interleave2 writes out[2i] = p0[i], out[2i+1] = p1[i] for the len(p0) elements (p1 and out at least as long).
func interleave2(out, p0, p1 []byte) { interleave2Go(out, p0, p1) }
