package shards

import (
	"bytes"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/bytesize"
	"github.com/layerstream/layerstream/internal/grow"
)

// shuffleWidth is the element size shuffle-zstd groups bytes by: the dtype's element size, or 1 (no
// shuffling) for quantized block types, whose bytes mix scales and packed values.
func shuffleWidth(d checkpoint.DType) int { return max(1, d.Size()) }

// shuffle writes src to dst with the bytes of each shuffleBlock-sized block grouped by position within the
// element: byte 0 of every element, then byte 1, and so on. A final partial block is shuffled the same way over
// its whole elements; trailing bytes that do not form an element are copied.
func shuffle(dst, src []byte, elemSize int) {
	for start := 0; start < len(src); start += shuffleBlock {
		blk := src[start:min(start+shuffleBlock, len(src))]
		out := dst[start : start+len(blk)]
		n := len(blk) / elemSize
		for k := range elemSize {
			plane := out[k*n : (k+1)*n]
			for i := range plane {
				plane[i] = blk[i*elemSize+k]
			}
		}
		copy(out[n*elemSize:], blk[n*elemSize:])
	}
}

// unshuffleInPlace undoes shuffle on b, one block at a time, using tmp (at least shuffleBlock bytes) as scratch.
func unshuffleInPlace(b, tmp []byte, elemSize int) {
	planes := make([][]byte, elemSize)
	for start := 0; start < len(b); start += shuffleBlock {
		blk := b[start:min(start+shuffleBlock, len(b))]
		in := tmp[:len(blk)]
		copy(in, blk)
		n := len(blk) / elemSize
		for k := range planes {
			planes[k] = in[k*n : (k+1)*n]
		}
		interleave(blk[:n*elemSize], planes)
	}
}

// blockPool holds shuffleBlock-sized scratch slices for unshuffling; they are reused across loads.
var blockPool = sync.Pool{New: func() any { b := make([]byte, shuffleBlock); return &b }}

// encoder compresses tensors at split time, reusing its buffers across tensors. A tensor becomes one frame per
// frameSize bytes: zstd frames, each compressed by the streaming encoder on all cores, or planes frames.
type encoder struct {
	zs       *zstd.Encoder // zstd and shuffle-zstd only
	shuffled []byte
	out      bytes.Buffer
	planes   planeScratch
	buf      []byte // planes frames
	frames   []int64
	check    []byte // decodeRate's output
}

func newEncoder(e Encoding) (*encoder, error) {
	if e == Planes {
		return &encoder{}, nil
	}
	// Measured on bf16 N(0, 0.02) weights (TinyLlama shape, 2-core VM): without entropy-coding every literal,
	// zstd stores such weights raw (1.0x). With it, plain zstd reaches 1.28x at the fastest level, decoding at
	// ~430 MB/s (higher levels gain nothing); after the byte shuffle the fastest level gives the same 1.28x but
	// the default level 1.34x (decoding at ~200-350 MB/s), so shuffle-zstd uses the default level.
	// No zstd content checksum: every tensor carries a CRC-32C already.
	level := zstd.SpeedFastest
	if e == ShuffleZstd {
		level = zstd.SpeedDefault
	}
	zs, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(level), zstd.WithAllLitEntropyCompression(true),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("zstd encoder: %w", err)
	}
	return &encoder{zs: zs}, nil
}

