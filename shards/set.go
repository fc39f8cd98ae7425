// Package shards splits a checkpoint into one shard file per unit (embed, layer.N, norm, lm_head) plus a Parquet
// manifest, and loads a unit with one sequential read into a reused, page-aligned buffer, verifying every
// tensor's CRC-32C before handing the tensors out. See format.go for the shard file layout.
package shards

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/layerstream/layerstream/checkpoint"
)

// Set is an opened shard folder.
type Set struct {
	Dir        string
	Config     *checkpoint.Config
	Generation *checkpoint.GenerationConfig

	units  []UnitInfo
	byName map[string]int

	direct   atomic.Bool
	warnOnce sync.Once

	decOnce sync.Once
	dec     *zstd.Decoder
	decErr  error
}

// UnitInfo describes one unit's shard file.
type UnitInfo struct {
	Name  string // "embed", "layer.N", "norm" or "lm_head"
	Layer int    // N for layer.N, -1 for the other units
	File  string // shard file name inside the set's folder
	// FileSize is the shard file's size (a multiple of 4096); DecodeSize the decode area that its encoded
	// tensors need (0 when all are raw). Load needs a Buffer of BufferSize() = FileSize + DecodeSize bytes.
	FileSize, DecodeSize int64
	Tensors              []TensorInfo // in file order
}

// BufferSize is the Buffer capacity Load needs for this unit.
func (u UnitInfo) BufferSize() int64 { return u.FileSize + u.DecodeSize }

// Bytes is the total decoded size of the unit's tensors.
func (u UnitInfo) Bytes() int64 {
	var n int64
	for _, t := range u.Tensors {
		n += t.Length
	}
	return n
}

// Tensor is one loaded tensor. Data aliases the Buffer passed to Load: it is valid until the Buffer is reused.
// Data starts at a 64-byte-aligned address.
type Tensor struct {
	Name  string
	DType checkpoint.DType
	Shape []int64
	Data  []byte
}

// Loaded is the result of Load.
type Loaded struct {
	Unit    UnitInfo
	Tensors map[string]Tensor
	// ReadBytes is the number of bytes read from disk; ReadTime the time the read took; DecodeTime the time spent
	// after it: parsing the header, verifying checksums and decompressing.
	ReadBytes  int64
	ReadTime   time.Duration
	DecodeTime time.Duration
}

// IsSet reports whether dir holds a complete split (its manifest exists).
func IsSet(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, ManifestFile))
	return err == nil && st.Mode().IsRegular()
}

// Open reads a shard folder: manifest.parquet and the copied config.json and generation_config.json.
func Open(dir string) (*Set, error) {
	units, err := readManifest(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("shards %s: no %s: not a shard folder, or a split that did not finish (run layerstream split again)", dir, ManifestFile)
	}
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	cfg, err := checkpoint.LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	gen, err := checkpoint.LoadGenerationConfig(filepath.Join(dir, "generation_config.json"))
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	s := &Set{Dir: dir, Config: cfg, Generation: gen, units: units, byName: map[string]int{}}
	for i, u := range units {
		s.byName[u.Name] = i
	}
	if err := checkUnits(units, cfg.NumHiddenLayers); err != nil {
		return nil, fmt.Errorf("shards %s: %w", dir, err)
	}
	return s, nil
}

// checkUnits checks that units are embed, layer.0..layer.N-1, norm and optionally lm_head, in that order.
func checkUnits(units []UnitInfo, layers int) error {
	var names []string
	for _, u := range units {
		names = append(names, u.Name)
	}
	want := []string{"embed"}
	for l := range layers {
		want = append(want, fmt.Sprintf("layer.%d", l))
	}
	want = append(want, "norm")
	got := strings.Join(names, ",")
	if w := strings.Join(want, ","); got != w && got != w+",lm_head" {
		return fmt.Errorf("units %s do not match a %d-layer model (want embed, layer.0..layer.%d, norm and optionally lm_head)", got, layers, layers-1)
	}
	return nil
}

// Units lists the units in model order: embed, layer.0 .. layer.N-1, norm, then lm_head when present.
func (s *Set) Units() []UnitInfo { return s.units }

// Unit returns the named unit.
func (s *Set) Unit(name string) (UnitInfo, bool) {
	i, ok := s.byName[name]
	if !ok {
		return UnitInfo{}, false
	}
	return s.units[i], true
}

// MaxBufferSize is the largest BufferSize over the units: a Buffer this big serves every Load.
func (s *Set) MaxBufferSize() int64 {
	var n int64
	for _, u := range s.units {
		n = max(n, u.BufferSize())
	}
	return n
}

