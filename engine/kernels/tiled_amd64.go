package kernels

import "unsafe"

//go:noescape
func tileKVNNI(codes, meta, qs, ameta *byte, nsb, nsub, qps int, acc *float32)

//go:noescape
func tileQ8VNNI(codes, meta, qs, ameta *byte, nb int, acc *float32)

//go:noescape
func tileQ81VNNI(codes, meta, qs, ameta *byte, nb int, acc *float32)

// tileQ8 and tileQ81 are the tiled kernels of 32-element blocks without and with a minimum (tiled.go) where the
// CPU has AVX-512 VNNI, else nil: bit for bit as tileQ8Go and tileQ81Go.
var tileQ8, tileQ81 = tile32(tileQ8VNNI, 64), tile32(tileQ81VNNI, 128)

// tile32 wraps a kernel of 32-element blocks whose panels hold metaBytes per block, checking the lengths it reads.
func tile32(asm func(codes, meta, qs, ameta *byte, nb int, acc *float32), metaBytes int) quantTile {
	if !useVNNI {
		return nil
	}
	return func(codes, meta, qs, ameta []byte, nb int, acc *[tileIn * tileRows]float32) {
		_ = codes[nb*512-1]
		_ = meta[nb*metaBytes-1]
		_ = qs[nb*32*tileIn-1]
		_ = ameta[nb*8*tileIn-1]
		asm(&codes[0], &meta[0], &qs[0], &ameta[0], nb, &acc[0])
	}
}

//go:noescape
func codes16Q4_KAVX512(src *byte, stride int, dst *byte)

//go:noescape
func codes16Q6_KAVX512(src *byte, stride int, dst *byte)

//go:noescape
func codes16Q8_0AVX512(src *byte, stride int, dst *byte, pairs int)

// codes16Q4_K, codes16Q6_K and codes16Q8_0 unpack the codes of the nb blocks of 16 rows (tiledFormat.codes16)
// where the CPU has AVX-512 (BW: the word shifts), else nil; Q8_0 in pairs of blocks (one 1 KiB chunk of the
// panel each), an odd last block in Go.
var codes16Q4_K, codes16Q6_K, codes16Q8_0 = func() (q4, q6, q8 func(src *byte, stride int, dst *byte, nb int)) {
	if !useAVX512 {
		return nil, nil, nil
	}
	perBlock := func(asm func(src *byte, stride int, dst *byte), blockBytes int) func(src *byte, stride int, dst *byte, nb int) {
		return func(src *byte, stride int, dst *byte, nb int) {
			for b := range nb {
				asm((*byte)(unsafe.Add(unsafe.Pointer(src), b*blockBytes)), stride, (*byte)(unsafe.Add(unsafe.Pointer(dst), b*4096)))
			}
		}
	}
	q8 = func(src *byte, stride int, dst *byte, nb int) {
		if nb >= 2 {
			codes16Q8_0AVX512(src, stride, dst, nb/2)
		}
		if b := nb - 1; nb%2 == 1 {
			for r := range tileRows {
				blk := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(src), r*stride+b*34)), 34)
				codesQ8_0(codeDst{unsafe.Add(unsafe.Pointer(dst), b*512+4*r)}, blk)
			}
		}
	}
	return perBlock(codes16Q4_KAVX512, 144), perBlock(codes16Q6_KAVX512, 210), q8
}()

// tileK is the tiled kernel (tiled.go) where the CPU has AVX-512 VNNI, else nil: it adds to acc[c·16 + r] the
// products of panel row r with tile input c over nsb super-blocks of nsub sub-blocks, bit for bit as tileGo.
var tileK = func() func(codes, meta, qs, ameta []byte, nsb, nsub int, acc *[tileIn * tileRows]float32) {
	if !useVNNI {
		return nil
	}
	return func(codes, meta, qs, ameta []byte, nsb, nsub int, acc *[tileIn * tileRows]float32) {
		np := nsub / 2
		_ = codes[nsb*4096-1]
		_ = meta[nsb*(nsub+np+2)*64-1]
		_ = qs[nsb*256*tileIn-1]
		_ = ameta[nsb*(np+1)*4*tileIn-1]
		tileKVNNI(&codes[0], &meta[0], &qs[0], &ameta[0], nsb, nsub, 64/nsub, &acc[0])
	}
}()
