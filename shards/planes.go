package shards

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"

	"github.com/klauspost/compress/huff0"
)

// The planes encoding. A tensor is cut into frames of frameSize decoded bytes (as zstd's, so that frames
// decode in parallel), and each frame into blocks of planeBlock elements. Within a block the bytes are split
// into planes by their position in the element (as shuffle-zstd shuffles them): for a bf16 weight, plane 1
// holds the sign and the top 7 exponent bits, plane 0 the last exponent bit and the mantissa. Each plane is
// stored as whichever is smallest of: huff0's 4-stream Huffman code (zstd's literal coder, without zstd's
// match search), one repeated byte, or the bytes as they are. On bf16 weights the high plane codes to ~2.7
// bits a byte and the mantissa plane stays raw (~67% of raw on disk, against shuffle-zstd's 74.5%), and
// decoding is one Huffman pass over half the bytes and one interleave, several times zstd's rate.
//
// A frame is, for each block in order, for each plane k in 0..w-1: a little-endian uint32 whose low 2 bits
// are the plane's mode (planeRaw, planeHuff, planeRLE) and whose upper 30 bits are its stored length, then
// that many bytes. After the last block come the frame's trailing bytes that do not fill an element, as they
// are. Every length is checked against the block and the frame before anything is decoded.
const (
	planeBlock  = 64 << 10 // elements per block (huff0 codes at most 256 KiB; nibble exceptions index by uint16)
	planeRaw    = 0
	planeHuff   = 1
	planeRLE    = 2
	planeNibble = 3
	// A nibble plane: nibbleTable bytes (the byte each 4-bit code stands for; code nibbleEscape marks an
	// exception), a uint32 exception count E, the codes packed 32 to 16 bytes (byte j of a group holds code j in
	// its low half and code j+16 in its high half; the last group padded), E uint16 indices into the block, E
	// bytes: the exceptions' values.
	nibbleTable  = 16
	nibbleEscape = 15
)

// nibbleSize is the stored size of a nibble plane of m bytes with e exceptions.
func nibbleSize(m, e int) int { return nibbleTable + 4 + (m+31)/32*16 + 3*e }

// planesWidth is the element size planes splits by: the dtype's size, 1 for block-quantized types.
var planesWidth = shuffleWidth

// planeScratch is one goroutine's state for coding planes: huff0's scratch and one block of each plane.
type planeScratch struct {
	huff   huff0.Scratch
	planes [][]byte
	views  [][]byte // decodePlanes: each plane of the block being decoded, in planes or in the stored frame
}

var planePool = sync.Pool{New: func() any { return new(planeScratch) }}

// plane returns scratch plane k, planeBlock bytes, allocated on first use.
func (s *planeScratch) plane(k int) []byte {
	for len(s.planes) <= k {
		s.planes = append(s.planes, make([]byte, planeBlock))
	}
	return s.planes[k]
}

// encodePlanes appends the frame of src (elements of w bytes) to dst: each plane in its smallest mode, or with
// fast, in its smallest mode that decodes at memory speed (no Huffman code).
func encodePlanes(dst, src []byte, w int, s *planeScratch, fast bool) []byte {
	n := len(src) / w
	for start := 0; start < n; start += planeBlock {
		m := min(planeBlock, n-start)
		blk := src[start*w : (start+m)*w]
		for k := range w {
			p := s.plane(k)[:m]
			for i := range p {
				p[i] = blk[i*w+k]
			}
			dst = appendPlane(dst, p, s, fast)
		}
	}
	return append(dst, src[n*w:]...)
}

