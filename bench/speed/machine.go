package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/layerstream/layerstream/engine/kernels"
	"github.com/layerstream/layerstream/shards"
)

// The machine's bandwidths, measured in the same run as the ratios that divide by them.

// memcpyResult is the memory-copy bandwidth: bytes copied per second (each byte is read once and written once).
type memcpyResult struct {
	BufferBytes int64         `json:"buffer_bytes"` // size of the source (= destination) buffer
	Goroutines  int           `json:"goroutines"`
	Repeats     int           `json:"repeats"`
	Best        time.Duration `json:"best_ns"`
	GBps        float64       `json:"gb_per_s"`
}

// measureMemcpy copies a warm buffer of size bytes into another, split across every core, repeats times, and
// keeps the fastest copy. Both buffers are touched before timing (the first touch of fresh memory is slow).
func measureMemcpy(size int64, repeats int) memcpyResult {
	src := make([]byte, size)
	dst := make([]byte, size)
	for i := range src {
		src[i] = byte(i)
	}
	copy(dst, src)
	n := runtime.GOMAXPROCS(0)
	part := (len(src) + n - 1) / n
	best := time.Duration(1<<63 - 1)
	for range repeats {
		var wg sync.WaitGroup
		start := time.Now()
		for g := range n {
			lo, hi := min(g*part, len(src)), min((g+1)*part, len(src))
			wg.Go(func() { copy(dst[lo:hi], src[lo:hi]) })
		}
		wg.Wait()
		best = min(best, time.Since(start))
	}
	runtime.KeepAlive(dst)
	return memcpyResult{BufferBytes: size, Goroutines: n, Repeats: repeats, Best: best,
		GBps: float64(size) / best.Seconds() / 1e9}
}

// measureMemRead reads a warm buffer of size bytes (far larger than the caches), split across every core with
// kernels.Fold (AVX-512 loads where the CPU has them), repeats times, and keeps the fastest pass: the rate a
// decode step that streams every weight once is bounded by.
func measureMemRead(size int64, repeats int) memcpyResult {
	buf := make([]byte, size)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = byte(i >> 12)
	}
	n := runtime.GOMAXPROCS(0)
	part := (len(buf)/n + 4095) &^ 4095
	best := time.Duration(1<<63 - 1)
	var sink atomic.Uint64
	for range repeats {
		var wg sync.WaitGroup
		start := time.Now()
		for g := range n {
			lo, hi := min(g*part, len(buf)), min((g+1)*part, len(buf))
			wg.Go(func() { sink.Add(kernels.Fold(buf[lo:hi])) })
		}
		wg.Wait()
		best = min(best, time.Since(start))
	}
	return memcpyResult{BufferBytes: size, Goroutines: n, Repeats: repeats, Best: best,
		GBps: float64(size) / best.Seconds() / 1e9}
}

// readResult is the sequential read bandwidth of shard files read with O_DIRECT.
type readResult struct {
	Supported bool          `json:"supported"`
	Reason    string        `json:"reason,omitempty"` // why not, when unsupported
	Files     int           `json:"files"`
	Bytes     int64         `json:"bytes"`    // per pass
	Passes    []readPass    `json:"passes"`   // every pass, in order
	Best      time.Duration `json:"best_ns"`  // fastest pass
	GBps      float64       `json:"gb_per_s"` // Bytes ÷ Best
}

// readPass is one pass over the files: read whole with one ReadAt each (Chunk 0) or in Chunk-byte reads.
type readPass struct {
	Chunk int64         `json:"chunk_bytes"`
	Time  time.Duration `json:"ns"`
}

// directChunk is the chunked passes' read size: the size shards.Set.Load reads O_DIRECT files in.
const directChunk = 16 << 20

// errDirectRefused reports that the filesystem refused O_DIRECT.
var errDirectRefused = errors.New("O_DIRECT refused")

// measureDirectRead reads the units' shard files front to back with O_DIRECT into a reused page-aligned buffer,
// once per entry of chunks: 0 reads each file with one ReadAt, n in n-byte reads. O_DIRECT bypasses the page
// cache, so nothing needs dropping. A filesystem that refuses O_DIRECT (tmpfs, some network filesystems) gives
// Supported false with the reason; other failures are errors.
func measureDirectRead(dir string, units []shards.UnitInfo, chunks []int64) (readResult, error) {
	r := readResult{Files: len(units)}
	var size int64
	for _, u := range units {
		r.Bytes += u.FileSize
		size = max(size, u.FileSize)
	}
	buf := readBuffer(size)
	for _, chunk := range chunks {
		start := time.Now()
		for _, u := range units {
			err := readDirect(filepath.Join(dir, u.File), buf.Bytes()[:u.FileSize], chunk)
			if errors.Is(err, errDirectRefused) {
				return readResult{Reason: err.Error()}, nil
			}
			if err != nil {
				return r, fmt.Errorf("O_DIRECT read of shard %s: %w", u.File, err)
			}
		}
		r.Passes = append(r.Passes, readPass{Chunk: chunk, Time: time.Since(start)})
	}
	r.Supported = true
	r.summarize()
	return r, nil
}

