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
}

type loadTraceKey struct{}

// WithLoadTrace returns a context carrying t for the Load and Map calls made with it.
func WithLoadTrace(ctx context.Context, t *LoadTrace) context.Context {
	return context.WithValue(ctx, loadTraceKey{}, t)
}

func loadTraceFrom(ctx context.Context) *LoadTrace {
	t, _ := ctx.Value(loadTraceKey{}).(*LoadTrace)
	return t
}