// appendPlane appends one plane in its smallest mode (without Huffman codes when fast).
func appendPlane(dst, p []byte, s *planeScratch, fast bool) []byte {
	var hist [256]int
	for _, v := range p {
		hist[v]++
	}
	if hist[p[0]] == len(p) {
		return append(binary.LittleEndian.AppendUint32(dst, 1<<2|planeRLE), p[0])
	}
	// The 15 most frequent values get codes; the rest are exceptions.
	var order [256]byte
	for i := range order {
		order[i] = byte(i)
	}
	slices.SortStableFunc(order[:], func(a, b byte) int { return hist[b] - hist[a] })
	var code [256]byte
	for i := range code {
		code[i] = nibbleEscape
	}
	var table [nibbleTable]byte
	covered := 0
	for c, v := range order[:nibbleEscape] {
		table[c], code[v] = v, byte(c)
		covered += hist[v]
	}
	best, mode := len(p), planeRaw
	if n := nibbleSize(len(p), len(p)-covered); n < best {
		best, mode = n, planeNibble
	}
	var huff []byte
	if !fast {
		s.huff.Reuse = huff0.ReusePolicyNone // every block carries its own table: blocks decode independently
		if out, _, err := huff0.Compress4X(p, &s.huff); err == nil && len(out) < best {
			best, mode, huff = len(out), planeHuff, out
		}
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(best)<<2|uint32(mode))
	switch mode {
	case planeHuff:
		return append(dst, huff...)
	case planeNibble:
		dst = append(dst, table[:]...)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(p)-covered))
		for g := 0; g < len(p); g += 32 {
			for j := range 16 {
				dst = append(dst, nibbleCode(p, g+j, &code)|nibbleCode(p, g+j+16, &code)<<4)
			}
		}
		for i, v := range p {
			if code[v] == nibbleEscape {
				dst = binary.LittleEndian.AppendUint16(dst, uint16(i))
			}
		}
		for _, v := range p {
			if code[v] == nibbleEscape {
				dst = append(dst, v)
			}
		}
		return dst
	}
	// Incompressible, too small for huff0, or not smaller: as it is.
	return append(dst, p...)
}

// nibbleCode is the code of p[i], 0 past the end.
func nibbleCode(p []byte, i int, code *[256]byte) byte {
	if i >= len(p) {
		return 0
	}
	return code[p[i]]
}

// decodePlanes decodes one planes frame, stored, into dst (exactly the frame's decoded size), for
// elements of w bytes. Corrupted input is an error, never a panic, and nothing is written outside dst.
func decodePlanes(stored, dst []byte, w int) error {
	s := planePool.Get().(*planeScratch)
	defer planePool.Put(s)
	s.huff.MaxDecodedSize = planeBlock
	n := len(dst) / w
	if cap(s.views) < w {
		s.views = make([][]byte, w)
	}
	planes := s.views[:w]
	defer clear(planes) // the pooled scratch keeps no reference to the shard's buffer
	for start := 0; start < n; start += planeBlock {
		m := min(planeBlock, n-start)
		for k := range w {
			if len(stored) < 4 {
				return fmt.Errorf("block at element %d, plane %d: frame ends in a plane header", start, k)
			}
			h := binary.LittleEndian.Uint32(stored)
			mode, size := h&3, int(h>>2)
			stored = stored[4:]
			if size > len(stored) {
				return fmt.Errorf("block at element %d, plane %d: %d stored bytes, the frame has %d left", start, k, size, len(stored))
			}
			body := stored[:size]
			stored = stored[size:]
			switch {
			case mode == planeRaw && size == m:
				planes[k] = body
			case mode == planeRLE && size == 1:
				p := s.plane(k)[:m]
				p[0] = body[0]
				for n := 1; n < m; n *= 2 { // doubling copies: memmove speed
					copy(p[n:], p[:n])
				}
				planes[k] = p
			case mode == planeNibble && size >= nibbleSize(m, 0):
				p := s.plane(k)[:m]
				if err := decodeNibbles(p, body); err != nil {
					return fmt.Errorf("block at element %d, plane %d: %w", start, k, err)
				}
				planes[k] = p
			case mode == planeHuff && size < m:
				sc, rest, err := huff0.ReadTable(body, &s.huff)
				if err != nil {
					return fmt.Errorf("block at element %d, plane %d: huffman table: %w", start, k, err)
				}
				p, err := sc.Decoder().Decompress4X(s.plane(k)[:0:m], rest)
				if err != nil {
					return fmt.Errorf("block at element %d, plane %d: %w", start, k, err)
				}
				if len(p) != m {
					return fmt.Errorf("block at element %d, plane %d: decoded %d bytes, want %d", start, k, len(p), m)
				}
				planes[k] = p
			default:
				return fmt.Errorf("block at element %d, plane %d: mode %d with %d stored bytes for %d elements", start, k, mode, size, m)
			}
		}
		interleave(dst[start*w:(start+m)*w], planes)
	}
	if len(stored) != len(dst)-n*w {
		return fmt.Errorf("frame has %d bytes after its blocks, want %d", len(stored), len(dst)-n*w)
	}
	copy(dst[n*w:], stored)
	return nil
}

