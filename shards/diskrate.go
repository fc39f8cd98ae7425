package shards

import (
	"fmt"
	"os"
	"time"
)

// readProbeSize is the size of MeasureReadRate's probe file: a few of Load's O_DIRECT reads.
const readProbeSize = 4 * directChunk

// MeasureReadRate returns the rate, in bytes per second, at which dir's disk reads a file with O_DIRECT, as
// Load reads shards that do not fit in memory: a probe file is written into dir and synced, read back three
// times in directChunk pieces into a Buffer like Load's, and removed; the best read counts. It fails where
// O_DIRECT is not available (then reads come from the page cache, which no encoding outpaces).
func MeasureReadRate(dir string) (float64, error) {
	f, err := os.CreateTemp(dir, ".read-rate-probe-*")
	if err != nil {
		return 0, err
	}
	path := f.Name()
	defer os.Remove(path)
	buf := NewBuffer(readProbeSize)
	defer buf.Release()
	b := buf.b[:readProbeSize]
	for i := range b {
		b[i] = byte(i * 131 >> 3) // not zeros: no filesystem may skip storing them
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("writing the read-rate probe %s: %w", path, err)
	}
	r, err := openDirect(path)
	if err != nil {
		return 0, fmt.Errorf("O_DIRECT: %w", err)
	}
	defer r.Close()
	best := time.Duration(1<<63 - 1)
	for range 3 {
		start := time.Now()
		for off := 0; off < len(b); off += directChunk {
			if _, err := r.ReadAt(b[off:off+directChunk], int64(off)); err != nil {
				return 0, fmt.Errorf("reading the read-rate probe %s with O_DIRECT: %w", path, err)
			}
		}
		best = min(best, time.Since(start))
	}
	return float64(len(b)) / max(best.Seconds(), 1e-9), nil
}
