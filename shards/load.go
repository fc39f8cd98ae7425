package shards

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/layerstream/layerstream/internal/sections"
)

// Read sizes of Load's sequential pass, and the piece size of raw tensors' checksums. From the page cache a
// read is a memory copy by the kernel, and a checksum of bytes still in the core's cache costs less than one
// from memory (CRC-32C with hash/crc32's SSE 4.2 code: ~17 GB/s from L2, ~5-7 GB/s from memory, the copy
// ~6 GB/s; with AVX-512 carry-less multiplication, crc_amd64.s, ~19 GB/s from memory), so page-cache reads go
// in small chunks, each checksummed right away unless a worker is free for it. With O_DIRECT the disk is
// the bottleneck and the reading goroutine waits for it: large reads keep the disk busy, and workers checksum
// what came in. Measured with bench ShardReadRatio on the 2-core VM; see bench/shardread_test.go.
const (
	readChunk   = 256 << 10
	directChunk = 16 << 20 // a multiple of pageSize, as O_DIRECT needs
	crcSegment  = 256 << 10
)

// Load reads unit's shard into buf and returns its tensors, aliasing buf, once every tensor is verified.
//
// The file is read front to back, in chunks, into its place in buf: one sequential pass, no copies. As the
// chunks come in, the pieces of tensors already read are checksummed, by the reading goroutine while they are
// in its cache or by other goroutines, and encoded tensors' frames are decoded into buf's decode
// area: the manifest says where each tensor lies, so none of this waits for the file's own table, which comes
// last. Once the file is read its table must match the manifest, and the reading goroutine joins the checks
// still running. Load returns tensors only when every checksum matched (under VerifyOnce, see SetVerify, a
// file verified earlier in this process and unchanged since is not checksummed again).
//
// buf is grown if it is smaller than the unit's BufferSize. Load is safe for concurrent use with distinct
// Buffers.
func (s *Set) Load(ctx context.Context, unit string, buf *Buffer) (*Loaded, error) {
	return s.load(ctx, unit, buf, false)
}

// load is Load; force checks the checksums whatever the policy.
func (s *Set) load(ctx context.Context, unit string, buf *Buffer, force bool) (*Loaded, error) {
	u, path, err := s.request(ctx, "Load", unit, buf)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	r, st, err := s.openChecked(u, path)
	if err != nil {
		return nil, err
	}
	defer r.close()
	verify := force || VerifyPolicy(s.policy.Load()) != VerifyOnce || !s.verifiedAs(u.Name, st)

	buf.release()
	buf.ensure(u.BufferSize())
	return s.check(ctx, u, path, st, start, buf.b[:u.FileSize], buf.b[u.FileSize:u.BufferSize()], verify, tracedReads(ctx, r, r.readAt))
}