// decodeNibbles decodes a nibble plane body into p (its m bytes).
func decodeNibbles(p, body []byte) error {
	m := len(p)
	table := (*[nibbleTable]byte)(body)
	e32 := binary.LittleEndian.Uint32(body[nibbleTable:])
	e := int(min(e32, uint32(m+1))) // compared as uint32: int may be 32 bits
	if e > m || len(body) != nibbleSize(m, e) {
		return fmt.Errorf("nibble plane of %d bytes: %d stored bytes do not hold %d exceptions", m, len(body), e32)
	}
	codes := body[nibbleTable+4 : nibbleTable+4+(m+31)/32*16]
	idx := body[len(body)-3*e : len(body)-e]
	vals := body[len(body)-e:]
	full := m / 32
	expandNibbles(p[:full*32], codes[:full*16], table)
	if full*32 < m { // the last, partial group
		var tmp [32]byte
		expandNibbles(tmp[:], codes[full*16:], table)
		copy(p[full*32:], tmp[:])
	}
	for j, v := range vals {
		i := int(binary.LittleEndian.Uint16(idx[2*j:]))
		if i >= m {
			return fmt.Errorf("nibble plane exception %d at index %d of %d", j, i, m)
		}
		p[i] = v
	}
	return nil
}

// expandNibblesGo is expandNibbles in portable Go.
func expandNibblesGo(dst, codes []byte, table *[nibbleTable]byte) {
	for g := 0; g+32 <= len(dst); g += 32 {
		c := codes[g/2 : g/2+16]
		out := dst[g : g+32]
		for j, v := range c {
			out[j], out[j+16] = table[v&15], table[v>>4]
		}
	}
}

// interleave writes planes (w planes of n bytes each) to dst (n×w bytes): element i is byte i of each plane
// in order. Two and four planes (16- and 32-bit types) go through AVX2 where the CPU has it.
func interleave(dst []byte, planes [][]byte) {
	w := len(planes)
	n := len(dst) / w
	switch w {
	case 1:
		copy(dst, planes[0])
	case 2:
		interleave2(dst[:2*n], planes[0][:n], planes[1][:n])
	case 4:
		interleave4(dst[:4*n], planes[0][:n], planes[1][:n], planes[2][:n], planes[3][:n])
	default:
		for k, p := range planes {
			for i, v := range p[:n] {
				dst[i*w+k] = v
			}
		}
	}
}

// interleave4Go is interleave for four planes in portable Go.
func interleave4Go(out, p0, p1, p2, p3 []byte) {
	n := len(p0)
	p1, p2, p3 = p1[:n], p2[:n], p3[:n]
	for i, v := range p0 {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(v)|uint32(p1[i])<<8|uint32(p2[i])<<16|uint32(p3[i])<<24)
	}
}

// interleave2Go is interleave for two planes in portable Go: 8 elements at a time, spreading each plane's bytes.
func interleave2Go(out, p0, p1 []byte) {
	n := len(p0)
	p1 = p1[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		lo, hi := binary.LittleEndian.Uint64(p0[i:]), binary.LittleEndian.Uint64(p1[i:])
		binary.LittleEndian.PutUint64(out[2*i:], spreadBytes(uint32(lo))|spreadBytes(uint32(hi))<<8)
		binary.LittleEndian.PutUint64(out[2*i+8:], spreadBytes(uint32(lo>>32))|spreadBytes(uint32(hi>>32))<<8)
	}
	for ; i < n; i++ {
		binary.LittleEndian.PutUint16(out[2*i:], uint16(p0[i])|uint16(p1[i])<<8)
	}
}

// spreadBytes moves byte k of x to byte 2k of the result (zeros between).
func spreadBytes(x uint32) uint64 {
	v := uint64(x)
	v = (v | v<<16) & 0x0000ffff0000ffff
	return (v | v<<8) & 0x00ff00ff00ff00ff
}