// The buffer of the read passes: one for the whole run, allocated as the engine's (shards.NewBuffer: 2 MiB
// huge pages where the kernel gives them) and touched before the first pass, as the engine's buffers are warm
// after the first token. A fresh buffer per pass would make each pass fault its memory in while it reads.
var (
	readBufMu sync.Mutex
	readBuf   *shards.Buffer
)

func readBuffer(size int64) *shards.Buffer {
	readBufMu.Lock()
	defer readBufMu.Unlock()
	if readBuf == nil || int64(readBuf.Cap()) < size {
		readBuf = shards.NewBuffer(int(size))
		b := readBuf.Bytes()
		for i := 0; i < len(b); i += 4096 {
			b[i] = 0
		}
	}
	return readBuf
}

// summarize sets Best and GBps from the passes.
func (r *readResult) summarize() {
	r.Best = time.Duration(1<<63 - 1)
	for _, p := range r.Passes {
		r.Best = min(r.Best, p.Time)
	}
	r.GBps = float64(r.Bytes) / r.Best.Seconds() / 1e9
}

// describePasses lists the passes' read sizes and rates.
func (r *readResult) describePasses() string {
	var parts []string
	for _, p := range r.Passes {
		how := "whole files"
		if p.Chunk > 0 {
			how = fmt.Sprintf("%d MiB reads", p.Chunk>>20)
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", how, float64(r.Bytes)/p.Time.Seconds()/1e9))
	}
	return strings.Join(parts, ", ")
}

// merge adds the passes of a later measurement of the same files, so the bandwidth is the best of both.
func (r *readResult) merge(later readResult) {
	if !r.Supported || !later.Supported || later.Bytes != r.Bytes {
		return
	}
	r.Passes = append(r.Passes, later.Passes...)
	r.summarize()
}

// readDirect reads the file at path, which must be len(dst) bytes long, into dst (page-aligned, a whole number
// of pages) with O_DIRECT: one ReadAt when chunk is 0, else chunk-byte reads front to back.
func readDirect(path string, dst []byte, chunk int64) error {
	f, err := openDirect(path)
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("%w by the filesystem of %s: %v", errDirectRefused, path, err)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if chunk <= 0 {
		chunk = int64(len(dst))
	}
	for off := int64(0); off < int64(len(dst)); off += chunk {
		end := min(off+chunk, int64(len(dst)))
		n, err := f.ReadAt(dst[off:end], off)
		if errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("%w by the filesystem of %s: %v", errDirectRefused, path, err)
		}
		if err != nil {
			return err
		}
		if n != int(end-off) {
			return fmt.Errorf("read %d bytes at offset %d, want %d", n, off, end-off)
		}
	}
	return nil
}

// matmulResult is the backend's matrix-multiplication rate.
type matmulResult struct {
	Op      string        `json:"op"`
	M, K, N int           `json:"-"`
	Flops   float64       `json:"flops_per_call"` // 2·M·K·N
	Repeats int           `json:"repeats"`
	Best    time.Duration `json:"best_ns"`
	GFlops  float64       `json:"gflop_per_s"`
}

// measureMatmul times the GoMLX simplego backend's float32 DotGeneral of x [m, k] with w [n, k] contracted over
// k (x·wᵀ, the Hugging Face weight layout the engine multiplies by), after one untimed call that compiles the
// graph and puts the inputs on the device, and keeps the fastest of repeats calls.
func measureMatmul(m, k, n, repeats int) (res matmulResult, err error) {
	backend, err := simplego.New("")
	if err != nil {
		return res, fmt.Errorf("simplego backend: %w", err)
	}
	defer backend.Finalize()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("matmul [%d×%d]·[%d×%d]ᵀ: %v", m, k, n, k, r)
		}
	}()
	exec, err := graph.NewExec(backend, func(x, w *graph.Node) *graph.Node {
		return graph.DotGeneral(x, []int{1}, nil, w, []int{1}, nil)
	})
	if err != nil {
		return res, fmt.Errorf("matmul graph: %w", err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return v
	}
	x := tensors.FromFlatDataAndDimensions(random(m*k), m, k)
	w := tensors.FromFlatDataAndDimensions(random(n*k), n, k)
	defer x.FinalizeAll()
	defer w.FinalizeAll()
	res = matmulResult{Op: fmt.Sprintf("simplego DotGeneral float32 [%d×%d]·[%d×%d]ᵀ", m, k, n, k), M: m, K: k,
		N: n, Flops: 2 * float64(m) * float64(k) * float64(n), Repeats: repeats, Best: time.Duration(1<<63 - 1)}
	for i := range repeats + 1 {
		start := time.Now()
		outs, err := exec.Exec(x, w)
		d := time.Since(start)
		if err != nil {
			return res, fmt.Errorf("matmul: %w", err)
		}
		for _, o := range outs {
			o.FinalizeAll()
		}
		if i > 0 {
			res.Best = min(res.Best, d)
		}
	}
	res.GFlops = res.Flops / res.Best.Seconds() / 1e9
	return res, nil
}
