//go:build linux

package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/layerstream/layerstream/checkpoint"
	"github.com/layerstream/layerstream/internal/testutil"
	"github.com/layerstream/layerstream/shards"
	"github.com/layerstream/layerstream/synth"
)

// Shard-read benchmarks: loading every unit of a split synthetic TinyLlama-1.1B-shape checkpoint (bf16) into
// one reused buffer, against a plain sequential read of the same files into a reused buffer,
// both from a warm page cache. The checkpoint and its split are built once under the system temp folder
// (layerstream-bench-shardread-L<layers>) and reused by later runs; delete that folder to reclaim the space.
//
//	go test ./bench -run '^$' -bench 'ShardRead|RawRead' -benchtime 10x
//	go test ./bench -run '^$' -bench ShardReadRatio -benchtime 10x     # prints shard/raw throughput ratios
//
// Linux only: the O_DIRECT comparison needs syscall.O_DIRECT.
//	LAYERSTREAM_BENCH_LAYERS=22 go test ./bench -run '^$' -bench ShardReadRatio -benchtime 10x -timeout 30m

// shardBenchLayers is $LAYERSTREAM_BENCH_LAYERS, default 4 (the real model has 22).
func shardBenchLayers(b *testing.B) int {
	s := os.Getenv("LAYERSTREAM_BENCH_LAYERS")
	if s == "" {
		return 4
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("LAYERSTREAM_BENCH_LAYERS=%q: want a positive integer", s)
	}
	return n
}

// shardFixture returns the synthetic checkpoint split with encoding enc, building what is missing.
func shardFixture(b *testing.B, enc shards.Encoding) *shards.Set {
	b.Helper()
	layers := shardBenchLayers(b)
	root := filepath.Join(os.TempDir(), fmt.Sprintf("layerstream-bench-shardread-L%d", layers))
	ckDir, out := filepath.Join(root, "checkpoint"), filepath.Join(root, "shards-"+string(enc))
	if _, err := os.Stat(filepath.Join(ckDir, "config.json")); err != nil { // synth writes config.json last
		shape := synth.Shapes["tinyllama-1.1b"]
		shape.NumLayers = layers
		b.Logf("writing a %d-layer TinyLlama-1.1B-shape checkpoint to %s", layers, ckDir)
		if err := synth.Write(ckDir, synth.Options{Shape: shape, DType: checkpoint.BF16, Seed: 1}); err != nil {
			b.Fatal(err)
		}
	}
	if set, err := shards.Open(out); err == nil {
		return set
	}
	ck, err := checkpoint.Open(ckDir)
	if err != nil {
		b.Fatal(err)
	}
	set, err := shards.Split(context.Background(), ck, shards.SplitOptions{Out: out, Encoding: enc, DiskRate: -1})
	if err != nil {
		b.Fatal(err)
	}
	return set
}

// loadAll loads every unit once; it returns the bytes read and the time spent reading.
func loadAll(b *testing.B, set *shards.Set, buf *shards.Buffer) (int64, time.Duration) {
	var n int64
	var read time.Duration
	for _, u := range set.Units() {
		l, err := set.Load(context.Background(), u.Name, buf)
		if err != nil {
			b.Fatal(err)
		}
		n += l.ReadBytes
		read += l.ReadTime
	}
	return n, read
}

// rawReadAll reads every shard file with plain sequential reads into buf, opened with extra flags.
func rawReadAll(b *testing.B, set *shards.Set, buf []byte, flags int) int64 {
	var n int64
	for _, u := range set.Units() {
		f, err := os.OpenFile(filepath.Join(set.Dir, u.File), os.O_RDONLY|flags, 0)
		if err != nil {
			b.Fatal(err)
		}
		m, err := io.ReadFull(f, buf[:u.FileSize])
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		n += int64(m)
	}
	return n
}

func totalFileBytes(set *shards.Set) int64 {
	var n int64
	for _, u := range set.Units() {
		n += u.FileSize
	}
	return n
}

// BenchmarkShardRead loads every unit (one read, header check, decompression, CRC-32C of every tensor) into a
// reused buffer, for each encoding. Throughput counts decoded model bytes, so the encodings compare directly.
func BenchmarkShardRead(b *testing.B) {
	for _, enc := range []shards.Encoding{shards.Raw, shards.Zstd, shards.ShuffleZstd, shards.Planes} {
		b.Run(string(enc), func(b *testing.B) {
			set := shardFixture(b, enc)
			buf := shards.NewBuffer(int(set.MaxBufferSize()))
			loadAll(b, set, buf) // warm the page cache and the buffer
			var model int64
			for _, u := range set.Units() {
				model += u.Bytes()
			}
			b.SetBytes(model)
			var read time.Duration
			for b.Loop() {
				_, r := loadAll(b, set, buf)
				read += r
			}
			b.ReportMetric(float64(totalFileBytes(set))*float64(b.N)/1e6/read.Seconds(), "read-only-file-MB/s")
			b.ReportMetric(float64(model)/float64(totalFileBytes(set)), "compression")
		})
	}
}

// BenchmarkRawRead reads the same files with plain sequential reads into a reused buffer.
func BenchmarkRawRead(b *testing.B) {
	set := shardFixture(b, shards.Raw)
	buf := shards.NewBuffer(int(set.MaxBufferSize())).Bytes()
	rawReadAll(b, set, buf, 0)
	b.SetBytes(totalFileBytes(set))
	for b.Loop() {
		rawReadAll(b, set, buf, 0)
	}
}

