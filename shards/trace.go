package shards

import "context"

// LoadTrace holds hooks a Load calls as it goes, carried by its context (as net/http/httptrace does for
// requests): a streaming caller uses them to overlap one unit's work with the next one's.
type LoadTrace struct {
	// ReadDone is called, at most once, when the shard file has been read from disk (or its read failed),
	// while encoded tensors may still be decoding and checksums running: the disk is free for the next unit's
	// read. A Load that fails before reading, and a Map of a page-cache mapping (which reads nothing up front),
	// do not call it.
	ReadDone func()
	// Yield, when not nil, is called before each read from the file (Load and LoadPart) and may hold it back,
	// so that a caller's more urgent reads (a layer's routed experts, waited for by the computing layer) have
	// the disk to themselves; its error ends the load. With O_DIRECT such a load reads in yieldChunk pieces, so
	// that an urgent read waits for one piece at most.
	Yield func(context.Context) error
}

// yieldChunk is the O_DIRECT read size of a load with LoadTrace.Yield: an urgent read issued meanwhile waits for
// one such read at most (1.2 ms at 3.4 GB/s), and this VM's disk reads 4 MiB pieces one at a time as fast as
// 16 MiB ones (3.26 and 3.28 GB/s, docs/performance-log.md "Issue 34: gpt-oss read pattern").
const yieldChunk = 4 << 20

type loadTraceKey struct{}

// WithLoadTrace returns a context carrying t for the Load and Map calls made with it.
func WithLoadTrace(ctx context.Context, t *LoadTrace) context.Context {
	return context.WithValue(ctx, loadTraceKey{}, t)
}

func loadTraceFrom(ctx context.Context) *LoadTrace {
	t, _ := ctx.Value(loadTraceKey{}).(*LoadTrace)
	return t
}

// fileReads is how a load reads its shard file (check.runWhileReading).
type fileReads struct {
	read     func(b []byte, off int64) error // fills b from the file (or the part read) at off
	chunk    int                             // the size of each read
	inline   bool                            // page-cache reads: the reading goroutine checksums too
	pieces   bool                            // read in chunks even where no check overlaps the reading
	readDone func()                          // LoadTrace.ReadDone, or nil
}

// tracedReads returns how a load with ctx reads the file of r with read: in r's chunks, or with the context's
// LoadTrace.Yield before each read, in chunks of yieldChunk at most (O_DIRECT) whether or not checks overlap them.
func tracedReads(ctx context.Context, r *shardReader, read func(b []byte, off int64) error) fileReads {
	f := fileReads{read: read, chunk: r.chunk(), inline: !r.direct}
	t := loadTraceFrom(ctx)
	if t == nil {
		return f
	}
	f.readDone = t.ReadDone
	if t.Yield != nil {
		f.pieces = true
		if r.direct {
			f.chunk = min(f.chunk, yieldChunk)
		}
		f.read = func(b []byte, off int64) error {
			if err := t.Yield(ctx); err != nil {
				return err
			}
			return read(b, off)
		}
	}
	return f
}