// SetDirectIO makes Load read with O_DIRECT, bypassing the page cache (shard files are padded to whole pages and
// Buffers are page-aligned, as O_DIRECT requires). Where the filesystem refuses O_DIRECT (tmpfs, some network
// filesystems) Load logs one warning and reads normally.
func (s *Set) SetDirectIO(on bool) { s.direct.Store(on) }

// Load reads unit's shard into buf with one read of the whole file, verifies the header against the manifest and
// every tensor's checksum, decodes encoded tensors into buf's decode area, and returns tensors aliasing buf.
// buf is grown if it is smaller than the unit's BufferSize. Load is safe for concurrent use with distinct Buffers.
func (s *Set) Load(ctx context.Context, unit string, buf *Buffer) (*Loaded, error) {
	u, ok := s.Unit(unit)
	if !ok {
		return nil, fmt.Errorf("shards %s: no unit %q", s.Dir, unit)
	}
	if buf == nil {
		return nil, fmt.Errorf("shards %s: Load %s: nil Buffer", s.Dir, unit)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	path := filepath.Join(s.Dir, u.File)
	start := time.Now()
	file, err := s.readFile(path, buf, u.FileSize)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	l := &Loaded{Unit: u, ReadBytes: u.FileSize, ReadTime: time.Since(start)}

	start = time.Now()
	h, err := parseShard(file, path)
	if err != nil {
		return nil, err
	}
	if h.Unit != u.Name || !sameTensors(h.Tensors, u.Tensors) {
		return nil, fmt.Errorf("shard %s: header does not match %s (file replaced after the split?); run layerstream split again", path, ManifestFile)
	}
	buf.ensure(u.BufferSize()) // sized by the manifest only now that the shard's own header agrees
	file = buf.b[:u.FileSize]
	l.Tensors, err = decodeTensors(ctx, path, file, h, buf.b[u.FileSize:u.BufferSize()], s.decoder)
	if err != nil {
		return nil, err
	}
	l.DecodeTime = time.Since(start)
	return l, nil
}

// testHookOpenDirect opens files for O_DIRECT reads; tests replace it to simulate a filesystem that refuses.
var testHookOpenDirect = openDirect

// readFile reads the whole file at path, which must be size bytes long, into the start of buf.
func (s *Set) readFile(path string, buf *Buffer, size int64) ([]byte, error) {
	if s.direct.Load() {
		b, err := readWhole(path, buf, size, testHookOpenDirect)
		if !errors.Is(err, errNoDirectIO) && !errors.Is(err, syscall.EINVAL) {
			return b, err
		}
		s.warnOnce.Do(func() {
			slog.Warn("O_DIRECT refused by the filesystem; reading shards through the page cache", "dir", s.Dir, "err", err)
		})
		s.direct.Store(false)
	}
	return readWhole(path, buf, size, os.Open)
}

// readWhole reads the whole file at path into the start of buf, grown if needed, with one ReadAt. The file must
// be want bytes long (want < 0: any size); it is checked before anything is allocated.
func readWhole(path string, buf *Buffer, want int64, open func(string) (*os.File, error)) ([]byte, error) {
	f, err := open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if want >= 0 && st.Size() != want {
		return nil, fmt.Errorf("file is %d bytes, %s says %d (truncated or replaced?); run layerstream split again", st.Size(), ManifestFile, want)
	}
	buf.ensure(st.Size())
	dst := buf.b[:st.Size()]
	if _, err := f.ReadAt(dst, 0); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return dst, nil
}

// decoder returns the set's zstd decoder, created on first use and reused for every tensor.
func (s *Set) decoder() (*zstd.Decoder, error) {
	s.decOnce.Do(func() { s.dec, s.decErr = newDecoder() })
	return s.dec, s.decErr
}

// newDecoder returns a zstd decoder for shard frames. DecodeAll writes only into the caller's slice (cap limit),
// and the window and memory bounds keep a corrupted frame header from making it allocate more than a frame needs.
func newDecoder() (*zstd.Decoder, error) {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)), zstd.WithDecodeAllCapLimit(true),
		zstd.WithDecoderMaxWindow(4*frameSize), zstd.WithDecoderMaxMemory(4*frameSize))
	if err != nil {
		return nil, fmt.Errorf("zstd decoder: %w", err)
	}
	return d, nil
}