// check fills file (the unit's whole shard file, as stat describes it) with reads, while checking its tensors
// (when verify) and decoding the encoded ones into area; then checks the file's table against the manifest and
// returns the tensors, aliasing file and area. A successful check with verify marks the file verified (VerifyOnce), a failed one
// forgets it.
func (s *Set) check(ctx context.Context, u UnitInfo, path string, stat os.FileInfo, start time.Time, file, area []byte, verify bool, reads fileReads) (*Loaded, error) {
	c, err := newCheck(path, file, u.Tensors, area, verify, s.decoder)
	if err != nil {
		return nil, err
	}
	readEnd, err := c.runWhileReading(ctx, file, reads, func() error {
		// The checks were planned from the manifest: the file's own table must say the same.
		h, err := parseShard(file, path)
		if err != nil {
			return fmt.Errorf("%w; %s", err, splitAgain)
		}
		if h.Unit != u.Name || !sameTensors(h.Tensors, u.Tensors) {
			return fmt.Errorf("shard %s: header does not match %s (file replaced after the split?); %s", path, ManifestFile, splitAgain)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	l := &Loaded{Unit: u, ReadBytes: u.FileSize, ReadTime: readEnd.Sub(start), Verified: verify}
	if l.Tensors, err = c.result(); err != nil {
		if verify {
			s.markVerified(u.Name, nil)
		}
		return nil, err
	}
	if verify {
		s.markVerified(u.Name, stat)
	}
	l.DecodeTime = time.Since(readEnd)
	return l, nil
}

// request checks the arguments of a Load or Map (op) and returns the unit and its shard file's path.
func (s *Set) request(ctx context.Context, op, unit string, buf *Buffer) (UnitInfo, string, error) {
	u, ok := s.Unit(unit)
	if !ok {
		return u, "", fmt.Errorf("shards %s: no unit %q", s.Dir, unit)
	}
	if buf == nil {
		return u, "", fmt.Errorf("shards %s: %s %s: nil Buffer", s.Dir, op, unit)
	}
	return u, filepath.Join(s.Dir, u.File), ctx.Err()
}

// openChecked opens unit u's shard file at path for reading (openShard) and returns it with its status, its size
// checked against the manifest (statShard); the caller closes the reader.
func (s *Set) openChecked(u UnitInfo, path string) (*shardReader, os.FileInfo, error) {
	r, err := s.openShard(u.Name, path)
	if err != nil {
		return nil, nil, openError(path, u, err)
	}
	st, err := statShard(r.f, path, u)
	if err != nil {
		r.close()
		return nil, nil, err
	}
	return r, st, nil
}

// statShard returns the opened shard file f's status, checking its size against the manifest.
func statShard(f *os.File, path string, u UnitInfo) (os.FileInfo, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", path, err)
	}
	if st.Size() != u.FileSize {
		return nil, fmt.Errorf("shard %s: %w", path, sizeError(st.Size(), u.FileSize))
	}
	return st, nil
}

// splitAgain ends the error of a shard file that is not the one its split wrote (missing, truncated, replaced or
// corrupted): what fixes it, and the TROUBLESHOOTING.md section that explains it.
var splitAgain = fmt.Sprintf("run layerstream split again (see TROUBLESHOOTING.md %q)", sections.Corrupt)

// sizeError says that a shard file is got bytes long where the manifest says want.
func sizeError(got, want int64) error {
	return fmt.Errorf("file is %d bytes, %s says %d (truncated or replaced?); %s", got, ManifestFile, want, splitAgain)
}

// openError is the error of opening unit u's shard file at path: a missing file says so.
func openError(path string, u UnitInfo, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("shard %s of unit %s is missing (a split that did not finish, or files moved); %s", path, u.Name, splitAgain)
	}
	return fmt.Errorf("shard %s: %w", path, err)
}

// Pin checks that every unit's shard file is there at the size the manifest gives, so that a damaged folder is
// refused when it is opened rather than when generation reaches the unit, and keeps each file open until Close:
// the set then reads the files it was opened with, even when another process updates the split (a checkpoint
// that changed is re-split by renaming new files over the old ones, which a process reading by name would meet
// mid-run as files that no longer match its manifest). A file changed in place is still noticed (its times
// change) and checked again. Loads check each file again as they read it.
func (s *Set) Pin() error {
	files := make(map[string]*os.File, len(s.units))
	for _, u := range s.units {
		path := filepath.Join(s.Dir, u.File)
		f, err := os.Open(path)
		if err == nil {
			_, err = statShard(f, path, u)
			if err != nil {
				f.Close()
			}
		} else {
			err = openError(path, u, err)
		}
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return err
		}
		files[u.Name] = f
	}
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	s.closePinned()
	s.pinned = files
	return nil
}

// pinnedFile returns unit's shard file as Pin opened it, or nil.
func (s *Set) pinnedFile(unit string) *os.File {
	s.pinMu.Lock()
	defer s.pinMu.Unlock()
	return s.pinned[unit]
}

// closePinned closes the files Pin opened; the caller holds pinMu.
func (s *Set) closePinned() error {
	var errs []error
	for _, f := range s.pinned {
		errs = append(errs, f.Close())
	}
	s.pinned = nil
	return errors.Join(errs...)
}

// testHookOpenDirect opens files for O_DIRECT reads; tests replace it to simulate a filesystem that refuses.
var testHookOpenDirect = openDirect

// shardReader reads one shard file, with O_DIRECT when the set asks for it and the filesystem allows it.
type shardReader struct {
	s      *Set
	path   string
	pinned *os.File // the unit's file as Pin opened it, or nil
	f      *os.File // pinned, or a descriptor of the reader's own
	direct bool
}