// encode returns the encoded bytes of raw and their frame lengths (both aliasing the encoder's buffers, valid
// until the next call) and the encoding used: Raw (returning raw itself) when encoding does not make the tensor
// smaller.
//
// With fast, planes codes no plane with Huffman codes (see encodePlanes); the zstd encodings ignore it.
func (c *encoder) encode(raw []byte, e Encoding, elemSize int, fast bool) ([]byte, []int64, Encoding, error) {
	if e == Raw || len(raw) == 0 {
		return raw, nil, Raw, nil
	}
	c.frames = c.frames[:0]
	var stored []byte
	if e == Planes {
		c.buf = c.buf[:0]
		for off := 0; off < len(raw); off += frameSize {
			before := len(c.buf)
			c.buf = encodePlanes(c.buf, raw[off:min(off+frameSize, len(raw))], elemSize, &c.planes, fast)
			c.frames = append(c.frames, int64(len(c.buf)-before))
		}
		stored = c.buf
	} else {
		src := raw
		if e == ShuffleZstd {
			c.shuffled = grow.Slice(c.shuffled, len(raw))
			shuffle(c.shuffled, raw, elemSize)
			src = c.shuffled
		}
		c.out.Reset()
		for off := 0; off < len(src); off += frameSize {
			piece := src[off:min(off+frameSize, len(src))]
			before := c.out.Len()
			c.zs.ResetContentSize(&c.out, int64(len(piece))) // the frame records its decoded size
			if _, err := c.zs.Write(piece); err != nil {
				return nil, nil, "", fmt.Errorf("zstd: %w", err)
			}
			if err := c.zs.Close(); err != nil {
				return nil, nil, "", fmt.Errorf("zstd: %w", err)
			}
			c.frames = append(c.frames, int64(c.out.Len()-before))
		}
		stored = c.out.Bytes()
	}
	if len(stored) >= len(raw) {
		return raw, nil, Raw, nil
	}
	return stored, c.frames, e, nil
}

// decodeRate decodes the encoded tensor t (stored in frames) on the calling goroutine, checks that it gives
// back raw, and returns the decoded bytes per second: a tensor's decoding cost, measured where it is split.
func (c *encoder) decodeRate(t TensorInfo, stored []byte, raw []byte, dec func() (*zstd.Decoder, error)) (float64, error) {
	c.check = grow.Slice(c.check, len(raw))
	elapsed := time.Duration(1<<63 - 1)
	for range 2 { // the faster of two: the first may pay for page faults in c.check
		start := time.Now()
		off := int64(0)
		for f, n := range t.Frames {
			lo := int64(f) * frameSize
			hi := min(lo+frameSize, t.Length)
			if err := decodeFrame(stored[off:off+n], c.check[lo:hi], t, dec); err != nil {
				return 0, fmt.Errorf("decoding what was encoded: frame %d: %w", f, err)
			}
			off += n
		}
		elapsed = min(elapsed, time.Since(start))
	}
	if !bytes.Equal(c.check, raw) {
		return 0, fmt.Errorf("%s: decoding what was encoded does not give the tensor back (a bug: use --encoding raw and report it)", t.Encoding)
	}
	return float64(len(raw)) / max(elapsed.Seconds(), 1e-9), nil
}

// encodeStats counts what a split's encoding did to the tensors it wrote, for one log line at the end.
type encodeStats struct {
	encoded, incompressible, slow byteCount // kept encoded; stored raw as they did not shrink; or as decoding was slower than reading
	decodeSeconds                 float64   // the kept tensors' measured decoding time on one core
}

type byteCount struct{ tensors, raw, stored int64 }

func (b *byteCount) add(raw, stored int64) { b.tensors++; b.raw += raw; b.stored += stored }

// log says what the encoding saved and what it costs, and which tensors it stored raw and why.
func (s *encodeStats) log(e Encoding, diskRate float64) {
	if e == Raw || s.encoded.tensors+s.incompressible.tensors+s.slow.tensors == 0 {
		return
	}
	args := []any{"encoding", e, "encoded_tensors", s.encoded.tensors}
	if s.encoded.tensors > 0 {
		args = append(args, "encoded_bytes", fmt.Sprintf("%s of %s (%.1f%%)", bytesize.Format(s.encoded.stored),
			bytesize.Format(s.encoded.raw), 100*float64(s.encoded.stored)/float64(s.encoded.raw)),
			"decode_rate", bytesize.Format(int64(float64(s.encoded.raw)/max(s.decodeSeconds, 1e-9)))+"/s per core")
	}
	args = append(args, "raw_did_not_shrink", s.incompressible.tensors)
	if s.slow.tensors > 0 {
		args = append(args, "raw_decoding_slower_than_disk", s.slow.tensors, "disk_read_rate", bytesize.Format(int64(diskRate))+"/s",
			"cores", runtime.GOMAXPROCS(0))
	}
	slog.Info("split encoding", args...)
}