// BenchmarkShardReadRatio alternates the two passes and reports shard-load throughput over raw-read throughput
// ("ratio", target ≥ 0.9) and the same for the time until a Load's last byte is read ("read-ratio"; the checks
// overlap the read, so this includes what they slow it down): from the warm page cache, and with O_DIRECT from
// the disk (both passes bypassing the cache), which is how a model larger than memory streams. A third pass
// loads from the page cache under shards.VerifyOnce, as the engine streams the same unchanged shards every
// token: the checksums ran on the warm-up load, later loads check sizes and tables only.
//
// From the page cache a raw read is one memory copy by the kernel on one core; a full load adds a CRC-32C of
// every byte. Load checksums each 256 KiB chunk while it is in cache (about a third of the copy's cost) or on
// a spare core, so the ratio depends on how busy the machine is: the load average is printed with it, and
// "cpu-cost", the CPU time (user + system, whole process) of the loads over that of the raw reads.
func BenchmarkShardReadRatio(b *testing.B) {
	set := shardFixture(b, shards.Raw)
	for _, name := range []string{"page-cache", "o-direct", "page-cache-verify-once"} {
		b.Run(name, func(b *testing.B) {
			direct := name == "o-direct"
			set.SetDirectIO(direct)
			defer set.SetDirectIO(false)
			if name == "page-cache-verify-once" {
				set.SetVerify(shards.VerifyOnce)
				defer set.SetVerify(shards.VerifyAlways)
			}
			flags := 0
			if direct {
				flags = syscall.O_DIRECT
			}
			buf := shards.NewBuffer(int(set.MaxBufferSize()))
			loadAll(b, set, buf)
			rawReadAll(b, set, buf.Bytes(), flags)
			var shardT, readT, rawT, shardCPU, rawCPU time.Duration
			for b.Loop() {
				start, cpu := time.Now(), testutil.ProcessCPU()
				rawReadAll(b, set, buf.Bytes(), flags)
				rawT += time.Since(start)
				rawCPU += testutil.ProcessCPU() - cpu
				start, cpu = time.Now(), testutil.ProcessCPU()
				_, r := loadAll(b, set, buf)
				shardT += time.Since(start)
				shardCPU += testutil.ProcessCPU() - cpu
				readT += r
			}
			mb := float64(totalFileBytes(set)) * float64(b.N) / 1e6
			b.ReportMetric(rawT.Seconds()/shardT.Seconds(), "ratio")
			b.ReportMetric(rawT.Seconds()/readT.Seconds(), "read-ratio")
			b.ReportMetric(mb/rawT.Seconds(), "raw-MB/s")
			b.ReportMetric(mb/shardT.Seconds(), "shard-MB/s")
			b.ReportMetric(shardCPU.Seconds()/rawCPU.Seconds(), "cpu-cost")
			load, _ := os.ReadFile("/proc/loadavg")
			b.Logf("%s: %d units, %.0f MB per pass, GOMAXPROCS %d, load average %s: raw %.0f MB/s, shard load %.0f MB/s (ratio %.2f), until last byte read ratio %.2f, CPU time %.2fx the raw read's",
				name, len(set.Units()), mb/float64(b.N), runtime.GOMAXPROCS(0), strings.Join(strings.Fields(string(load))[:3], " "),
				mb/rawT.Seconds(), mb/shardT.Seconds(), rawT.Seconds()/shardT.Seconds(), rawT.Seconds()/readT.Seconds(), shardCPU.Seconds()/rawCPU.Seconds())
		})
	}
}

// BenchmarkShardMap: from a warm page cache, under shards.VerifyOnce (as the engine streams), the time to get
// every unit's tensors and read each of their bytes once (as a decode step does): copied into a reused buffer
// (Load), mapped on every call and unmapped when the buffer is reused (Map), and mapped once and kept
// (Map under SetKeepMapped, the engine's default), against reading the same bytes from a resident copy.
//
//	go test ./bench -run '^$' -bench ShardMap -benchtime 10x
func BenchmarkShardMap(b *testing.B) {
	set := shardFixture(b, shards.Raw)
	set.SetVerify(shards.VerifyOnce)
	ctx := context.Background()
	resident := map[string]*shards.Loaded{}
	for _, u := range set.Units() {
		l, err := set.Load(ctx, u.Name, shards.NewBuffer(int(u.BufferSize())))
		if err != nil {
			b.Fatal(err)
		}
		resident[u.Name] = l
	}
	for _, mode := range []string{"resident", "load", "map", "map-kept"} {
		b.Run(mode, func(b *testing.B) {
			set.SetKeepMapped(mode == "map-kept")
			defer set.Close()
			bufs := []*shards.Buffer{shards.NewBuffer(0), shards.NewBuffer(0), shards.NewBuffer(0)} // as the engine's pool
			defer func() {
				for _, buf := range bufs {
					buf.Release()
				}
			}()
			get := func(i int, unit string) *shards.Loaded {
				var l *shards.Loaded
				var err error
				switch mode {
				case "resident":
					return resident[unit]
				case "load":
					l, err = set.Load(ctx, unit, bufs[i%len(bufs)])
				default:
					l, err = set.Map(ctx, unit, bufs[i%len(bufs)])
				}
				if err != nil {
					b.Fatal(err)
				}
				return l
			}
			var sink uint64
			pass := func() {
				for i, u := range set.Units() {
					for _, t := range get(i, u.Name).Tensors {
						sink += sumBytes(t.Data)
					}
				}
			}
			pass()
			b.SetBytes(totalFileBytes(set))
			for b.Loop() {
				pass()
			}
			_ = sink
		})
	}
}

// sumBytes reads every byte of p, eight at a time.
func sumBytes(p []byte) uint64 {
	var s uint64
	for len(p) >= 8 {
		s += binary.LittleEndian.Uint64(p)
		p = p[8:]
	}
	for _, c := range p {
		s += uint64(c)
	}
	return s
}
