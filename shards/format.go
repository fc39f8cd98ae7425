package shards

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/layerstream/layerstream/checkpoint"
)

// Shard file format, version 1. Every number is little-endian.
//
//	[0, 64)            prefix: magic "LSSHARD\x00", uint32 version, 52 zero bytes
//	[64, H)            tensor data; each tensor starts at a multiple of 64 bytes, zero padding between
//	[H, size-24)       header: JSON (shardHeader), padded in front with zeros so that the file size is a
//	                   multiple of 4096 (O_DIRECT reads whole pages)
//	[size-24, size)    trailer: uint32 header length, uint32 CRC-32C of the header JSON, uint32 version,
//	                   uint32 zero, magic "LSSHARD\x00"
//
// The header sits at the end so a shard is written in one sequential pass (checksums are known only after the
// data went by) and read with one sequential read of the whole file. Checksums are CRC-32C (Castagnoli) of each
// tensor's decoded bytes, so they do not depend on the encoding and equal a checksum of the source tensor.
const (
	magic        = "LSSHARD\x00"
	version      = 1
	prefixSize   = 64
	trailerSize  = 24
	dataAlign    = 64
	pageSize     = 4096
	shuffleBlock = 64 << 10 // shuffle-zstd shuffles bytes within blocks of this size
	frameSize    = 4 << 20  // decoded bytes per frame (a multiple of shuffleBlock and of planeBlock's bytes)
	// maxFrameRatio bounds a frame's expansion: at best a zstd 4-byte RLE block stands for 128 KiB, a
	// planes 5-byte RLE plane for 64 KiB.
	maxFrameRatio = 32 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encoding is how a tensor's bytes are stored in a shard.
type Encoding string

// The encodings. Zstd compresses the bytes as they are; ShuffleZstd first groups byte k of every element
// together (2 planes for 16-bit types, 4 for float32) within each 64 KiB block, then compresses: the exponent
// bytes of weights are far more regular than the mantissa bytes, so this compresses better. Planes splits
// the bytes into the same planes and Huffman-codes each plane that shrinks (planes.go): smaller than either
// on bf16 weights and decoded several times faster, fast enough to keep up with the disk.
const (
	Raw         Encoding = "raw"
	Zstd        Encoding = "zstd"
	ShuffleZstd Encoding = "shuffle-zstd"
	Planes      Encoding = "planes"
)

// ParseEncoding validates an encoding name.
func ParseEncoding(s string) (Encoding, error) {
	switch e := Encoding(s); e {
	case Raw, Zstd, ShuffleZstd, Planes:
		return e, nil
	}
	return "", fmt.Errorf("unknown encoding %q (known: raw, zstd, shuffle-zstd, planes)", s)
}

// shardHeader is the JSON header of a shard file.
type shardHeader struct {
	Unit string `json:"unit"`
	// Encoding is the encoding asked for at split time; a tensor that did not compress is stored raw.
	Encoding Encoding     `json:"encoding"`
	FileSize int64        `json:"file_size"`
	Tensors  []TensorInfo `json:"tensors"`
	// Quantizer names the encoder (Source.Quantizer) of the unit's tensors that the split quantized; empty when
	// it quantized none. A resumed split compares it with the encoder it asks for, the manifest being gone.
	Quantizer string `json:"quantizer,omitempty"`
}

// TensorInfo describes one tensor of a shard, as its header and the manifest record it.
type TensorInfo struct {
	Name  string           `json:"name"`
	DType checkpoint.DType `json:"dtype"`
	Shape []int64          `json:"shape"`
	// Offset is the absolute file offset of the stored bytes, EncodedLength their count; Length is the
	// decoded byte count (product(Shape) × dtype size).
	Offset        int64    `json:"offset"`
	Length        int64    `json:"length"`
	Encoding      Encoding `json:"encoding"`
	EncodedLength int64    `json:"encoded_length"`
	// Frames are the stored lengths of an encoded tensor's frames (zstd frames, or planes's), one per
	// frameSize bytes of decoded data (the last may be shorter), so frames decode in parallel. Empty for raw
	// tensors.
	Frames []int64 `json:"frames,omitempty"`
	CRC32C uint32  `json:"crc32c"`
	// expert is 1 + the routed expert of a mixture-of-experts layer the tensor belongs to, 0 for a tensor of no
	// expert (Expert). It is the manifest's (the split knows it from the model's plan), not the shard header's.
	expert int
}

// NoExpert is TensorInfo.Expert of a tensor that belongs to no routed expert.
const NoExpert = -1

// Expert is the routed expert whose weights the tensor is (its gate, up and down projections and their biases,
// laid out together in the layer's shard so that one expert is one read: Set.LoadPart), or NoExpert.
func (t TensorInfo) Expert() int { return t.expert - 1 }

// WithExpert returns t recorded as a tensor of expert e (NoExpert: of none).
func (t TensorInfo) WithExpert(e int) TensorInfo {
	t.expert = e + 1
	return t
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// encodeTail returns the header and trailer to write after the data, which ends at dataEnd: zero padding,
// header JSON and trailer, sized so that the file ends on a page boundary. It fills h.FileSize.
func encodeTail(h *shardHeader, dataEnd int64) ([]byte, error) {
	// FileSize is part of the JSON, so its width can change the size: iterate until stable (at most twice).
	h.FileSize = 0
	for {
		js, err := json.Marshal(h)
		if err != nil {
			return nil, err
		}
		size := alignUp(dataEnd+int64(len(js))+trailerSize, pageSize)
		if size == h.FileSize {
			tail := make([]byte, size-dataEnd)
			hdrStart := len(tail) - trailerSize - len(js)
			copy(tail[hdrStart:], js)
			tr := tail[len(tail)-trailerSize:]
			binary.LittleEndian.PutUint32(tr[0:], uint32(len(js)))
			binary.LittleEndian.PutUint32(tr[4:], crc32c(js))
			binary.LittleEndian.PutUint32(tr[8:], version)
			copy(tr[16:], magic)
			return tail, nil
		}
		h.FileSize = size
	}
}

// prefix returns the first 64 bytes of a shard file.
func prefix() []byte {
	p := make([]byte, prefixSize)
	copy(p, magic)
	binary.LittleEndian.PutUint32(p[8:], version)
	return p
}

// parseShard parses and validates the header of a whole shard file held in b. name is used in errors.
// It checks everything that can be checked without decoding: magic, version, header checksum, that each tensor
// has a known dtype and encoding, a shape matching its length, an aligned byte range inside the data section,
// and no overlap. Tensors come back in file order.
func parseShard(b []byte, name string) (*shardHeader, error) {
	size := int64(len(b))
	if size < prefixSize+trailerSize {
		return nil, fmt.Errorf("shard %s: file is %d bytes, too short for a shard (truncated?)", name, size)
	}
	if !bytes.Equal(b[:8], []byte(magic)) {
		return nil, fmt.Errorf("shard %s: bad magic %q: not a layerstream shard", name, b[:8])
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != version {
		return nil, fmt.Errorf("shard %s: format version %d, this build reads version %d", name, v, version)
	}
	tr := b[size-trailerSize:]
	if !bytes.Equal(tr[16:], []byte(magic)) {
		return nil, fmt.Errorf("shard %s: bad trailer magic %q (truncated or overwritten?)", name, tr[16:])
	}
	if v := binary.LittleEndian.Uint32(tr[8:]); v != version {
		return nil, fmt.Errorf("shard %s: trailer format version %d, this build reads version %d", name, v, version)
	}
	hlen := int64(binary.LittleEndian.Uint32(tr[0:]))
	hdrStart := size - trailerSize - hlen
	if hdrStart < prefixSize {
		return nil, fmt.Errorf("shard %s: header length %d does not fit the %d-byte file", name, hlen, size)
	}
	js := b[hdrStart : size-trailerSize]
	if got, want := crc32c(js), binary.LittleEndian.Uint32(tr[4:]); got != want {
		return nil, fmt.Errorf("shard %s: header checksum mismatch (CRC-32C %08x, trailer says %08x): corrupted file", name, got, want)
	}
	var h shardHeader
	if err := json.Unmarshal(js, &h); err != nil {
		return nil, fmt.Errorf("shard %s: malformed header JSON: %w", name, err)
	}
	if h.FileSize != size {
		return nil, fmt.Errorf("shard %s: header says the file is %d bytes, it is %d", name, h.FileSize, size)
	}
	if h.Unit == "" {
		return nil, fmt.Errorf("shard %s: header names no unit", name)
	}
	if _, err := ParseEncoding(string(h.Encoding)); err != nil {
		return nil, fmt.Errorf("shard %s: %w", name, err)
	}
	if len(h.Tensors) == 0 {
		return nil, fmt.Errorf("shard %s: header lists no tensors", name)
	}
	seen := map[string]bool{}
	end := int64(prefixSize)
	for i := range h.Tensors {
		t := &h.Tensors[i]
		if err := validateTensor(t, hdrStart); err != nil {
			return nil, fmt.Errorf("shard %s: tensor %q: %w", name, t.Name, err)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("shard %s: tensor %q listed twice", name, t.Name)
		}
		seen[t.Name] = true
		if t.Offset < end {
			return nil, fmt.Errorf("shard %s: tensor %q at offset %d overlaps the previous tensor or the prefix (ends at %d)", name, t.Name, t.Offset, end)
		}
		end = t.Offset + t.EncodedLength
	}
	return &h, nil
}

// validateTensor checks one header entry against a data section ending at dataEnd.
func validateTensor(t *TensorInfo, dataEnd int64) error {
	if t.Name == "" {
		return fmt.Errorf("empty tensor name")
	}
	if _, err := checkpoint.ParseDType(string(t.DType)); err != nil {
		return err
	}
	if _, err := ParseEncoding(string(t.Encoding)); err != nil {
		return err
	}
	want, err := t.DType.TensorBytes(t.Shape)
	if err != nil {
		return err
	}
	if t.Length != want {
		return fmt.Errorf("shape %v of %s needs %d bytes, header says %d", t.Shape, t.DType, want, t.Length)
	}
	switch {
	case t.Encoding == Raw && t.EncodedLength != t.Length:
		return fmt.Errorf("raw tensor of %d bytes has encoded length %d", t.Length, t.EncodedLength)
	case t.Encoding != Raw && (t.EncodedLength <= 0 || t.EncodedLength >= t.Length):
		return fmt.Errorf("%s tensor of %d bytes has encoded length %d (must be positive and smaller)", t.Encoding, t.Length, t.EncodedLength)
	case t.Encoding == Raw && len(t.Frames) != 0:
		return fmt.Errorf("raw tensor has %d frames", len(t.Frames))
	case t.Encoding != Raw:
		if err := validateFrames(t); err != nil {
			return err
		}
	}
	if t.Offset%dataAlign != 0 || t.Offset < prefixSize || t.Offset > dataEnd || t.EncodedLength > dataEnd-t.Offset {
		return fmt.Errorf("byte range [%d, +%d) is misaligned or outside the data section [%d, %d)", t.Offset, t.EncodedLength, prefixSize, dataEnd)
	}
	return nil
}

// validateFrames checks an encoded tensor's frame list: one frame per frameSize decoded bytes, summing to the
// encoded length, none claiming more than the maximum expansion (checked before a decode area of Length bytes
// is allocated).
func validateFrames(t *TensorInfo) error {
	if want := (t.Length + frameSize - 1) / frameSize; int64(len(t.Frames)) != want {
		return fmt.Errorf("%s tensor of %d bytes has %d frames, want %d", t.Encoding, t.Length, len(t.Frames), want)
	}
	var sum int64
	for i, n := range t.Frames {
		raw := min(frameSize, t.Length-int64(i)*frameSize)
		if n <= 0 || n > t.EncodedLength || raw/maxFrameRatio > n {
			return fmt.Errorf("%s tensor: frame %d of %d decoded bytes has an impossible stored length %d", t.Encoding, i, raw, n)
		}
		sum += n
	}
	if sum != t.EncodedLength {
		return fmt.Errorf("%s tensor: frames sum to %d bytes, encoded length is %d", t.Encoding, sum, t.EncodedLength)
	}
	return nil
}

// decodeSize is the size of the decode area a shard needs: every encoded tensor decoded at a 64-byte-aligned
// position. Raw tensors are used where they lie in the file and need none.
func decodeSize(ts []TensorInfo) int64 {
	var n int64
	for _, t := range ts {
		if t.Encoding != Raw {
			n = alignUp(n, dataAlign) + t.Length
		}
	}
	return alignUp(n, dataAlign)
}

// sameTensors reports whether two tensor lists describe the same tensors stored the same way.
func sameTensors(a, b []TensorInfo) bool {
	return slices.EqualFunc(a, b, func(x, y TensorInfo) bool {
		return x.Name == y.Name && x.DType == y.DType && slices.Equal(x.Shape, y.Shape) && x.Offset == y.Offset &&
			x.Length == y.Length && x.Encoding == y.Encoding && x.EncodedLength == y.EncodedLength &&
			slices.Equal(x.Frames, y.Frames) && x.CRC32C == y.CRC32C
	})
}

// crc32cCombine returns the CRC-32C of A‖B given crcA, crcB and len(B), so that pieces of a tensor can be
// checksummed in parallel. It applies the operator "append len(B) zero bytes" to crcA by repeated squaring of
// a GF(2) matrix (zlib's crc32_combine).
func crc32cCombine(crcA, crcB uint32, lenB int64) uint32 {
	if lenB <= 0 {
		return crcA
	}
	var even, odd [32]uint32
	odd[0] = 0x82f63b78 // the reflected Castagnoli polynomial: the operator for one zero bit
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd) // two zero bits
	gf2Square(&odd, &even) // four zero bits
	for {
		gf2Square(&even, &odd) // first round: one zero byte
		if lenB&1 != 0 {
			crcA = gf2Times(&even, crcA)
		}
		lenB >>= 1
		if lenB == 0 {
			break
		}
		gf2Square(&odd, &even)
		if lenB&1 != 0 {
			crcA = gf2Times(&odd, crcA)
		}
		lenB >>= 1
		if lenB == 0 {
			break
		}
	}
	return crcA ^ crcB
}

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := range 32 {
		square[n] = gf2Times(mat, mat[n])
	}
}