// decodeTensors verifies and decodes the tensors of a parsed shard held in file. Raw tensors alias file;
// encoded ones are decompressed into area at 64-byte-aligned positions. Both phases run on all cores:
// decompression one zstd frame per job, then checksums over crcSegment-sized pieces, combined per tensor.
func decodeTensors(ctx context.Context, name string, file []byte, h *shardHeader, area []byte, dec func() (*zstd.Decoder, error)) (map[string]Tensor, error) {
	if need := decodeSize(h.Tensors); need > int64(len(area)) {
		return nil, fmt.Errorf("shard %s: decode area is %d bytes, the shard needs %d", name, len(area), need)
	}
	data := make([][]byte, len(h.Tensors))
	var encoded []int
	var pos int64
	for i, t := range h.Tensors {
		if t.Encoding == Raw {
			data[i] = file[t.Offset : t.Offset+t.Length : t.Offset+t.Length]
			continue
		}
		pos = alignUp(pos, dataAlign)
		data[i] = area[pos : pos+t.Length : pos+t.Length]
		pos += t.Length
		encoded = append(encoded, i)
	}
	// Decompression: every frame of every encoded tensor is a job.
	type frame struct {
		tensor, index   int
		stored, decoded []byte
	}
	var frames []frame
	for _, i := range encoded {
		t := h.Tensors[i]
		off := t.Offset
		for f, n := range t.Frames {
			lo := int64(f) * frameSize
			hi := min(lo+frameSize, t.Length)
			frames = append(frames, frame{i, f, file[off : off+n : off+n], data[i][lo:hi:hi]})
			off += n
		}
	}
	errs := make([]error, len(h.Tensors))
	frameErrs := make([]error, len(frames))
	parallel(ctx, len(frames), func(k int) {
		fr := frames[k]
		frameErrs[k] = decodeFrame(fr.stored, fr.decoded, h.Tensors[fr.tensor], dec)
	})
	for k, err := range frameErrs {
		if err != nil && errs[frames[k].tensor] == nil {
			errs[frames[k].tensor] = fmt.Errorf("zstd frame %d: %w", frames[k].index, err)
		}
	}

	// Checksums: split every tensor into segments, checksum them in parallel, combine per tensor.
	type segment struct{ tensor, off, n int }
	var segs []segment
	for i, d := range data {
		for off := 0; ; off += crcSegment {
			segs = append(segs, segment{i, off, min(crcSegment, len(d)-off)})
			if off+crcSegment >= len(d) {
				break
			}
		}
	}
	crcs := make([]uint32, len(segs))
	parallel(ctx, len(segs), func(k int) {
		s := segs[k]
		if errs[s.tensor] == nil {
			crcs[k] = crc32c(data[s.tensor][s.off : s.off+s.n])
		}
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sums := make([]uint32, len(h.Tensors))
	shift := segmentShift()
	for k, s := range segs {
		if s.n == crcSegment {
			sums[s.tensor] = gf2Times(&shift, sums[s.tensor]) ^ crcs[k]
		} else {
			sums[s.tensor] = crc32cCombine(sums[s.tensor], crcs[k], int64(s.n))
		}
	}
	m := make(map[string]Tensor, len(h.Tensors))
	for i, t := range h.Tensors {
		err := errs[i]
		if err == nil && sums[i] != t.CRC32C {
			err = fmt.Errorf("checksum mismatch (CRC-32C %08x, header says %08x): the file is corrupted; run layerstream split again", sums[i], t.CRC32C)
		}
		if err != nil {
			return nil, fmt.Errorf("shard %s: tensor %q: %w", name, t.Name, err)
		}
		m[t.Name] = Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Data: data[i]}
	}
	return m, nil
}

// crcSegment is the piece size for parallel checksums.
const crcSegment = 4 << 20

// segmentShift is the GF(2) matrix that appends crcSegment zero bytes to a CRC-32C: combining a full segment is
// one matrix-vector product. Column j is the shifted CRC with only bit j set.
var segmentShift = sync.OnceValue(func() (m [32]uint32) {
	for j := range m {
		m[j] = crc32cCombine(1<<j, 0, crcSegment)
	}
	return m
})

// parallel runs f(0..n-1) on up to GOMAXPROCS goroutines, stopping early when ctx is done.
func parallel(ctx context.Context, n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}

// decodeFrame decompresses one zstd frame of encoded tensor t into dst (exactly the frame's decoded size).
func decodeFrame(stored, dst []byte, t TensorInfo, dec func() (*zstd.Decoder, error)) error {
	d, err := dec()
	if err != nil {
		return err
	}
	got, err := d.DecodeAll(stored, dst[:0])
	if err != nil {
		return fmt.Errorf("%s: %w (corrupted file?)", t.Encoding, err)
	}
	if len(got) != len(dst) || (len(got) > 0 && &got[0] != &dst[0]) {
		return fmt.Errorf("%s: decoded %d bytes, want %d (corrupted file?)", t.Encoding, len(got), len(dst))
	}
	if t.Encoding == ShuffleZstd {
		tmp := blockPool.Get().(*[]byte)
		unshuffleInPlace(dst, *tmp, t.DType.Size())
		blockPool.Put(tmp)
	}
	return nil
}