// openShard opens unit's shard file (the one Pin opened, else path) for reading, with O_DIRECT when the set
// asks for it; where the filesystem refuses it the set falls back to page-cache reads for good.
func (s *Set) openShard(unit, path string) (*shardReader, error) {
	r := &shardReader{s: s, path: path, pinned: s.pinnedFile(unit)}
	if s.direct.Load() {
		f, err := testHookOpenDirect(r.name())
		if err == nil {
			r.f, r.direct = f, true
			return r, nil
		}
		if !errors.Is(err, errNoDirectIO) && !errors.Is(err, syscall.EINVAL) {
			return nil, err
		}
		s.refuseDirect(err)
	}
	return r, r.openPlain()
}

// name is the name to open the reader's file by: the pinned descriptor's own (reopenName), else its path.
func (r *shardReader) name() string {
	if r.pinned != nil {
		return reopenName(r.pinned)
	}
	return r.path
}

// openPlain sets r.f to the pinned file, or opens the path without O_DIRECT.
func (r *shardReader) openPlain() error {
	if r.pinned != nil {
		r.f = r.pinned
		return nil
	}
	f, err := os.Open(r.path)
	if err != nil {
		return err
	}
	r.f = f
	return nil
}

// refuseDirect turns O_DIRECT off after the filesystem refused it, with one warning.
func (s *Set) refuseDirect(err error) {
	s.warnOnce.Do(func() {
		slog.Warn("O_DIRECT refused by the filesystem; reading shards through the page cache", "dir", s.Dir, "err", err)
	})
	s.direct.Store(false)
}

func (r *shardReader) chunk() int {
	if r.direct {
		return directChunk
	}
	return readChunk
}

// readAt fills b from offset off. Some filesystems accept an O_DIRECT open and refuse the read: then the file
// is reopened without it and the read retried.
func (r *shardReader) readAt(b []byte, off int64) error {
	_, err := r.f.ReadAt(b, off)
	if err != nil && r.direct && errors.Is(err, syscall.EINVAL) {
		r.s.refuseDirect(err)
		r.f.Close()
		r.direct = false
		if oerr := r.openPlain(); oerr != nil {
			r.f = nil
			return fmt.Errorf("shard %s: %w", r.path, oerr)
		}
		_, err = r.f.ReadAt(b, off)
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // the file shrank after its size was checked
	}
	if err != nil {
		return fmt.Errorf("shard %s: reading %d bytes at %d: %w", r.path, len(b), off, err)
	}
	return nil
}

