package kernels

import (
	"unsafe"

	"github.com/layerstream/layerstream/quant"
)

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
func codes16Q5_KAVX512(src *byte, stride int, dst *byte)

//go:noescape
func codes16Q6_KAVX512(src *byte, stride int, dst *byte)

//go:noescape
func codes16Q3_KAVX512(src *byte, stride int, dst *byte)

//go:noescape
func codes16Q2_KAVX512(src *byte, stride int, dst *byte)

//go:noescape
func codes16Q8_0AVX512(src *byte, stride int, dst *byte, pairs int)

//go:noescape
func codes16Q4_0AVX512(src *byte, stride int, dst *byte, pairs int)

//go:noescape
func codes16Q5_0AVX512(src *byte, stride int, dst *byte, pairs int)

//go:noescape
func codes16Q4_1AVX512(src *byte, stride int, dst *byte, pairs int)

//go:noescape
func codes16Q5_1AVX512(src *byte, stride int, dst *byte, pairs int)

//go:noescape
func scales16K4AVX512(src *byte, stride int, dst *byte, nb, blockBytes int)

//go:noescape
func scales16Q6_KAVX512(src *byte, stride int, dst *byte, nb, blockBytes int)

//go:noescape
func scales16Q3_KAVX512(src *byte, stride int, dst *byte, nb, blockBytes int)

//go:noescape
func scales16Q2_KAVX512(src *byte, stride int, dst *byte, nb, blockBytes int)

//go:noescape
func scales16HalfAVX512(src *byte, stride int, dst *byte, nb, blockBytes int, withMin bool)

// codes16 and scales16 are the AVX-512 unpackers of 16 rows (tiledFormat.codes16 and scales16) by block type,
// empty where the CPU has no AVX-512 (BW: the word shifts). The codes of 32-element blocks go in pairs of blocks
// (one 1 KiB chunk of the panel each), an odd last block through the type's Go unpacker.
var codes16, scales16 = func() (codes, scales map[quant.Type]unpack16) {
	if !useAVX512 {
		return nil, nil
	}
	superBlocks := func(asm func(src *byte, stride int, dst *byte)) unpack16 {
		return func(src *byte, stride int, dst *byte, nb, blockBytes int) {
			for b := range nb {
				asm((*byte)(unsafe.Add(unsafe.Pointer(src), b*blockBytes)), stride, (*byte)(unsafe.Add(unsafe.Pointer(dst), b*4096)))
			}
		}
	}
	pairs := func(asm func(src *byte, stride int, dst *byte, pairs int), unpack func(codeDst, metaDst, []byte)) unpack16 {
		return func(src *byte, stride int, dst *byte, nb, blockBytes int) {
			if nb >= 2 {
				asm(src, stride, dst, nb/2)
			}
			if b := nb - 1; nb%2 == 1 {
				var meta [128]byte // the scales go there too; scales16 writes the panel's
				for r := range tileRows {
					blk := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(src), r*stride+b*blockBytes)), blockBytes)
					unpack(codeDst{unsafe.Add(unsafe.Pointer(dst), b*512+4*r)}, metaDst{p: unsafe.Pointer(&meta[0])}, blk)
				}
			}
		}
	}
	halves := func(withMin bool) unpack16 {
		return func(src *byte, stride int, dst *byte, nb, blockBytes int) {
			scales16HalfAVX512(src, stride, dst, nb, blockBytes, withMin)
		}
	}
	codes = map[quant.Type]unpack16{
		quant.Q4_K: superBlocks(codes16Q4_KAVX512),
		quant.Q5_K: superBlocks(codes16Q5_KAVX512),
		quant.Q6_K: superBlocks(codes16Q6_KAVX512),
		quant.Q3_K: superBlocks(codes16Q3_KAVX512),
		quant.Q2_K: superBlocks(codes16Q2_KAVX512),
		quant.Q8_0: pairs(codes16Q8_0AVX512, unpackQ8_0Tiled),
		quant.Q4_0: pairs(codes16Q4_0AVX512, unpackQ4_0Tiled),
		quant.Q5_0: pairs(codes16Q5_0AVX512, unpackQ5_0Tiled),
		quant.Q4_1: pairs(codes16Q4_1AVX512, unpackQ4_1Tiled),
		quant.Q5_1: pairs(codes16Q5_1AVX512, unpackQ5_1Tiled),
	}
	scales = map[quant.Type]unpack16{
		quant.Q4_K: scales16K4AVX512,
		quant.Q5_K: scales16K4AVX512,
		quant.Q6_K: scales16Q6_KAVX512,
		quant.Q3_K: scales16Q3_KAVX512,
		quant.Q2_K: scales16Q2_KAVX512,
		quant.Q8_0: halves(false),
		quant.Q4_0: halves(false),
		quant.Q5_0: halves(false),
		quant.Q4_1: halves(true),
		quant.Q5_1: halves(true),
	}
	return codes, scales
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