func (r *shardReader) close() {
	if r.f != nil && r.f != r.pinned {
		r.f.Close()
	}
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
		return nil, sizeError(st.Size(), want)
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

// shiftMatrix returns the GF(2) matrix that appends n zero bytes to a CRC-32C: combining a piece of n bytes is
// then one matrix-vector product. Column j is the shifted CRC with only bit j set.
func shiftMatrix(n int) (m [32]uint32) {
	for j := range m {
		m[j] = crc32cCombine(1<<j, 0, int64(n))
	}
	return m
}

// The shift matrices for full pieces: raw tensors' segments and encoded tensors' frames.
var (
	segmentShift = sync.OnceValue(func() [32]uint32 { return shiftMatrix(crcSegment) })
	frameShift   = sync.OnceValue(func() [32]uint32 { return shiftMatrix(frameSize) })
)

// A piece is one job of a check: a crcSegment-sized piece of a raw tensor to checksum, or one frame of an
// encoded tensor to decompress and then checksum. Pieces are in file order.
type piece struct {
	tensor, frame int
	end           int64  // file offset just past the stored bytes: the piece can run once the file is read this far
	stored        []byte // the stored bytes, in the file
	decoded       []byte // encoded tensors: where the frame decodes to; nil for raw pieces
}

// check verifies and decodes the tensors of one shard, piece by piece.
type check struct {
	name    string // the shard, for errors
	tensors []TensorInfo
	data    [][]byte // each tensor's decoded bytes: in the file (raw) or in the decode area (encoded)
	pieces  []piece
	crcs    []uint32 // per piece
	errs    []error  // per piece
	verify  bool     // compute and compare checksums (else only decode)
	dec     func() (*zstd.Decoder, error)
	stop    atomic.Bool // set when the load failed: pieces not started are skipped
}

// newCheck plans the checks of the tensors (validated, in file order) of a shard held in file. Raw tensors
// alias file; encoded ones decode into area at 64-byte-aligned positions. Without verify, raw tensors need no
// work and encoded ones are only decompressed.
func newCheck(name string, file []byte, tensors []TensorInfo, area []byte, verify bool, dec func() (*zstd.Decoder, error)) (*check, error) {
	if need := decodeSize(tensors); need > int64(len(area)) {
		return nil, fmt.Errorf("shard %s: decode area is %d bytes, the shard needs %d", name, len(area), need)
	}
	c := &check{name: name, tensors: tensors, data: make([][]byte, len(tensors)), verify: verify, dec: dec}
	var pos int64
	for i, t := range tensors {
		if t.Encoding == Raw {
			d := file[t.Offset : t.Offset+t.Length : t.Offset+t.Length]
			c.data[i] = d
			for off := int64(0); verify && off < t.Length; off += int64(crcSegment) {
				hi := min(off+int64(crcSegment), t.Length)
				c.pieces = append(c.pieces, piece{tensor: i, end: t.Offset + hi, stored: d[off:hi:hi]})
			}
			continue
		}
		pos = alignUp(pos, dataAlign)
		d := area[pos : pos+t.Length : pos+t.Length]
		c.data[i] = d
		pos += t.Length
		off := t.Offset
		for f, n := range t.Frames {
			lo := int64(f) * frameSize
			hi := min(lo+frameSize, t.Length)
			c.pieces = append(c.pieces, piece{tensor: i, frame: f, end: off + n, stored: file[off : off+n : off+n], decoded: d[lo:hi:hi]})
			off += n
		}
	}
	c.crcs = make([]uint32, len(c.pieces))
	c.errs = make([]error, len(c.pieces))
	return c, nil
}

// run does piece k.
func (c *check) run(k int) {
	if c.stop.Load() {
		return
	}
	p := &c.pieces[k]
	b := p.stored
	if p.decoded != nil {
		if err := decodeFrame(p.stored, p.decoded, c.tensors[p.tensor], c.dec); err != nil {
			c.errs[k] = fmt.Errorf("frame %d: %w", p.frame, err)
			return
		}
		b = p.decoded
	}
	if c.verify {
		c.crcs[k] = crc32c(b)
	}
}

// runGuarded is run for a worker goroutine: a memory fault reading the piece (a mapped shard file truncated
// under it) becomes the piece's error instead of a crash, and stops the pieces not yet started.
func (c *check) runGuarded(k int) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			f := asFault(c.name, r)
			if f == nil {
				panic(r)
			}
			c.errs[k] = f
			c.stop.Store(true)
		}
	}()
	c.run(k)
}

// runWhileReading fills file front to back with reads.read, reads.chunk bytes at a time (in one read where no
// piece overlaps the reading, unless reads.pieces), on the calling goroutine, while
// workers run the pieces whose bytes are in: GOMAXPROCS-1 of them (at least one) with inline, where the reading
// goroutine copies from the page cache and keeps a core of its own, else GOMAXPROCS, as the reading goroutine
// waits for the disk (O_DIRECT) and a core would sit idle while encoded frames wait. With inline, the reading goroutine checksums a raw piece itself, while it is still in its
// core's cache, whenever the workers have not yet taken the pieces handed to them: so on a busy machine the
// checks cost little more CPU than the read, and with a core to spare they run beside it. Once the file is
// read, afterRead runs (a failure stops the remaining pieces), then the calling goroutine joins the workers
// until every piece ran. It returns when the read ended.
func (c *check) runWhileReading(ctx context.Context, file []byte, reads fileReads, afterRead func() error) (time.Time, error) {
	chunk, inline, read := reads.chunk, reads.inline, reads.read
	jobs := make(chan int, len(c.pieces)) // never blocks the reader
	work := func() {
		for k := range jobs {
			if ctx.Err() == nil {
				c.runGuarded(k)
			}
		}
	}
	var wg sync.WaitGroup
	if len(c.pieces) == 0 && !reads.pieces {
		chunk = len(file) // nothing to overlap: one read
	}
	workers := runtime.GOMAXPROCS(0)
	if inline {
		workers-- // page-cache reads keep the reading goroutine busy copying
	}
	for range min(max(1, workers), len(c.pieces)) {
		wg.Go(work)
	}
	next := 0
	var err error
	for off := 0; off < len(file); off += chunk {
		if err = ctx.Err(); err != nil {
			break
		}
		n := min(chunk, len(file)-off)
		if err = read(file[off:off+n], int64(off)); err != nil {
			break
		}
		for next < len(c.pieces) && c.pieces[next].end <= int64(off+n) {
			if inline && c.pieces[next].decoded == nil && len(jobs) > 0 {
				c.run(next)
			} else {
				jobs <- next
			}
			next++
		}
	}
	readEnd := time.Now()
	if reads.readDone != nil {
		reads.readDone()
	}
	if err == nil {
		err = afterRead()
	}
	if err != nil {
		c.stop.Store(true)
	}
	for ; next < len(c.pieces) && err == nil; next++ {
		jobs <- next
	}
	close(jobs)
	work()
	wg.Wait()
	if err == nil {
		err = ctx.Err()
	}
	return readEnd, err
}

// result combines the pieces' checksums per tensor, compares them with the tensors' CRC-32C and returns the
// tensors, or the first failure naming the shard and the tensor.
func (c *check) result() (map[string]Tensor, error) {
	sums := make([]uint32, len(c.tensors))
	errs := make([]error, len(c.tensors))
	segShift, frShift := segmentShift(), frameShift()
	for k, p := range c.pieces {
		if c.errs[k] != nil && errs[p.tensor] == nil {
			errs[p.tensor] = c.errs[k]
		}
		n := len(p.stored)
		if p.decoded != nil {
			n = len(p.decoded)
		}
		switch {
		case p.decoded == nil && n == crcSegment:
			sums[p.tensor] = gf2Times(&segShift, sums[p.tensor]) ^ c.crcs[k]
		case p.decoded != nil && n == frameSize:
			sums[p.tensor] = gf2Times(&frShift, sums[p.tensor]) ^ c.crcs[k]
		default:
			sums[p.tensor] = crc32cCombine(sums[p.tensor], c.crcs[k], int64(n))
		}
	}
	m := make(map[string]Tensor, len(c.tensors))
	for i, t := range c.tensors {
		err := errs[i]
		if err == nil && c.verify && sums[i] != t.CRC32C {
			err = fmt.Errorf("checksum mismatch (CRC-32C %08x, header says %08x): the file is corrupted", sums[i], t.CRC32C)
		}
		if err != nil {
			return nil, fmt.Errorf("shard %s: tensor %q: %w; %s", c.name, t.Name, err, splitAgain)
		}
		m[t.Name] = Tensor{Name: t.Name, DType: t.DType, Shape: t.Shape, Data: c.data[i]}
	}
	return m, nil
}

// decodeTensors verifies and decodes the tensors of a parsed shard held whole in file, on all cores. Raw
// tensors alias file; encoded ones are decompressed into area.
func decodeTensors(ctx context.Context, name string, file []byte, h *shardHeader, area []byte, dec func() (*zstd.Decoder, error)) (map[string]Tensor, error) {
	c, err := newCheck(name, file, h.Tensors, area, true, dec)
	if err != nil {
		return nil, err
	}
	parallel(ctx, len(c.pieces), c.run)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.result()
}

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

// decodeFrame decodes one frame of encoded tensor t into dst (exactly the frame's decoded size).
func decodeFrame(stored, dst []byte, t TensorInfo, dec func() (*zstd.Decoder, error)) error {
	if t.Encoding == Planes {
		if err := decodePlanes(stored, dst, planesWidth(t.DType)); err != nil {
			return fmt.Errorf("%s: %w (corrupted file?)", t.Encoding, err)
		}
		return nil
	}
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
		unshuffleInPlace(dst, *tmp, shuffleWidth(t.DType))
		blockPool.Put(tmp)
	}
	return nil
}
